// ObjectSeries: one gauge family whose series belong to objects (one per pending claim), kept
// by object key so that adding, updating and deleting a series costs O(log n).
//
// prometheus-cpp 1.0.1's Family::Remove scans the whole family, so a family with a series per
// pending claim made every allocation cost O(pending claims). This store is collected next to
// the cluster registry (LeaderGate); each series' label text is rendered once, when it is set,
// and a scrape writes that text and the value (as telemetry::TextFamily does).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "src/telemetry/exposition.h"

namespace dralens::exporter::cluster {

class ObjectSeries : public prometheus::Collectable, public telemetry::TextSource {
 public:
  // `name` must be a gauge of the catalogue (src/telemetry/catalog.cc); its help comes from
  // there.
  explicit ObjectSeries(const std::string& name);

  // Creates or replaces the series of `key`, with these labels (in this order) and value.
  void Set(const std::string& key, std::vector<prometheus::ClientMetric::Label> labels,
           double value) ABSL_LOCKS_EXCLUDED(mu_);
  // Updates the value of `key`'s series; nothing when it has none.
  void SetValue(const std::string& key, double value) ABSL_LOCKS_EXCLUDED(mu_);
  void Erase(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

  // prometheus::Collectable: one family, series in key order (none: no family).
  std::vector<prometheus::MetricFamily> Collect() const override ABSL_LOCKS_EXCLUDED(mu_);
  // telemetry::TextSource: the same family, series in key order (none: nothing).
  void AppendText(telemetry::TextWriter& out, telemetry::ExpositionFormat format) const override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::string name_;
  const std::string help_;
  mutable absl::Mutex mu_;
  struct Series {  // the labels only as text: Collect parses them back
    double value = 0;
    std::string text;  // the rendered labels
  };
  std::map<std::string, Series> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dralens::exporter::cluster
