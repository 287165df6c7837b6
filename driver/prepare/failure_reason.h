// Why a claim operation failed, as a bounded metric label that travels inside absl::Status.
//
// The error paths of the preparer stay plain `return status;`: WithReason attaches the reason as
// a payload where the failure is first known, and ReasonOf reads it back where the outcome is
// recorded (dralens_node_claims_total{reason}, the span's error.type).
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dralens::driver::prepare {

enum class FailureReason {
  kNone,
  kInvalidRequest,   // a malformed claim reference from the kubelet
  kClaimNotFound,    // the ResourceClaim is gone
  kClaimReplaced,    // same name, another UID
  kNotAllocated,     // no allocation in the claim's status
  kForeignDevice,    // a device this node does not have, or another node's pool
  kDeviceBusy,       // the device is prepared for another claim
  kApiError,         // the API server failed or could not be reached
  kCheckpointError,  // the checkpoint could not be written
  kCdiError,         // the CDI spec could not be written or removed
  kMigError,         // a MIG instance could not be created or destroyed
  kInvalidConfig,    // the claim's or class's opaque config is malformed or does not apply
  kSharingError,     // the sharing settings could not be applied (time slice, MPS daemon)
  kInternal,         // anything else
};
inline constexpr FailureReason kAllFailureReasons[] = {
    FailureReason::kNone,          FailureReason::kInvalidRequest, FailureReason::kClaimNotFound,
    FailureReason::kClaimReplaced, FailureReason::kNotAllocated,   FailureReason::kForeignDevice,
    FailureReason::kDeviceBusy,    FailureReason::kApiError,       FailureReason::kCheckpointError,
    FailureReason::kCdiError,      FailureReason::kMigError,       FailureReason::kInvalidConfig,
    FailureReason::kSharingError,  FailureReason::kInternal};
// "none", "invalid_request", ...: metric label values.
absl::string_view ToString(FailureReason reason);

// Attaches `reason` to a non-OK status that carries none yet (OK stays OK); ReasonOf reads it
// back: kNone for OK, kInternal for an error that carries none.
absl::Status WithReason(absl::Status status, FailureReason reason);
FailureReason ReasonOf(const absl::Status& status);

}  // namespace dralens::driver::prepare
