// The analyzer's inner state: the records it keeps per device, counter set, request, claim,
// series and node, and the rules they are judged by. Private to exporter/cluster/analyzer*.cc,
// which implement the Analyzer by concern:
//   analyzer.cc            construction, selectors, device state, Tick and queries
//   analyzer_inventory.cc  slices, classes, nodes and pods as they come and go
//   analyzer_claims.cc     claims: allocations, reservations, states, transitions
//   analyzer_pending.cc    pending claims' reasons, from counts kept per request shape
//   analyzer_gpus.cc       the derived series: physical GPUs, stranded capacity, MIG placement
// and uses what lives apart from them: label_ids.h (label values as integers),
// lifecycle_tracer.h (each claim's span), object_series.h (per-claim series), findings.h (the
// pure classifiers).
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

inline constexpr double kEpsilon = 1e-9;

// What the interned name fields of a Device or Claim point at until they are set.
inline const std::string kNoName;

// Allocation latencies: from a second (a scheduler that keeps up) to an hour (a claim that
// waited for capacity).
const prometheus::Histogram::BucketBoundaries& LatencyBuckets();

std::string DeviceKey(absl::string_view driver, absl::string_view pool, absl::string_view device);

// Counters and capacities that count a GPU's MIG memory slices: the unit MIG placement is made
// of (a GPU has 8, or 4 on an A30; every instance owns whole slices and no two share one).
bool IsMemorySlice(absl::string_view name);

// The share of `capacity` that `used` takes, by the rule of docs/cluster.md: memory slices
// when the set counts them, else memory, else the scarcest counter.
double ShareOf(const std::map<std::string, double>& capacity,
               const std::map<std::string, double>& used);

struct Analyzer::Device {
  Key key;
  std::string slice;
  std::string pool, node;
  uint32_t driver_id = 0, product_id = 0;  // LabelIds of driver and product
  // Driver, product ("productName"), type and profile: a fleet's vocabulary, kept once in the
  // analyzer's LabelIds (which never forgets a value).
  const std::string* driver_name = &kNoName;
  const std::string* product_name = &kNoName;
  const std::string* type_name = &kNoName;
  const std::string* profile_name = &kNoName;
  const std::string& driver() const { return *driver_name; }
  const std::string& product() const { return *product_name; }
  const std::string& type() const { return *type_name; }
  const std::string& profile() const { return *profile_name; }
  CompactSpec spec;      // what the analysis reads of the published device
  bool tainted = false;  // a NoSchedule/NoExecute taint (fit::Blocking)
  // The physical GPU it is (part of): its counter set, else its parent's or its own UUID,
  // else the device itself. Devices with the same key are one GPU.
  std::string gpu;
  // Without counters: its weight among the devices of its GPU (memory slices, else memory).
  double weight = 1;
  std::map<std::string, double> capacity;
  bool counted = false;       // its part is in the leaves' counts
  bool counted_free = false;  // counted as free (not held, not blocked, node up)
  std::vector<fit::CounterConsumption> consumes;  // by set key
  std::vector<uint32_t> class_ids;                // classes it surely matches (LabelIds)
  std::vector<std::string> unknown_classes;       // classes whose selectors it cannot judge
  // Cached selector verdicts by selector id, sorted: a handful per device, so a flat vector
  // (a hash map cost about 4 times the memory).
  std::vector<std::pair<int, cel::Verdict>> verdicts;
};

struct Analyzer::CounterSet {
  std::string key, slice, node, name;
  std::map<std::string, double> capacity;
  std::map<std::string, double> used;
  std::set<Key> devices;
};

struct Analyzer::Request {
  std::string name;  // "gpu", or "gpu/h100" for an option of a firstAvailable request
  std::string signature;
  std::string device_class;
  std::vector<int> selectors;
  std::vector<model::DeviceToleration> tolerations;
  bool all = false;
  int64_t count = 1;
  std::vector<std::shared_ptr<Request>> alternatives;  // firstAvailable: any one will do
};

