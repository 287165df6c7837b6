#include "exporter/cluster/findings.h"

namespace dralens::exporter::cluster {

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

}  // namespace dralens::exporter::cluster
