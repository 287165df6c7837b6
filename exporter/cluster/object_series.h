// ObjectSeries: one gauge family whose series belong to objects (one per pending claim), kept
// by object key so that adding and deleting a series costs O(log n). Each series reads the
// seconds since a time of its object (a claim's creation): the value is computed when the
// series is collected, so nothing refreshes it between scrapes.
//
// prometheus-cpp 1.0.1's Family::Remove scans the whole family, so a family with a series per
// pending claim made every allocation cost O(pending claims); refreshing every age on a timer
// cost O(pending claims) per tick. This store is collected next to the cluster registry
// (LeaderGate); each series' label text is rendered once, when it is set, and a scrape writes
// that text and the age (as telemetry::TextFamily does).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "src/common/clock.h"
#include "src/telemetry/exposition.h"

namespace dralens::exporter::cluster {

class ObjectSeries : public prometheus::Collectable, public telemetry::TextSource {
 public:
  // `name` must be a gauge of the catalogue (src/telemetry/catalog.cc); its help comes from
  // there. `clock` (null: the real clock) must outlive the store.
  explicit ObjectSeries(const std::string& name, common::Clock* clock = nullptr);

  // Creates or replaces the series of `key`, with these labels (in this order); it reads the
  // seconds from `since` to the time it is collected (0 before `since`).
  void Set(const std::string& key, std::vector<prometheus::ClientMetric::Label> labels,
           absl::Time since) ABSL_LOCKS_EXCLUDED(mu_);
  void Erase(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

  // prometheus::Collectable: one family, series in key order (none: no family).
  std::vector<prometheus::MetricFamily> Collect() const override ABSL_LOCKS_EXCLUDED(mu_);
  // telemetry::TextSource: the same family, series in key order (none: nothing).
  void AppendText(telemetry::TextWriter& out, telemetry::ExpositionFormat format) const override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Series {  // the labels only as text: Collect parses them back
    absl::Time since;
    std::string text;  // the rendered labels
  };
  static double Age(const Series& series, absl::Time now);

  const std::string name_;
  const std::string help_;
  common::Clock& clock_;
  mutable absl::Mutex mu_;
  // A B-tree: a series per pending claim, and keys that share long prefixes ("namespace/claim-"),
  // which a red-black tree compares at every one of its levels, a cache miss each.
  absl::btree_map<std::string, Series> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dralens::exporter::cluster