struct Analyzer::Claim {
  Key key;  // "ns/name"
  std::string uid;
  absl::string_view name;            // in `key`
  uint32_t ns_id = 0, class_id = 0;  // LabelIds of ns and device_class
  // Namespace and class (its first request's): vocabulary, kept once in the analyzer's LabelIds.
  const std::string* ns_name = &kNoName;
  const std::string* class_name = &kNoName;
  const std::string& ns() const { return *ns_name; }
  const std::string& device_class() const { return *class_name; }
  absl::Time created = absl::InfinitePast();
  std::vector<std::shared_ptr<Request>> requests;
  std::vector<std::pair<Key, std::string>> devices;  // device key, class of its request
  std::vector<Key> reserved_pods;
  bool allocated = false;
  std::optional<absl::Time> allocation_time;
  bool has_state = false;
  ClaimState state = ClaimState::kPending;
  bool pending = false;
  bool seen_pending = false;
  std::optional<PendingReason> reason;
  bool age = false;  // has a pending age series
  // Two or more devices allocated: where they landed (spread and NVLink), and its series.
  std::optional<ClaimTopology> spread;
  std::set<Key> spread_devices;  // the devices `spread` was derived from
  prometheus::Gauge* spread_series = nullptr;
  // What earlier allocations of this claim held, in GPU-seconds and at their prices.
  double spent_gpu_seconds = 0;
  double spent_cost = 0;
  telemetry::SpanPtr span;
};

struct Analyzer::Series {
  prometheus::Gauge* gauge = nullptr;
  prometheus::Counter* seconds = nullptr;
  prometheus::Counter* cost = nullptr;
  double price_per_second = 0;
  double gpus = 0;
  absl::Time last;
};

// Label keys (LabelKey, ids from Analyzer::labels_) of the per-node and fleet series:
//   pool      (driver, class, product)              dralens_cluster_pool_devices
//   gpus      (driver, product, GpuState)           dralens_cluster_gpus
//   stranded  (StrandedKind, product, class)        dralens_cluster_stranded_*
//   held      (namespace, class, product, Usage)    dralens_cluster_gpu_seconds_total, _cost_total
enum class Usage : uint32_t { kInUse, kAllocatedNotRunning };
absl::string_view ToString(Usage usage);

struct Analyzer::NodeAggregate {
  // What the node adds to dralens_cluster_pool_devices, indexed by PoolState.
  LabelTable<std::array<int, kPoolStates>> pool;
  LabelTable<prometheus::Gauge*> gpu_gauges;
  // The node's stranded series: once created they stay (their counters must not reset), at 0
  // while the node strands nothing of that kind.
  LabelTable<std::unique_ptr<Series>> stranded;
  LabelTable<double> held;
  std::map<std::vector<std::string>, prometheus::Gauge*> placeable;  // gpu, profile
};

struct Analyzer::PendingShape {
  std::shared_ptr<Request> request;
  std::set<std::pair<absl::Time, Key>> claims;  // (created, key): oldest first
};

struct Analyzer::LeafCounts {
  std::shared_ptr<Request> request;
  std::set<std::string> shapes;  // signatures of the pending shapes that use it
  int64_t unknown = 0, matching = 0, untainted = 0, free = 0;
  // The nodes of the free devices counted in `free`, with how many each has: where a change of
  // this leaf's longest-pending claim can move free_while_pending attribution.
  std::map<std::string, int> free_nodes;
  std::optional<PendingReason> last;  // the reason the pending claims were last given
};

struct Analyzer::GpuTally {
  LabelTable<double> gpus;
  LabelTable<double> stranded;
  // GPU-equivalents held by claims (in_use while a reserving pod runs, else
  // allocated_not_running).
  LabelTable<double> held;
};

}  // namespace dralens::exporter::cluster
