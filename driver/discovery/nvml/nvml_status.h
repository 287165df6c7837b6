// nvmlReturn_t -> absl::Status. Shared by the NVML and the simulated device sources so that
// both report the same codes and names for the same failures.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "driver/discovery/nvml/nvml_types.h"

namespace dralens::driver::discovery::nvml {

// "NVML_ERROR_INSUFFICIENT_RESOURCES"; "NVML_ERROR_<n>" for a value this code does not know.
std::string NvmlReturnName(nvmlReturn_t code);

// The absl code for an NVML result:
//   INVALID_ARGUMENT, ARGUMENT_VERSION_MISMATCH -> InvalidArgument
//   NOT_SUPPORTED, FUNCTION_NOT_FOUND, DEPRECATED -> Unimplemented (also "MIG mode disabled")
//   NO_PERMISSION -> PermissionDenied;  NOT_FOUND, GPU_NOT_FOUND, NO_DATA -> NotFound
//   INSUFFICIENT_RESOURCES, MEMORY -> ResourceExhausted;  TIMEOUT -> DeadlineExceeded
//   IN_USE, RESET_REQUIRED, UNINITIALIZED, INVALID_STATE, ALREADY_INITIALIZED
//     -> FailedPrecondition
//   GPU_IS_LOST, DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND, NOT_READY -> Unavailable
//   anything else -> Unknown (UNKNOWN) or Internal.
absl::StatusCode NvmlReturnToCode(nvmlReturn_t code);

// OK for NVML_SUCCESS, otherwise "<what>: NVML_ERROR_<NAME> (<n>)" with NvmlReturnToCode.
absl::Status NvmlStatus(nvmlReturn_t code, absl::string_view what);

}  // namespace dralens::driver::discovery::nvml
