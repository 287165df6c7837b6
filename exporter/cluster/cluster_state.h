// ClusterState: the cluster role's compact store.
//
// It keeps what the analysis reads of the watched objects, and nothing more: the devices and
// counter sets that ResourceSlices publish (as CompactSpecs, with interned names), whether each
// Node is ready, the claims with their requests, allocations and reservations, and whether each
// reserved pod exists and runs. Beside them it keeps the indexes that relate them:
//   devices by key, by node and by the slice that published them;
//   a counter set's consumers, whichever slice of the pool publishes the set or the device;
//   a device's holders, in claim key order, with what each consumes, and a claim's pointers
//   to the records of the devices it holds;
//   a pod's reserving claims, and a record for a pod a claim names before the pod arrives.
// It answers what follows from the objects alone: whether a device is allocated, blocked by
// its shared counters or on a node that is down, how much of a counter is left, and what share
// of a device each holder holds. Everything derived (class membership, the counts pending
// reasons are read from, node tallies, series) belongs to the Analyzer, which calls the store
// and updates what the change touches.
//
// A record also carries the few derived fields the analyzer keeps per object (a claim's state,
// pending reason and span; a device's cached selector verdicts and class ids), so that one
// object is one allocation.
//
// Not thread-safe: the Analyzer's mutex guards it.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "exporter/cluster/compact_spec.h"
#include "exporter/cluster/findings.h"
#include "prometheus/gauge.h"
#include "src/cel/cel.h"
#include "src/fit/device_fit.h"
#include "src/model/resource.h"
#include "src/telemetry/tracing/tracer.h"

namespace dralens::exporter::cluster {

inline constexpr double kEpsilon = 1e-9;

// What the interned name fields of a Device or Claim point at until they are set.
inline const std::string kNoName;

// "driver/pool/device": a device's (or a counter set's) key across pools.
std::string DeviceKey(absl::string_view driver, absl::string_view pool, absl::string_view device);
// Device::order of a key.
uint64_t OrderOf(absl::string_view key);

// What a Node contributes: whether its driver can serve (Ready, not gone).
struct NodeInfo {
  std::string name;
  bool ready = true;  // false when the Ready condition is False or Unknown
};

// One request of a claim, or one alternative of a firstAvailable request. Immutable once
// built: claims that ask the same thing share one (ClusterState::SharedRequest).
struct Request {
  std::string name;  // "gpu", or "gpu/h100" for an option of a firstAvailable request
  std::string signature;
  std::string device_class;
  std::vector<int> selectors;  // selector ids (the Analyzer compiles each expression once)
  std::vector<model::DeviceToleration> tolerations;
  bool all = false;
  int64_t count = 1;
  std::vector<std::shared_ptr<Request>> alternatives;  // firstAvailable: any one will do
};

struct Claim;
// A device's holders, in claim key order, with the capacity each consumes (name -> value).
using Holders = std::vector<std::pair<Claim*, std::map<std::string, double>>>;

struct Device {
  std::string key;  // DeviceKey
  // A hash of `key` that does not change from run to run: the device's place in the analyzer's
  // class indexes (OrderOf).
  uint64_t order = 0;
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
  CompactSpec spec;  // what the analysis reads of the published device
  // The holders' entry of its key in the store (ClusterState keeps it), or null: a node's
  // recompute asks whether each of its devices is held several times, and a lookup by key
  // costs a hash of the key and a cache miss or two at fleet scale.
  const Holders* holders = nullptr;
  bool tainted = false;  // a NoSchedule/NoExecute taint (fit::Blocking)
  // The physical GPU it is (part of): its counter set, else its parent's or its own UUID,
  // else the device itself. Devices with the same key are one GPU.
  std::string gpu;
  // Its GPU among the node's (in DevicesOn order: the index of the GPU's first device, which
  // also names the GPU on its node, and how many devices the GPU has there), kept by the store
  // as the node's devices change: a node's recompute finds the devices of one GPU without
  // comparing `gpu` strings.
  uint32_t gpu_first = 0, gpu_devices = 1;
  // Without counters: its weight among the devices of its GPU (memory slices, else memory).
  double weight = 1;
  std::map<std::string, double> capacity;
  std::vector<fit::CounterConsumption> consumes;  // by counter set key
  // Derived by the analyzer.
  bool counted = false;       // its part is in the leaves' counts
  bool counted_free = false;  // counted as free (not held, not blocked, node up)
  int8_t pool_state = -1;     // the PoolState it adds to its node's pool counts; -1 before that
  std::vector<uint32_t> class_ids;           // classes it surely matches (LabelIds)
  std::vector<std::string> unknown_classes;  // classes whose selectors it cannot judge
  // Cached selector verdicts by selector id, sorted: a handful per device, so a flat vector
  // (a hash map cost about 4 times the memory).
  std::vector<std::pair<int, cel::Verdict>> verdicts;
};

struct CounterSet {
  std::string key, slice, node, name;
  std::map<std::string, double> capacity;
  std::map<std::string, double> used;  // by the allocations of its consumers
  std::set<std::string> devices;       // its consumers' keys
};

struct Claim {
  std::string key;  // "ns/name"
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
  // Set through ClusterState::SetAllocations and SetReservations, which keep the indexes.
  std::vector<std::pair<std::string, std::string>> devices;  // device key, class of its request
  // The records of `devices`, in the same order; null for a device not published. Kept by the
  // store as devices come and go (a device's holders name the claims to update), so that a
  // change of the claim's state reaches its devices without a lookup by key: at fleet scale
  // that lookup is a hash of the key and a chain of cache misses before the record's own.
  std::vector<Device*> device_records;
  std::vector<std::string> reserved_pods;  // "ns/name"
  bool allocated = false;
  std::optional<absl::Time> allocation_time;
  // The class its devices were allocated for, when they all were for one (the usual case), and
  // its LabelIds id; else null. Set by the analyzer with `devices`: a node's tally asks the class
  // of every held device, which otherwise means a search of `devices` by key.
  const std::string* held_class = nullptr;
  uint32_t held_class_id = 0;
  // Derived by the analyzer.
  bool has_state = false;
  ClaimState state = ClaimState::kPending;
  bool pending = false;
  bool seen_pending = false;
  std::optional<PendingReason> reason;
  bool age = false;  // has a pending age series
  // Two or more devices allocated: where they landed (spread and NVLink), and its series.
  std::optional<ClaimTopology> spread;
  std::set<std::string> spread_devices;  // the devices `spread` was derived from
  prometheus::Gauge* spread_series = nullptr;
  // What earlier allocations of this claim held, in GPU-seconds and at their prices.
  double spent_gpu_seconds = 0;
  double spent_cost = 0;
  telemetry::SpanPtr span;
};

class ClusterState {
 public:
  using Key = std::string;
  // By key: a view of the record's own key, so each key is kept once.
  using DeviceMap = absl::flat_hash_map<absl::string_view, std::unique_ptr<Device>>;
  using ClaimMap = absl::flat_hash_map<absl::string_view, std::unique_ptr<Claim>>;
  using Holders = cluster::Holders;
  // What one ResourceSlice published.
  struct Slice {
    std::vector<Key> devices;
    // Per device, in the same order: a hash of its published text and of what of its slice it
    // depends on (Analyzer::UpsertSlice); 0 when it came decoded, without its text, or when
    // another slice of the pool took it over since. Kept here, not with the device, so that a
    // republish finds what it already holds without looking up each of its devices.
    std::vector<uint64_t> digests;
    std::vector<Key> counter_sets;
  };
  using ClaimList = absl::InlinedVector<Claim*, 2>;

