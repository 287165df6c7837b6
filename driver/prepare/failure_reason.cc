#include "driver/prepare/failure_reason.h"

#include "absl/strings/cord.h"

namespace dralens::driver::prepare {
namespace {

constexpr char kReasonPayload[] = "type.dralens.dev/prepare.FailureReason";

}  // namespace

absl::string_view ToString(FailureReason reason) {
  switch (reason) {
    case FailureReason::kNone:
      return "none";
    case FailureReason::kInvalidRequest:
      return "invalid_request";
    case FailureReason::kClaimNotFound:
      return "claim_not_found";
    case FailureReason::kClaimReplaced:
      return "claim_replaced";
    case FailureReason::kNotAllocated:
      return "not_allocated";
    case FailureReason::kForeignDevice:
      return "foreign_device";
    case FailureReason::kDeviceBusy:
      return "device_busy";
    case FailureReason::kApiError:
      return "api_error";
    case FailureReason::kCheckpointError:
      return "checkpoint_error";
    case FailureReason::kCdiError:
      return "cdi_error";
    case FailureReason::kMigError:
      return "mig_error";
    case FailureReason::kInvalidConfig:
      return "invalid_config";
    case FailureReason::kSharingError:
      return "sharing_error";
    case FailureReason::kInternal:
      return "internal";
  }
  return "internal";
}

absl::Status WithReason(absl::Status status, FailureReason reason) {
  if (!status.ok() && !status.GetPayload(kReasonPayload).has_value()) {
    status.SetPayload(kReasonPayload, absl::Cord(ToString(reason)));
  }
  return status;
}

FailureReason ReasonOf(const absl::Status& status) {
  if (status.ok()) {
    return FailureReason::kNone;
  }
  auto payload = status.GetPayload(kReasonPayload);
  if (payload.has_value()) {
    for (FailureReason r : kAllFailureReasons) {
      if (*payload == ToString(r)) {
        return r;
      }
    }
  }
  return FailureReason::kInternal;
}

}  // namespace dralens::driver::prepare
