// TextFamily: a gauge or counter family that keeps each series' exposition text.
//
// A series' label text (`{node="a",state="free"}`) is rendered once, when the series is added,
// and is all that is kept of its labels;
// a scrape writes each line as the family's name, that text and the current value, without
// building prometheus-cpp's label vectors, copying them or sorting them again. For families with
// a series per node or object at fleet scale: at 100k claims those steps were most of the
// cluster role's scrape. Add and Remove cost O(log n).
//
// Series are kept, and written, in a fixed order that is not the label text's: by an FNV-1a
// hash of the text (the same in every run), then the text. Label texts of one family share long
// prefixes (`{device_class="",kind="free_while_pending",node="node-0`), so ordering by the text
// cost a string comparison, behind a pointer, at every step of every insert; the hash sits in
// the index itself and decides almost every comparison. The exposition formats do not ask for
// any order of the series within a family.
//
// The families are rendered by the metrics server through TextFamilies (a TextSource), next to
// the registries; Collect() gives the same series as prometheus::MetricFamily for code that
// reads families (tests, debugging). Thread-safe: one mutex per family, and the values are
// prometheus-cpp's atomic gauges and counters.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
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
  // The same for labels already rendered by LabelText or LabelTextOf (names sorted): a caller
  // that adds one label set to several families renders its text once, and builds no label map.
  T& AddText(std::string label_text) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops a series Add() or AddText() returned; nothing for any other pointer.
  void Remove(T* metric) ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

  void AppendText(TextWriter& out, ExpositionFormat format) const override ABSL_LOCKS_EXCLUDED(mu_);
  prometheus::MetricFamily CollectFamily() const override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A series: its label text, the only form its labels are kept in (CollectFamily parses them
  // back: a copy of each series' label map took as much memory as everything else of it).
  struct Series {
    explicit Series(std::string label_text) : text(std::move(label_text)) {}
    const std::string text;
    T metric;
  };
  // A series' place in the index: the hash of its text, then the text.
  struct Slot {
    uint64_t hash;
    std::unique_ptr<Series> series;
  };
  // A place in the index, for a lookup; a Cursor owns its text (where a scrape's next piece
  // resumes, after a series that may be gone by then).
  struct Probe {
    uint64_t hash;
    absl::string_view text;
  };
  struct Cursor {
    uint64_t hash;
    std::string text;
  };
  struct Order {
    using is_transparent = void;
    bool operator()(const Slot& a, const Slot& b) const;
    bool operator()(const Slot& a, const Probe& b) const;
    bool operator()(const Probe& a, const Slot& b) const;
    bool operator()(const Slot& a, const Cursor& b) const;
    bool operator()(const Cursor& a, const Slot& b) const;
  };

  const std::string name_;
  const std::string help_;
  mutable absl::Mutex mu_;
  absl::btree_set<Slot, Order> series_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const T*, Probe> place_of_ ABSL_GUARDED_BY(mu_);  // text: the series'
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
