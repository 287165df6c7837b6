// What the analyzer derives from the objects of its ClusterState (cluster_state.h): records
// per series, node, pending request shape and leaf request. Private to
// exporter/cluster/analyzer*.cc, which implement the Analyzer by concern:
//   analyzer.cc            construction, selectors, classification, device state, Tick, queries
//   analyzer_inventory.cc  slices, classes, nodes and pods as they come and go
//   analyzer_claims.cc     claims: allocations, reservations, states, transitions
//   analyzer_pending.cc    pending claims' reasons, from counts kept per request shape
//   analyzer_gpus.cc       the derived series: physical GPUs and stranded capacity, by GPU
//   analyzer_pools.cc      published devices by class and state, MIG placement
// and uses what lives apart from them: cluster_state.h (the objects and their indexes),
// label_ids.h (label values as integers), lifecycle_tracer.h (each claim's span),
// object_series.h (per-claim series), findings.h (the pure classifiers).
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/compact_spec.h"
#include "exporter/cluster/label_ids.h"
#include "prometheus/histogram.h"
#include "src/cel/cel.h"
#include "src/fit/device_fit.h"
#include "src/model/resource.h"
#include "src/telemetry/tracing/tracer.h"

namespace dralens::exporter::cluster {

// Allocation latencies: from a second (a scheduler that keeps up) to an hour (a claim that
// waited for capacity).
const prometheus::Histogram::BucketBoundaries& LatencyBuckets();

// Counters and capacities that count a GPU's MIG memory slices: the unit MIG placement is made
// of (a GPU has 8, or 4 on an A30; every instance owns whole slices and no two share one).
bool IsMemorySlice(absl::string_view name);

// The share of `capacity` that `used` takes, by the rule of docs/cluster.md: memory slices
// when the set counts them, else memory, else the scarcest counter.
double ShareOf(const std::map<std::string, double>& capacity,
               const std::map<std::string, double>& used);

struct Analyzer::Series {
  prometheus::Gauge* gauge = nullptr;
  prometheus::Counter* seconds = nullptr;
  prometheus::Counter* cost = nullptr;
  double price_per_second = 0;
  double gpus = 0;
  absl::Time last;
  // A stranded series: since when it has been at 0 (InfiniteFuture while it is not); Tick drops
  // it once that is longer ago than the retention.
  absl::Time idle_since = absl::InfiniteFuture();
};

// Label keys (LabelKey, ids from Analyzer::labels_) of the per-node and fleet series:
//   pool      (driver, class, product)              dralens_cluster_pool_devices
//   gpus      (driver, product, GpuState)           dralens_cluster_gpus
//   stranded  (StrandedKind, product, class)        dralens_cluster_stranded_*
//   held      (namespace, class, product, Usage)    dralens_cluster_gpu_seconds_total, _cost_total
enum class Usage : uint32_t { kInUse, kAllocatedNotRunning };
absl::string_view ToString(Usage usage);

struct Analyzer::GpuTally {
  LabelTable<double> gpus;
  LabelTable<double> stranded;
  // GPU-equivalents held by claims (in_use while a reserving pod runs, else
  // allocated_not_running).
  LabelTable<double> held;
};

// One addition a GPU makes to its node's tally (GpuTally): `table` 0 is gpus, 1 stranded,
// 2 held.
struct Analyzer::GpuPartEntry {
  uint32_t gpu = 0;  // Device::gpu_first of the GPU's devices
  uint8_t table = 0;
  LabelKey labels;
  double gpus = 0;
};

struct Analyzer::NodeAggregate {
  // What the node adds to dralens_cluster_pool_devices, indexed by PoolState.
  LabelTable<std::array<int, kPoolStates>> pool;
  // Its dralens_cluster_gpus series, with the value last set.
  struct GpuSeries {
    prometheus::Gauge* gauge = nullptr;
    double value = 0;
  };
  LabelTable<GpuSeries> gpu_series;
  // The node's stranded series: once created they stay while the node strands that kind for
  // that class, and at 0 for the retention after it stops (AnalyzerOptions::stranded_retention),
  // so that their counters do not reset while the stranding flaps and every scrape reads their
  // last values; then Tick drops them. Kept in the table, not behind a pointer each: a recompute
  // reads every one of them.
  LabelTable<Series> stranded;
  LabelTable<double> held;
  // What each of its GPUs adds to its tally, by Device::gpu_first and in the order TallyGpu
  // found it: the node's tally is their sum in that order, the same sum whichever GPUs were
  // tallied again, and a change tallies again only the GPUs it touched.
  std::vector<GpuPartEntry> parts;
  std::map<std::vector<std::string>, prometheus::Gauge*> placeable;  // gpu, profile
};

// A pending claim in its shape's order: oldest first, then by key (read only when two were
// created at the same time).
struct Analyzer::PendingAge {
  absl::Time created;
  Claim* claim = nullptr;
};
struct Analyzer::ByAge {
  bool operator()(const PendingAge& a, const PendingAge& b) const {
    return a.created != b.created ? a.created < b.created : a.claim->key < b.claim->key;
  }
};

struct Analyzer::PendingShape {
  std::shared_ptr<Request> request;
  // Oldest first. A B-tree: up to every pending claim of the fleet, and a claim that stops
  // pending is found in a few node visits rather than a red-black path. Entries point at their
  // claims (which leave before they go: LeavePending), so that the longest-pending claim of a
  // shape is read without a lookup by key, and an entry is 24 bytes, not a copy of the key.
  absl::btree_set<PendingAge, ByAge> claims;
};

struct Analyzer::LeafCounts {
  std::shared_ptr<Request> request;
  std::set<std::string> shapes;  // signatures of the pending shapes that use it
  int64_t unknown = 0, matching = 0, untainted = 0, free = 0;
  // The nodes of the free devices counted in `free`, with how many each has: where a change of
  // this leaf's longest-pending claim can move free_while_pending attribution.
  absl::flat_hash_map<std::string, int> free_nodes;
  std::optional<PendingReason> last;  // the reason the pending claims were last given
};

}  // namespace dralens::exporter::cluster
