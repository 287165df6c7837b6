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

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
#include "absl/strings/string_view.h"
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

  // prometheus::Collectable: one family (none: no family), series in the order of their keys'
  // FNV-1a hashes, then their keys: the same in every run and whatever order they were set in.
  std::vector<prometheus::MetricFamily> Collect() const override ABSL_LOCKS_EXCLUDED(mu_);
  // telemetry::TextSource: the same family, series in the same order (none: nothing).
  void AppendText(telemetry::TextWriter& out, telemetry::ExpositionFormat format) const override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Series {  // the labels only as text: Collect parses them back
    std::string key;
    absl::Time since;
    std::string text;  // the rendered labels
  };
  static double Age(const Series& series, absl::Time now);
  // A series' place: the hash of its key, then the key (as telemetry::TextFamily places a series
  // by its label text). Keys share long prefixes ("namespace/claim-"), and at a series per
  // pending claim of a fleet they are not in cache: ordered by the keys themselves, a search
  // compared a key behind a pointer at every level, a cache miss each, in a tree whose nodes
  // held three series; by hash, a search reads a key only to confirm the one it found.
  struct Slot {
    uint64_t hash;
    std::unique_ptr<Series> series;
  };
  struct Probe {
    uint64_t hash;
    absl::string_view key;
  };
  // Where a scrape's next piece resumes: it owns its key (that series may be gone by then).
  struct Cursor {
    uint64_t hash;
    std::string key;
  };
  struct Order {
    using is_transparent = void;
    bool operator()(const Slot& a, const Slot& b) const {
      return (*this)(Probe{a.hash, a.series->key}, Probe{b.hash, b.series->key});
    }
    bool operator()(const Slot& a, const Probe& b) const {
      return (*this)(Probe{a.hash, a.series->key}, b);
    }
    bool operator()(const Probe& a, const Slot& b) const {
      return (*this)(a, Probe{b.hash, b.series->key});
    }
    bool operator()(const Slot& a, const Cursor& b) const {
      return (*this)(a, Probe{b.hash, b.key});
    }
    bool operator()(const Cursor& a, const Slot& b) const {
      return (*this)(Probe{a.hash, a.key}, b);
    }
    bool operator()(const Probe& a, const Probe& b) const {
      return a.hash != b.hash ? a.hash < b.hash : a.key < b.key;
    }
  };
  static Probe PlaceOf(absl::string_view key);

  const std::string name_;
  const std::string help_;
  common::Clock& clock_;
  mutable absl::Mutex mu_;
  absl::btree_set<Slot, Order> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dralens::exporter::cluster
