// Analyzer: the cluster role's findings, kept up to date per watch event.
//
// It holds the decoded claims, slices, classes, pods and nodes and, after every event, updates
// only what that event touches: the claim's own series, the devices and nodes whose state
// changed, and the pending claims whose verdict could have moved. A scrape renders series that
// are already set (dralens_cluster_* in the registry given to the constructor); the only value
// computed at scrape time is a pending claim's age (ObjectSeriesCollectable(): now minus its
// creation, so no timer walks the pending claims). Tick() (called periodically) accrues the
// stranded and held GPU-seconds and their cost; accrual also happens whenever a series
// changes, so the counters are exact at every event. Tick also drops the stranded series that
// have been at 0 for the retention (AnalyzerOptions::stranded_retention).
//
// How things are decided:
//  - claim state: pending (no allocation), allocated, reserved (status.reservedFor set),
//    in_use (a reserving pod is Running);
//  - whether a device fits a request is decided by src/fit/device_fit.h (the rules the demo's
//    scheduler stand-in allocates by): every CEL selector of the class and the request is true
//    (src/cel), no untolerated NoSchedule/NoExecute taint, shared counters left; verdicts are
//    cached per (selector, device) and dropped when the device is republished;
//  - pending reason, per request, most severe across requests: unsatisfiable (no matching
//    device), unknown (no definite match and a selector outside the CEL subset), tainted
//    (every match carries an untolerated NoSchedule/NoExecute taint), no_capacity (too few
//    matches are free), else waiting_for_pod;
//  - a device is allocated when a claim holds it; with allowMultipleAllocations, only when a
//    consumed capacity reaches the device's value; a partitionable device whose shared
//    counters are used up by other allocations counts as allocated too.
//  - capacity and stranded capacity are counted in physical GPUs (docs/cluster.md): devices
//    sharing a counter set, a parentUUID or a uuid are one GPU; a held device counts as the
//    fraction of its GPU it takes (memory slices, or the consumed share of a capacity); each
//    part is unavailable, allocated or free, and stranded under at most one kind and class.
//
// Thread-safe (one mutex): informer threads call the event methods concurrently. The objects
// and their indexes live in a ClusterState (cluster_state.h); what the analyzer derives from
// them, and the files that implement it by concern, are in analyzer_state.h.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "exporter/cluster/cluster_state.h"
#include "exporter/cluster/compact_spec.h"
#include "exporter/cluster/explain.h"
#include "exporter/cluster/findings.h"
#include "exporter/cluster/label_ids.h"
#include "exporter/cluster/lifecycle_tracer.h"
#include "exporter/cluster/object_series.h"
#include "exporter/cluster/pricing.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "src/cel/cel.h"
#include "src/common/clock.h"
#include "src/fit/device_fit.h"
#include "src/model/core.h"
#include "src/model/resource.h"
#include "src/telemetry/text_family.h"
#include "src/telemetry/tracing/tracer.h"

namespace dralens::exporter::cluster {

struct AnalyzerOptions {
  PriceTable prices;
  // Clock for ages, latencies and device-seconds; must outlive the analyzer. Null: real clock.
  common::Clock* clock = nullptr;
  // Keep what the initial LISTs deliver without deriving anything (pending reasons, node
  // capacity, stranded series) until SetSynced(), which derives it all once.
  bool derive_after_sync = false;
  // DeviceClasses whose multi-device claims should land close together: their
  // dralens_cluster_claim_spread series say topology_sensitive="true".
  std::set<std::string> topology_sensitive_classes = {};
  // How long a node's stranded series (dralens_cluster_stranded_gpus and its two counters, one
  // label set) stay at 0 before Tick() drops them. Long enough for every scrape to read a
  // counter's last value; short enough that a node keeps series only for what it strands now or
  // stranded lately, not for every (kind, class) it ever stranded, and that a deleted node's
  // series go.
  absl::Duration stranded_retention = absl::Minutes(15);
};

class Analyzer {
 public:
  // `registry` receives the dralens_cluster_* families; `tracer` the claim lifecycle spans.
  // Both must outlive the analyzer.
  Analyzer(prometheus::Registry& registry, telemetry::Tracer& tracer, AnalyzerOptions options);
  ~Analyzer();  // ends the lifecycle spans of claims still open (without a deleted event)
  Analyzer(const Analyzer&) = delete;
  Analyzer& operator=(const Analyzer&) = delete;