  ClusterState() = default;
  ClusterState(const ClusterState&) = delete;
  ClusterState& operator=(const ClusterState&) = delete;

  // --- devices ---
  const DeviceMap& devices() const { return devices_; }
  Device* FindDevice(absl::string_view key) const;
  // Enters a device into the store and its indexes: its node's devices, and the consumers of
  // every counter set it draws on (published now or later, by any slice of the pool). No
  // device of its key may be in the store.
  Device& AddDevice(std::unique_ptr<Device> device);
  // Takes the device of `key` out of every index and destroys it; nothing when there is none.
  void RemoveDevice(absl::string_view key);
  // The devices on `node` (owned by the store), by physical GPU and then key: a GPU's devices
  // are adjacent, and the order does not depend on hashing.
  const std::vector<Device*>& DevicesOn(const std::string& node) const;
  // The devices of the physical GPU `device` is (part of), in DevicesOn order.
  absl::Span<Device* const> GpuOf(const Device& device) const;
  // The devices of the GPU whose first device is on_node[first] (on_node: a DevicesOn list).
  static absl::Span<Device* const> GpuAt(const std::vector<Device*>& on_node, uint32_t first) {
    return absl::MakeConstSpan(on_node).subspan(first, on_node[first]->gpu_devices);
  }
  // Every node with devices, and its devices.
  const absl::node_hash_map<std::string, std::vector<Device*>>& devices_by_node() const {
    return node_devices_;
  }

  // --- counter sets ---
  const CounterSet* FindCounterSet(const Key& key) const;
  // Enters (or replaces) a counter set; the devices already published that consume it become
  // its consumers. Its `used` is recounted.
  void AddCounterSet(std::unique_ptr<CounterSet> set);
  void RemoveCounterSet(const Key& key);
  // Counts again what the allocations of a set's consumers use of it; null for a set not
  // published.
  const CounterSet* RecountUsed(const Key& key);
  // What counter `name` of counter set `set_key` has left after the allocations (capacity 0
  // for a counter the set lacks); nullopt for a set not published.
  std::optional<double> CounterLeft(const Key& set_key, const std::string& name) const;

