// The cluster analyzer's findings: the bounded label values, each an enum with one ToString,
// and the pure rules that decide them from counts and facts (objects in, findings out; one
// table-driven test case per rule in tests/exporter/cluster/findings_test.cc). The analyzer
// keeps the counts up to date per event; these functions only judge them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dralens::exporter::cluster {

// dralens_cluster_claims{state}.
enum class ClaimState { kPending, kAllocated, kReserved, kInUse };
absl::string_view ToString(ClaimState state);
// The state of a claim: pending without an allocation; allocated when no pod reserves it;
// in_use once a reserving pod runs; else reserved. The states are exclusive.
ClaimState ClaimStateOf(bool allocated, bool reserved, bool reserving_pod_running);

// Why a claim pends, most severe first: a claim with several requests takes the most severe
// reason among them.
enum class PendingReason {
  kUnsatisfiable,  // no published device could ever match a request
  kUnknown,        // a selector uses CEL outside the subset, so nothing definite can be said
  kTainted,        // the only matching devices carry NoSchedule/NoExecute taints not tolerated
  kNoCapacity,     // matching devices exist, but too few are free
  kWaitingForPod,  // capacity is there: no scheduled pod has asked for the claim yet
};
absl::string_view ToString(PendingReason reason);

// What the devices of a request's class are to one request (a request, or one alternative of a
// firstAvailable request): the input of its pending reason.
struct RequestCounts {
  bool class_exists = true;
  bool all = false;       // allocationMode All: every matching device
  int64_t count = 1;      // allocationMode ExactCount: how many
  bool unknown = false;   // some device's verdict is unknown (CEL outside the subset)
  int64_t matching = 0;   // devices the class and the request's selectors match
  int64_t untainted = 0;  // of those, without an untolerated NoSchedule/NoExecute taint
  int64_t free = 0;       // of those, not allocated, not blocked by counters, node up
};
// The first rule that holds: no class, or too few matches, is unsatisfiable (unknown when a
// verdict is unknown); too few untainted matches is tainted; too few free is no_capacity; else
// waiting_for_pod. With All, "enough" means at least one match and every untainted one free.
PendingReason ReasonOf(const RequestCounts& counts);
// A firstAvailable request: the least severe of its alternatives (any one will do).
PendingReason BestOf(absl::Span<const PendingReason> alternatives);
// A claim: the most severe of its requests (each must be met); waiting_for_pod with none.
PendingReason WorstOf(absl::Span<const PendingReason> requests);

// dralens_cluster_pool_devices{state}. A device whose shared counters are used up by other
// allocations is counted as allocated.
enum class PoolState { kFree, kAllocated, kTainted };
inline constexpr int kPoolStates = 3;
absl::string_view ToString(PoolState state);

// dralens_cluster_gpus{state}: unavailable (tainted NoSchedule/NoExecute, or its Node is
// NotReady or gone) wins over allocated.
enum class GpuState { kFree, kAllocated, kUnavailable };
absl::string_view ToString(GpuState state);

// dralens_cluster_stranded_*{kind}.
enum class StrandedKind {
  kAllocatedNotRunning,
  kFreeWhilePending,
  kUnplaceableFragment,
  kAdvertisedUnhealthy,
};
inline constexpr StrandedKind kStrandedKinds[] = {
    StrandedKind::kAllocatedNotRunning, StrandedKind::kFreeWhilePending,
    StrandedKind::kUnplaceableFragment, StrandedKind::kAdvertisedUnhealthy};
absl::string_view ToString(StrandedKind kind);

// One part of a physical GPU (docs/cluster.md, "Stranded GPUs"): a claim's share of it, or the
// part nobody holds. The facts its state and stranded kind are judged by.
struct GpuPart {
  bool held = false;           // a claim holds it
  bool unavailable = false;    // its device is tainted NoSchedule/NoExecute, or its Node is down
  bool holder_in_use = false;  // held: a pod that reserves the claim runs
  // The part nobody holds, when available:
  bool claims_pend = false;   // some claim pends
  bool fits_pending = false;  // a pending request fits one of the GPU's free devices
  bool mig_cut = false;  // cut into MIG devices: static MIG, or partitionable with a part allocated
};

// Whose DeviceClass a stranded part is counted under.
enum class StrandedClass {
  kNone,            // ""
  kHolder,          // the class of the request the holding claim was allocated the device for
  kLongestPending,  // the class of the longest-pending claim the part could serve
};

// A part's dralens_cluster_gpus{state}, and its dralens_cluster_stranded_gpus{kind} if any.
struct PartFinding {
  GpuState state = GpuState::kFree;
  std::optional<StrandedKind> stranded = {};
  StrandedClass device_class = StrandedClass::kNone;
  bool operator==(const PartFinding&) const = default;
};
// One state and at most one kind per part, the first that holds: unavailable parts are
// advertised_unhealthy; held parts are allocated, and allocated_not_running unless in use;
// free parts are stranded only while claims pend: free_while_pending when a pending request
// fits, else unplaceable_fragment when the GPU is cut into MIG devices.
PartFinding JudgePart(const GpuPart& part);

// dralens_cluster_claim_topology{spread}: where the devices of an allocated claim with two or
// more of them landed, closest first. A claim takes the first that holds for all its devices.
enum class TopologySpread {
  kSamePcieRoot,  // one resource.kubernetes.io/pcieRoot
  kSameNuma,      // one resource.kubernetes.io/numaNode, several PCIe roots (or none published)
  kCrossNuma,     // one node, several NUMA nodes
  kCrossNode,     // several nodes
  kUnknown,       // a device not published (yet), or no NUMA node to compare
};
absl::string_view ToString(TopologySpread spread);

// dralens_cluster_claim_topology{nvlink}: whether the devices of such a claim reach each other
// over NVLink, from their <driver>/nvlinkDomain attributes (docs/node.md, NVLink domains). A
// published device without the attribute has no NVLink: a GPU without links, a MIG device, or
// a device of a driver that does not publish it.
enum class NvlinkReach {
  kConnected,     // every device publishes the same nvlinkDomain (a fabric's may span nodes)
  kNotConnected,  // two published devices differ: other domains, or one has none
  kUnknown,       // a device not published (yet), and the published ones agree
};
absl::string_view ToString(NvlinkReach reach);

// The labels a multi-device claim is counted under.
struct ClaimTopology {
  TopologySpread spread = TopologySpread::kUnknown;
  NvlinkReach nvlink = NvlinkReach::kUnknown;
  bool operator==(const ClaimTopology&) const = default;
};

// Where one allocated device is, from its slice and its attributes.
struct DevicePlace {
  std::string node;       // the slice's node; "" for a device not published
  std::string pcie_root;  // "" when not published
  std::optional<int64_t> numa_node;
  std::string nvlink_domain = {};  // "" when not published
};
// The spread of devices at these places (two or more). Pure.
TopologySpread ClassifySpread(const std::vector<DevicePlace>& places);
// Whether devices at these places (two or more) share an NVLink domain. Pure. Node-local
// domains are named after a GPU UUID, so equal values on two nodes can only be one fabric's.
NvlinkReach ClassifyNvlink(const std::vector<DevicePlace>& places);

// dralens_cluster_claim_transitions_total{to}; each is an event on the lifecycle span.
enum class Transition { kCreated, kAllocated, kReserved, kInUse, kReleased, kDeleted };
absl::string_view ToString(Transition transition);

}  // namespace dralens::exporter::cluster
