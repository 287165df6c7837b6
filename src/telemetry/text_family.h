// TextFamily: a gauge or counter family that keeps each series' exposition text.
//
// A series' label text (`{node="a",state="free"}`) is rendered once, when the series is added,
// and is all that is kept of its labels;
// a scrape writes each line as the family's name, that text and the current value, in
// label-text order, without building prometheus-cpp's label vectors, copying them or sorting
// them again. For families with a series per node or object at fleet scale: at 100k claims those
// steps were most of the cluster role's scrape. Add and Remove cost O(log n).
//
// The families are rendered by the metrics server through TextFamilies (a TextSource), next to
// the registries; Collect() gives the same series as prometheus::MetricFamily for code that
// reads families (tests, debugging). Thread-safe: one mutex per family, and the values are
// prometheus-cpp's atomic gauges and counters.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/labels.h"
#include "prometheus/metric_family.h"
#include "src/telemetry/exposition.h"

namespace dralens::telemetry {

class TextFamilyBase {
 public:
  virtual ~TextFamilyBase() = default;
  virtual void AppendText(TextWriter& out, ExpositionFormat format) const = 0;
  virtual prometheus::MetricFamily CollectFamily() const = 0;
};

// T is prometheus::Gauge or prometheus::Counter.
template <typename T>
class TextFamily : public TextFamilyBase {
 public:
  // `name` must be in the catalogue (src/telemetry/catalog.cc) with T's kind; help from there.
  explicit TextFamily(absl::string_view name);

  // The series with these labels, created (at 0) the first time. The reference stays valid
  // until Remove().
  T& Add(const prometheus::Labels& labels) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops a series Add() returned; nothing for any other pointer.
  void Remove(T* metric) ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

  void AppendText(TextWriter& out, ExpositionFormat format) const override ABSL_LOCKS_EXCLUDED(mu_);
  prometheus::MetricFamily CollectFamily() const override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::string name_;
  const std::string help_;
  mutable absl::Mutex mu_;
  // By label text, the only form the labels are kept in (CollectFamily parses them back): a
  // copy of each series' label map took as much memory as everything else of the series.
  std::map<std::string, std::unique_ptr<T>> series_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const T*, const std::string*> text_of_ ABSL_GUARDED_BY(mu_);
};

// The families of a component, rendered together. Families are added before the first scrape
// and live as long as this object.
class TextFamilies : public TextSource, public prometheus::Collectable {
 public:
  TextFamily<prometheus::Gauge>& AddGauge(absl::string_view name);
  TextFamily<prometheus::Counter>& AddCounter(absl::string_view name);

  // TextSource: every family with series.
  void AppendText(TextWriter& out, ExpositionFormat format) const override;
  // prometheus::Collectable: the same series as MetricFamily (families without series left out).
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::vector<std::unique_ptr<TextFamilyBase>> families_;
};

}  // namespace dralens::telemetry