  // --- slices ---
  const Slice* FindSlice(const std::string& name) const;
  Slice* FindSlice(const std::string& name);
  void SetSlice(const std::string& name, Slice slice);
  void EraseSlice(const std::string& name);
  // Slice `name` no longer holds device `key` under its digest (another slice took it over).
  void ForgetDigest(const std::string& name, absl::string_view key);

  // --- nodes ---
  // Records a node; true when its readiness changed (or it is new).
  bool SetNode(const NodeInfo& node);
  // Forgets a node; true when it was known.
  bool EraseNode(const std::string& name);
  // From now on a node that is not known is gone.
  void SetNodesSynced() { nodes_synced_ = true; }
  // Its Node is NotReady, or gone after the Nodes were synced. A device without a node (a
  // network-attached one) is never on a down node.
  bool NodeDown(const std::string& node) const;

  // --- claims ---
  const ClaimMap& claims() const { return claims_; }
  Claim* FindClaim(absl::string_view key) const;
  Claim& AddClaim(std::unique_ptr<Claim> claim);
  // Destroys a claim; it must hold no device and reserve no pod (SetAllocations and
  // SetReservations with nothing first).
  void EraseClaim(absl::string_view key);
  // `request`, or the equal request (same signature and names) another claim already holds.
  std::shared_ptr<Request> SharedRequest(std::shared_ptr<Request> request);

  // --- allocations ---
  // The claims that hold a device, in claim key order; null when none does.
  const Holders* HoldersOf(absl::string_view device) const;
  // The same for a device in the store, without a lookup.
  static const Holders* HoldersOf(const Device& device);
  // Sets what a claim holds: (device key, class of its request) and the capacity it consumes
  // of each device (none for a device `consumed` lacks). Returns the devices whose holders changed
  // (before or after), in key order; none only when the claim held exactly this already, and then
  // `claim.devices` is unchanged.
  std::set<Key> SetAllocations(Claim& claim, std::vector<std::pair<Key, std::string>> devices,
                               std::map<Key, std::map<std::string, double>> consumed);
  // Held by a claim; with allowMultipleAllocations, only once a consumed capacity reaches what
  // the device has.
  bool DeviceAllocated(const Device& device) const;
  // Not held, and its shared counters cannot take it (other devices of the set use them up).
  // A counter set not (yet) published does not block.
  bool DeviceBlocked(const Device& device) const;
  // Not tainted, not allocated, not blocked.
  bool DeviceFree(const Device& device) const;
  // The holders of a device and the share of it each holds (summing to at most 1): whole
  // allocations split evenly; shared devices by the capacity that fills the device first.
  std::vector<std::pair<const Claim*, double>> HolderShares(const Device& device) const;

  // --- pods ---
  // Sets the pods ("ns/name") a claim reserves.
  void SetReservations(Claim& claim, std::vector<Key> pods);
  bool PodRunning(const Key& pod) const;
  // Records whether a pod is in the cache and running. When that changed, returns the claims
  // that reserve it (whose states may have moved); else nullopt. A pod that is gone and
  // reserved by no claim leaves no record.
  std::optional<ClaimList> SetPod(const Key& pod, bool exists, bool running);
  size_t pod_records() const { return pods_.size(); }

 private:
  // Points the records of the claims that hold `device` (Claim::device_records) at `record`.
  static void LinkRecords(const Device& device, Device* record);

  struct Pod {
    bool exists = false;   // in the Pod cache
    bool running = false;  // phase Running
    ClaimList claims;      // the claims that reserve it (they leave before they go)
  };

  DeviceMap devices_;
  // Node-based hash maps: fewer cache misses per lookup than std::unordered_map (one probe of
  // a flat control array, then the node), and references that stay valid as they grow.
  absl::node_hash_map<std::string, std::vector<Device*>> node_devices_;
  std::unordered_map<Key, std::unique_ptr<CounterSet>> counter_sets_;
  // counter set key -> the devices that consume it, whether or not the set is published (yet):
  // a set that comes later finds its consumers here instead of scanning every device.
  absl::node_hash_map<Key, std::set<Key>> consumers_;
  absl::node_hash_map<std::string, Slice> slices_;
  absl::flat_hash_map<std::string, NodeInfo> nodes_;
  bool nodes_synced_ = false;
  ClaimMap claims_;
  // The requests claims hold, by signature and names: equal requests are shared.
  std::unordered_map<std::string, std::weak_ptr<Request>> requests_;
  size_t live_request_keys_ = 0;
  // Nodes, not slots: a device keeps a pointer to its entry (Device::holders).
  absl::node_hash_map<Key, Holders> allocations_;
  // For pods in the cache or reserved by a claim (one record for both: a claim may name a pod
  // before its informer delivers it).
  absl::flat_hash_map<Key, Pod> pods_;
};

}  // namespace dralens::exporter::cluster
