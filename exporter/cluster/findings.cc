#include "exporter/cluster/findings.h"

#include <algorithm>

namespace dralens::exporter::cluster {

ClaimState ClaimStateOf(bool allocated, bool reserved, bool reserving_pod_running) {
  if (!allocated) {
    return ClaimState::kPending;
  }
  if (!reserved) {
    return ClaimState::kAllocated;
  }
  return reserving_pod_running ? ClaimState::kInUse : ClaimState::kReserved;
}

PendingReason ReasonOf(const RequestCounts& c) {
  if (!c.class_exists) {
    return PendingReason::kUnsatisfiable;
  }
  if (c.matching == 0 || (!c.all && c.matching < c.count)) {
    return c.unknown ? PendingReason::kUnknown : PendingReason::kUnsatisfiable;
  }
  if (c.untainted == 0 || (!c.all && c.untainted < c.count)) {
    return PendingReason::kTainted;
  }
  if (c.free < (c.all ? c.untainted : c.count)) {
    return PendingReason::kNoCapacity;
  }
  return PendingReason::kWaitingForPod;
}

// PendingReason is ordered most severe first.
PendingReason BestOf(absl::Span<const PendingReason> alternatives) {
  PendingReason best = PendingReason::kUnsatisfiable;
  for (PendingReason r : alternatives) {
    best = std::max(best, r);
  }
  return best;
}

PendingReason WorstOf(absl::Span<const PendingReason> requests) {
  PendingReason worst = PendingReason::kWaitingForPod;
  for (PendingReason r : requests) {
    worst = std::min(worst, r);
  }
  return worst;
}

PartFinding JudgePart(const GpuPart& part) {
  if (part.unavailable) {
    return {GpuState::kUnavailable, StrandedKind::kAdvertisedUnhealthy,
            part.held ? StrandedClass::kHolder : StrandedClass::kNone};
  }
  if (part.held) {
    if (part.holder_in_use) {
      return {GpuState::kAllocated, std::nullopt, StrandedClass::kNone};
    }
    return {GpuState::kAllocated, StrandedKind::kAllocatedNotRunning, StrandedClass::kHolder};
  }
  if (!part.claims_pend) {
    return {GpuState::kFree, std::nullopt, StrandedClass::kNone};
  }
  if (part.fits_pending) {
    return {GpuState::kFree, StrandedKind::kFreeWhilePending, StrandedClass::kLongestPending};
  }
  if (part.mig_cut) {
    return {GpuState::kFree, StrandedKind::kUnplaceableFragment, StrandedClass::kNone};
  }
  return {GpuState::kFree, std::nullopt, StrandedClass::kNone};
}

absl::string_view ToString(ClaimState state) {
  switch (state) {
    case ClaimState::kPending:
      return "pending";
    case ClaimState::kAllocated:
      return "allocated";
    case ClaimState::kReserved:
      return "reserved";
    case ClaimState::kInUse:
      return "in_use";
  }
  return "pending";
}

absl::string_view ToString(PendingReason reason) {
  switch (reason) {
    case PendingReason::kUnsatisfiable:
      return "unsatisfiable";
    case PendingReason::kUnknown:
      return "unknown";
    case PendingReason::kTainted:
      return "tainted";
    case PendingReason::kNoCapacity:
      return "no_capacity";
    case PendingReason::kWaitingForPod:
      return "waiting_for_pod";
  }
  return "unknown";
}

absl::string_view ToString(PoolState state) {
  switch (state) {
    case PoolState::kFree:
      return "free";
    case PoolState::kAllocated:
      return "allocated";
    case PoolState::kTainted:
      return "tainted";
  }
  return "free";
}

absl::string_view ToString(GpuState state) {
  switch (state) {
    case GpuState::kFree:
      return "free";
    case GpuState::kAllocated:
      return "allocated";
    case GpuState::kUnavailable:
      return "unavailable";
  }
  return "free";
}

absl::string_view ToString(StrandedKind kind) {
  switch (kind) {
    case StrandedKind::kAllocatedNotRunning:
      return "allocated_not_running";
    case StrandedKind::kFreeWhilePending:
      return "free_while_pending";
    case StrandedKind::kUnplaceableFragment:
      return "unplaceable_fragment";
    case StrandedKind::kAdvertisedUnhealthy:
      return "advertised_unhealthy";
  }
  return "allocated_not_running";
}

absl::string_view ToString(Transition transition) {
  switch (transition) {
    case Transition::kCreated:
      return "created";
    case Transition::kAllocated:
      return "allocated";
    case Transition::kReserved:
      return "reserved";
    case Transition::kInUse:
      return "in_use";
    case Transition::kReleased:
      return "released";
    case Transition::kDeleted:
      return "deleted";
  }
  return "created";
}

absl::string_view ToString(TopologySpread spread) {
  switch (spread) {
    case TopologySpread::kSamePcieRoot:
      return "same_pcie_root";
    case TopologySpread::kSameNuma:
      return "same_numa";
    case TopologySpread::kCrossNuma:
      return "cross_numa";
    case TopologySpread::kCrossNode:
      return "cross_node";
    case TopologySpread::kUnknown:
      return "unknown";
  }
  return "unknown";
}

TopologySpread ClassifySpread(const std::vector<DevicePlace>& places) {
  if (places.empty()) {
    return TopologySpread::kUnknown;
  }
  // Two known nodes that differ make it cross_node, whatever else is unknown.
  const DevicePlace* first = nullptr;
  bool unpublished = false;
  for (const DevicePlace& p : places) {
    if (p.node.empty()) {
      unpublished = true;
    } else if (first == nullptr) {
      first = &p;
    } else if (p.node != first->node) {
      return TopologySpread::kCrossNode;
    }
  }
  if (unpublished || first == nullptr) {
    return TopologySpread::kUnknown;
  }
  bool same_root = !first->pcie_root.empty(), same_numa = first->numa_node.has_value(),
       numa_known = true;
  for (const DevicePlace& p : places) {
    same_root = same_root && p.pcie_root == first->pcie_root;
    numa_known = numa_known && p.numa_node.has_value();
    same_numa = same_numa && p.numa_node == first->numa_node;
  }
  if (same_root) {
    return TopologySpread::kSamePcieRoot;
  }
  if (!numa_known) {
    return TopologySpread::kUnknown;
  }
  return same_numa ? TopologySpread::kSameNuma : TopologySpread::kCrossNuma;
}

absl::string_view ToString(NvlinkReach reach) {
  switch (reach) {
    case NvlinkReach::kConnected:
      return "connected";
    case NvlinkReach::kNotConnected:
      return "not_connected";
    case NvlinkReach::kUnknown:
      return "unknown";
  }
  return "unknown";
}

NvlinkReach ClassifyNvlink(const std::vector<DevicePlace>& places) {
  // Two published devices that differ settle it, whatever else is unknown.
  const DevicePlace* first = nullptr;
  bool unpublished = false;
  for (const DevicePlace& p : places) {
    if (p.node.empty()) {
      unpublished = true;
    } else if (first == nullptr) {
      first = &p;
    } else if (p.nvlink_domain != first->nvlink_domain) {
      return NvlinkReach::kNotConnected;
    }
  }
  if (unpublished || first == nullptr) {
    return NvlinkReach::kUnknown;
  }
  return first->nvlink_domain.empty() ? NvlinkReach::kNotConnected : NvlinkReach::kConnected;
}

}  // namespace dralens::exporter::cluster