  void UpsertClaim(const model::ResourceClaim& claim) ABSL_LOCKS_EXCLUDED(mu_);
  void DeleteClaim(const model::ResourceClaim& claim) ABSL_LOCKS_EXCLUDED(mu_);
  void UpsertSlice(const model::ResourceSlice& slice) ABSL_LOCKS_EXCLUDED(mu_);
  // A slice whose devices are decoded on demand. `head` is the slice without its devices;
  // `digests` has one entry per published device, in order: a hash of the device's JSON text and
  // of the slice's driver, pool name and node name (what of the slice a device record depends
  // on), or 0 when unknown. A device this slice already published under the same digest stays
  // as it is without being decoded; `decode(i)` decodes device i for every other one (under the
  // analyzer's lock: it must not call the analyzer). When one does not decode, the slice is left
  // as it was and the error is returned.
  absl::Status UpsertSlice(const model::ResourceSlice& head, absl::Span<const uint64_t> digests,
                           absl::FunctionRef<absl::StatusOr<model::SliceDevice>(size_t)> decode)
      ABSL_LOCKS_EXCLUDED(mu_);
  void DeleteSlice(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  void UpsertClass(const model::DeviceClass& device_class) ABSL_LOCKS_EXCLUDED(mu_);
  void DeleteClass(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  void UpsertPod(const model::Pod& pod) ABSL_LOCKS_EXCLUDED(mu_);
  void DeletePod(const std::string& ns, const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  void UpsertNode(const NodeInfo& node) ABSL_LOCKS_EXCLUDED(mu_);
  void DeleteNode(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  // From now on a node that is not in the cache is gone (its devices are advertised while
  // its driver is down). Call once the Node informer has synced.
  void SetNodesSynced() ABSL_LOCKS_EXCLUDED(mu_);
  // Every informer has synced: with derive_after_sync, derives the findings of everything
  // received so far, once; from then on each event updates what it touches. Idempotent.
  void SetSynced() ABSL_LOCKS_EXCLUDED(mu_);
  // Accrues device-seconds and cost up to now; drops the stranded series that have been at 0 for
  // the retention (AnalyzerOptions::stranded_retention), and the records of nodes left with
  // nothing.
  void Tick() ABSL_LOCKS_EXCLUDED(mu_);

  // The current pending verdict of a claim ("ns/name"), for tests and /debug.
  std::optional<PendingReason> PendingReasonOf(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<ClaimState> StateOf(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Why the claim pends (each request's funnel) or where it landed, what it holds and what it
  // has cost so far; nullopt for a claim not in the cache. O(devices of the requests' classes).
  // `funnels`, when given, keeps the funnels computed by request shape across calls: claims of
  // one shape share one scan (the Events pass explains many claims of few shapes).
  // `scan_limit`: a request whose class has more devices than this is explained from the counts
  // kept per request shape (RequestFunnel::counts_only) instead of a scan of its devices, so
  // that the Events pass costs O(1) per claim at fleet scale.
  using FunnelCache = std::map<std::string, RequestFunnel>;
  std::optional<ClaimExplanation> Explain(const std::string& ns, const std::string& name,
                                          FunnelCache* funnels = nullptr,
                                          size_t scan_limit = SIZE_MAX) ABSL_LOCKS_EXCLUDED(mu_);
  // A pending claim as VisitPending shows it: views of the analyzer's record, valid during the
  // call only.
  struct PendingView {
    absl::string_view key, ns, name, uid;  // key: "ns/name"
    PendingReason reason = PendingReason::kWaitingForPod;
    absl::Time created = absl::InfinitePast();
  };
  // Calls `visit` with each pending claim that has a reason, in no set order, under the
  // analyzer's lock: `visit` must not call the analyzer. O(pending) and copies nothing, for the
  // Events pass, which walks every pending claim (20k at fleet scale) every few seconds.
  void VisitPending(absl::FunctionRef<void(const PendingView&)> visit) ABSL_LOCKS_EXCLUDED(mu_);
  // The devices the pending claims `claims` (of namespace `ns`) lack when evaluated together: each
  // request, in order, takes free matching devices that no earlier request of these claims took
  // (within what shared counters have left); a firstAvailable request takes its first option
  // that is met in full, else counts its first option's shortfall. Allocated or unknown claims
  // count nothing. For gangs (gangs.h).
  int64_t ShortTogether(const std::string& ns, const std::vector<std::string>& claims)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The per-object series that live outside the registry given to the constructor
  // (dralens_cluster_pending_claim_age_seconds); the metrics server collects them beside it.
  std::shared_ptr<const ObjectSeries> ObjectSeriesCollectable() const { return pending_ages_; }
  // The per-node families (dralens_cluster_gpus, _stranded_*, _mig_placeable),
  // rendered as text beside the registry; also a Collectable for code that reads families.
  std::shared_ptr<const telemetry::TextFamilies> TextSeries() const { return text_series_; }

 private:
  struct Series;
  struct NodeAggregate;
  struct PendingAge;
  struct ByAge;
  struct PendingShape;
  struct GpuTally;
  struct GpuPartEntry;
  struct LeafCounts;
  using Key = std::string;
  using DeviceMap = ClusterState::DeviceMap;

  // Selector evaluation, cached per (selector, device).
  int SelectorId(const std::string& expression) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // On a cache miss the selector reads `view` when given (the device as just published), else
  // maps rebuilt from the device's CompactSpec.
  cel::Verdict Evaluate(Device& device, int selector, const cel::DeviceView* view = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  cel::Verdict MatchesAll(Device& device, const std::vector<int>& selectors,
                          const cel::DeviceView* view = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ClassifyDevice(Device& device, const cel::DeviceView* view = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnclassifyDevice(Device& device) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool RequestFits(const Request& request, Device& device) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A device of a slice being published: decoded, or held as it is (`held`: its place among the
  // devices the slice published last time; -1 for none).
  struct PublishedDevice {
    uint64_t digest = 0;
    const model::SliceDevice* decoded = nullptr;
    int32_t held = -1;
  };
  // `devices`: one per digest, held where slice `name` already publishes a device of that digest
  // (each place once), else to be decoded.
  void MatchHeld(const std::string& name, absl::Span<const uint64_t> digests,
                 std::vector<PublishedDevice>& devices) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A device republished with other taints and nothing else changed: takes them in place.
  void RetaintDevice(Device& device, const std::vector<model::DeviceTaint>& taints)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A device that a republish replaced under the same key, as it was before.
  struct Replaced {
    std::string node;
    std::string gpu;
    uint32_t driver_id = 0;
    uint32_t product_id = 0;
    std::vector<uint32_t> class_ids;
    int8_t pool_state = -1;
    bool consumed = false;  // it consumed shared counters
    bool node_was_dirty = false;
  };
  // After a republish: when every device in `changed` replaced one in `replaced` on the same
  // node and GPU, with the same labels and no counters, leaves only their GPUs to be redone
  // (not their nodes) and returns true.
  bool RepublishedInPlace(const std::vector<Device*>& changed,
                          const std::unordered_map<Key, Replaced>& replaced)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpsertSliceLocked(const model::ResourceSlice& slice,
                         const std::vector<PublishedDevice>& devices)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a slice's devices (but those in `keep`, and those at the places `held` marks, whose
  // keys it does not read) and counter sets; adds the nodes they were on to `touched`.
  void RemoveSliceLocked(const std::string& name, std::set<std::string>& touched,
                         const std::set<std::string>& keep = {}, const std::vector<bool>& held = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes a device out of the derived indexes and counts, then out of the store.
  void RemoveDevice(Device& device, std::set<std::string>& touched)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnterPending(Claim& claim) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LeavePending(Claim& claim) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetClaimAllocations(Claim& claim, std::vector<std::pair<Key, std::string>> devices,
                           std::map<Key, std::map<std::string, double>> consumed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `pools` false: only the nodes' GPU tallies (see dirty_tallies_).
  void MarkAllNodesDirty(bool pools = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A class was added, changed or deleted: every device is classified again and every count
  // and node derived again.
  void ClassesChanged() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Device and counter state (what follows from the objects alone is the store's).
  // Recounts a counter set's use, then marks its node dirty and refreshes its consumers.
  void RecountCounters(const std::string& set_key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AllocationChanged(const Key& device_key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pool state and GPU tally of the device's GPU are stale (dirty_gpus_).
  void MarkGpuDirty(const Device& device) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Counts per pending request shape, kept as devices come, go and change state, so that a
  // reason is re-derived only when a count it depends on moves.
  // How a device stands to a leaf request (fit::MatchDevice over the class's and the request's
  // selectors, through the verdict cache, and the request's tolerations); kNoMatch when the
  // class does not exist.
  fit::Match LeafMatch(const Request& leaf, Device& device) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds (+1) or takes back (-1) a device's part in every leaf's counts.
  void CountDevice(Device& device, int sign) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Re-reads whether a counted device is free, and moves the leaves' free counts if it changed.
  void RefreshFree(Device& device) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RefreshNodeDevices(const std::string& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecountLeaf(LeafCounts& leaf) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The leaf requests of a request: its alternatives (firstAvailable), else itself.
  static std::vector<std::shared_ptr<Request>> LeavesOf(const std::shared_ptr<Request>& request);
  // Moves a leaf's free count, and the count of its free devices on `node`, by `delta`.
  void MoveFree(LeafCounts& leaf, const std::string& node, int delta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a node's free_while_pending attribution can move when `shape`'s longest-pending
  // claim goes from `from` to `to`. A node's attribution is the class of the longest-pending
  // claim among the shapes its free devices fit (TallyGpu): it moves only when the two classes
  // differ, or another shape's longest-pending claim lies between the two with another class.
  // Otherwise the shape's nodes need no recompute, which a scheduler serving claims oldest first
  // would otherwise cause on every allocation, for every node with a free device of the shape:
  // O(nodes) per event (cluster_bench BM_AllocateOldestPending).
  bool AttributionMayMove(const PendingShape& shape, const PendingAge& from, const PendingAge& to)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks dirty the nodes with free devices that fit `request` (any of its alternatives).
  void MarkShapeNodesDirty(const std::shared_ptr<Request>& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PendingReason ReasonOfLeaf(const LeafCounts& leaf) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PendingReason ScanReason(const Request& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RegisterShape(const PendingShape& shape, const std::string& signature)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnregisterShape(const PendingShape& shape, const std::string& signature)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Claims.
  ClaimState StateOfClaim(const Claim& claim) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RefreshClaimState(Claim& claim) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordTransition(Claim& claim, Transition to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DeleteClaimLocked(const Key& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PendingReason ReasonOfRequest(const Request& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PendingReason ReasonOfClaim(const Claim& claim) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdatePendingSeries(Claim& claim) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Re-derives where a claim's devices landed (TopologySpread and NvlinkReach) and moves its
  // series. A device whose slice is gone keeps the claim's last topology until it is published
  // again.
  void RefreshSpread(Claim& claim) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Applies what the event left dirty: pending verdicts, node aggregates, MIG placeable.
  void Flush() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `pools`: also recount the node's devices by class and state (dralens_cluster_pool_devices),
  // which only devices, taints, classes and allocations move; a claim's state does not.
  // `tallies`: the GPU tallies of all its GPUs (dralens_cluster_gpus, stranded and held GPUs).
  // `gpus`: also these GPUs (by Device::gpu_first), counted and tallied again because their
  // devices' holders, or their holders' states, changed; the node's other GPUs keep what they
  // added last time.
  void RecomputeNode(const std::string& node, bool pools, bool tallies,
                     absl::Span<const uint32_t> gpus) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecomputePlaceable(const std::string& node, NodeAggregate& agg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the fleet totals of dralens_cluster_pool_devices from a node's old counts to its new.
  void UpdatePoolTotals(const LabelTable<std::array<int, kPoolStates>>& before,
                        const LabelTable<std::array<int, kPoolStates>>& after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the fleet's held GPUs from a node's old tally to its new one, accruing first.
  void UpdateHeld(const LabelTable<double>& before, const LabelTable<double>& after, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replaces the entries of GPU `gpu` in a node's `parts` (ordered by GPU) with `part`, growing
  // the vector to what it needs rather than to twice its size: a node's parts stay for the run.
  static void ReplaceGpu(std::vector<GpuPartEntry>& parts, uint32_t gpu,
                         const std::vector<GpuPartEntry>& part);
  // What a device adds to its node's pool counts: tainted, allocated (or blocked), or free.
  PoolState PoolStateOf(const Device& device) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One physical GPU (its devices, adjacent in DevicesOn order; `down`: its node is), in
  // GPU-equivalents by state and stranded kind: each addition to a GpuTally appended to `out`
  // under `gpu`. With `of_claim` (and `parts`), only what that claim holds of it, added to
  // `parts` by (class, product), and nothing is appended.
  void TallyGpu(absl::Span<Device* const> devices, bool down, uint32_t gpu,
                std::vector<GpuPartEntry>& out, const Claim* of_claim = nullptr,
                std::map<std::pair<std::string, std::string>, double>* parts = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // GPU-seconds and cost of the claim's current allocation up to `now`, at today's prices;
  // zero when it is not allocated or its allocation time is unknown. Sets `gpus` (when given)
  // to what it holds.
  std::pair<double, double> CurrentSpend(const Claim& claim, absl::Time now, double* gpus)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One leaf request's funnel over the devices of its class (explain.h).
  RequestFunnel LeafFunnel(const std::shared_ptr<Request>& leaf) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // LeafFunnel, through `cache` (by the leaf's signature) when given.
  RequestFunnel CachedLeafFunnel(const std::shared_ptr<Request>& leaf, FunnelCache* cache,
                                 size_t scan_limit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The longest-pending claim a request of which fits one of `free`, or null.
  const Claim* OldestPendingFor(const std::vector<Device*>& free)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Accrue(Series& series, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  prometheus::Family<prometheus::Gauge>& claims_;
  prometheus::Family<prometheus::Gauge>& pending_claims_;
  const std::shared_ptr<ObjectSeries> pending_ages_;  // one series per pending claim
  prometheus::Family<prometheus::Histogram>& allocation_latency_;
  prometheus::Family<prometheus::Counter>& transitions_;
  // Fleet-wide, not per node: a series per (driver, class, product, state).
  prometheus::Family<prometheus::Gauge>& pool_devices_;
  prometheus::Family<prometheus::Gauge>& price_per_gpu_hour_;
  // The per-node families, a series per node and label set: kept as text (TextFamily).
  const std::shared_ptr<telemetry::TextFamilies> text_series_;
  telemetry::TextFamily<prometheus::Gauge>& gpus_;
  telemetry::TextFamily<prometheus::Gauge>& stranded_gpus_;
  telemetry::TextFamily<prometheus::Counter>& stranded_seconds_;
  telemetry::TextFamily<prometheus::Counter>& stranded_cost_;
  telemetry::TextFamily<prometheus::Gauge>& mig_placeable_;
  // Topology of multi-device claims: counts, and a series per such claim (as text: O(log n)).
  prometheus::Family<prometheus::Gauge>& topology_;
  telemetry::TextFamily<prometheus::Gauge>& claim_spread_;
  // Showback: a series per (namespace, class, usage state), fleet-wide.
  prometheus::Family<prometheus::Counter>& held_seconds_;
  prometheus::Family<prometheus::Counter>& held_cost_;
  const LifecycleTracer lifecycle_;  // the claims' lifecycle spans
  const PriceTable prices_;
  const std::set<std::string> topology_sensitive_;
  const absl::Duration stranded_retention_;
  common::Clock& clock_;

  absl::Mutex mu_;
  // Label values of the derived series as integers (label_ids.h).
  LabelIds labels_ ABSL_GUARDED_BY(mu_);
  uint32_t no_class_ ABSL_GUARDED_BY(mu_) = 0;  // the id of "": no device class
  // Attribute and capacity names of the devices' CompactSpecs.
  NamePool names_ ABSL_GUARDED_BY(mu_);
  // Selectors: compiled once per distinct expression.
  std::unordered_map<std::string, int> selector_ids_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::StatusOr<cel::Program>> programs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> expressions_ ABSL_GUARDED_BY(mu_);  // by selector id

  std::map<std::string, std::vector<int>> classes_ ABSL_GUARDED_BY(mu_);  // name -> selectors
  // The objects and their indexes.
  ClusterState state_ ABSL_GUARDED_BY(mu_);
  // class -> devices that match it for sure / whose verdict is unknown, in a fixed order (a
  // hash of the key, then the key): the same in every run, and cheap to keep at fleet scale,
  // where a comparison of keys (long common prefixes, each behind a pointer) made adding and
  // removing a device cost a cache miss per step. A device leaves them before it is destroyed
  // (UnclassifyDevice).
  struct DeviceRef {
    uint64_t order;  // Device::order
    Device* device;
  };
  struct ByOrder {
    bool operator()(const DeviceRef& a, const DeviceRef& b) const;
  };
  using DeviceSet = absl::btree_set<DeviceRef, ByOrder>;
  std::map<std::string, DeviceSet> class_devices_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, DeviceSet> class_unknown_ ABSL_GUARDED_BY(mu_);
  // False while derive_after_sync holds back derivation until SetSynced().
  bool deriving_ ABSL_GUARDED_BY(mu_) = true;

  struct ByClaimKey {  // claims in key order
    bool operator()(const Claim* a, const Claim* b) const;
  };
  // A pod's record changed (ClusterState::SetPod): refreshes the states of the claims that
  // reserve it.
  void PodChanged(const std::optional<ClusterState::ClaimList>& claims)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pending claims (Claim::pending), in no set order.
  absl::flat_hash_set<Claim*> pending_ ABSL_GUARDED_BY(mu_);
  // Request shapes of the pending claims, with the pending claims that hold each, oldest first.
  std::map<std::string, std::unique_ptr<PendingShape>> pending_requests_ ABSL_GUARDED_BY(mu_);

  // Dirty sets, applied by Flush().
  using NodeSet = absl::flat_hash_set<std::string>;
  NodeSet dirty_nodes_ ABSL_GUARDED_BY(mu_);
  // Nodes whose GPU tallies alone are stale: the longest-pending claim a free device there
  // could serve changed; that moves stranded GPUs but no device's pool state.
  NodeSet dirty_tallies_ ABSL_GUARDED_BY(mu_);
  // GPUs (by node, then Device::gpu_first) whose devices' holders, or whose holders' states (in
  // use or not), changed: only they are tallied and counted again, unless their node is in a
  // set above. A device that comes or goes marks its node in dirty_nodes_, so the indexes stay
  // valid until Flush.
  absl::flat_hash_map<std::string, absl::InlinedVector<uint32_t, 2>> dirty_gpus_
      ABSL_GUARDED_BY(mu_);
  // Every node's free_while_pending attribution may move (the classes changed).
  bool pending_shape_changed_ ABSL_GUARDED_BY(mu_) = false;
  // Leaf requests (a request, or one alternative of a firstAvailable request) of the pending
  // shapes, by signature, with their counts; the ones whose counts moved since the last Flush.
  std::map<std::string, std::unique_ptr<LeafCounts>> leaves_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dirty_leaves_ ABSL_GUARDED_BY(mu_);
  // Re-derive every pending claim's reason at the next Flush (after the initial sync).
  bool rederive_all_ ABSL_GUARDED_BY(mu_) = false;

  // Aggregated series.
  // dralens_cluster_claims: (ClaimState, class, namespace) -> series and claims.
  absl::flat_hash_map<LabelKey, std::pair<prometheus::Gauge*, int>> claim_counts_
      ABSL_GUARDED_BY(mu_);
  // dralens_cluster_pending_claims: (class, PendingReason) -> series and claims.
  absl::flat_hash_map<LabelKey, std::pair<prometheus::Gauge*, int>> pending_counts_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Histogram*> latency_ ABSL_GUARDED_BY(mu_);
  // dralens_cluster_claim_topology: (class, namespace, spread, nvlink) -> series and claims.
  std::map<std::vector<std::string>, std::pair<prometheus::Gauge*, int>> topology_counts_
      ABSL_GUARDED_BY(mu_);
  // dralens_cluster_pool_devices: (driver, class, product) -> devices and series by PoolState.
  struct PoolTotal {
    std::array<int64_t, kPoolStates> devices = {};
    std::array<prometheus::Gauge*, kPoolStates> gauges = {};
  };
  absl::flat_hash_map<LabelKey, PoolTotal> pool_totals_ ABSL_GUARDED_BY(mu_);
  // dralens_cluster_price_per_gpu_hour: (class, product) -> its series and the pool totals
  // (one per driver) that publish such devices.
  std::map<std::pair<std::string, std::string>, std::pair<prometheus::Gauge*, int>> prices_in_use_
      ABSL_GUARDED_BY(mu_);
  std::map<Transition, prometheus::Counter*> transition_counters_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::unique_ptr<NodeAggregate>> node_aggregates_
      ABSL_GUARDED_BY(mu_);
  // What claims hold, fleet-wide, by (namespace, class, product, usage state): the GPUs summed
  // over nodes, accrued into dralens_cluster_gpu_seconds_total and _cost_total (the product
  // sets the price; the exported series sum over it).
  absl::flat_hash_map<LabelKey, std::unique_ptr<Series>> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dralens::exporter::cluster
