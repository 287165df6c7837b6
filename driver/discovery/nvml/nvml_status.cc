#include "driver/discovery/nvml/nvml_status.h"

#include "absl/strings/str_cat.h"

namespace dralens::driver::discovery::nvml {

std::string NvmlReturnName(nvmlReturn_t code) {
  switch (code) {
    case NVML_SUCCESS:
      return "NVML_SUCCESS";
    case NVML_ERROR_UNINITIALIZED:
      return "NVML_ERROR_UNINITIALIZED";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "NVML_ERROR_INVALID_ARGUMENT";
    case NVML_ERROR_NOT_SUPPORTED:
      return "NVML_ERROR_NOT_SUPPORTED";
    case NVML_ERROR_NO_PERMISSION:
      return "NVML_ERROR_NO_PERMISSION";
    case NVML_ERROR_ALREADY_INITIALIZED:
      return "NVML_ERROR_ALREADY_INITIALIZED";
    case NVML_ERROR_NOT_FOUND:
      return "NVML_ERROR_NOT_FOUND";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "NVML_ERROR_INSUFFICIENT_SIZE";
    case NVML_ERROR_INSUFFICIENT_POWER:
      return "NVML_ERROR_INSUFFICIENT_POWER";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "NVML_ERROR_DRIVER_NOT_LOADED";
    case NVML_ERROR_TIMEOUT:
      return "NVML_ERROR_TIMEOUT";
    case NVML_ERROR_IRQ_ISSUE:
      return "NVML_ERROR_IRQ_ISSUE";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML_ERROR_LIBRARY_NOT_FOUND";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "NVML_ERROR_FUNCTION_NOT_FOUND";
    case NVML_ERROR_CORRUPTED_INFOROM:
      return "NVML_ERROR_CORRUPTED_INFOROM";
    case NVML_ERROR_GPU_IS_LOST:
      return "NVML_ERROR_GPU_IS_LOST";
    case NVML_ERROR_RESET_REQUIRED:
      return "NVML_ERROR_RESET_REQUIRED";
    case NVML_ERROR_OPERATING_SYSTEM:
      return "NVML_ERROR_OPERATING_SYSTEM";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "NVML_ERROR_LIB_RM_VERSION_MISMATCH";
    case NVML_ERROR_IN_USE:
      return "NVML_ERROR_IN_USE";
    case NVML_ERROR_MEMORY:
      return "NVML_ERROR_MEMORY";
    case NVML_ERROR_NO_DATA:
      return "NVML_ERROR_NO_DATA";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
      return "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "NVML_ERROR_INSUFFICIENT_RESOURCES";
    case NVML_ERROR_FREQ_NOT_SUPPORTED:
      return "NVML_ERROR_FREQ_NOT_SUPPORTED";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "NVML_ERROR_ARGUMENT_VERSION_MISMATCH";
    case NVML_ERROR_DEPRECATED:
      return "NVML_ERROR_DEPRECATED";
    case NVML_ERROR_NOT_READY:
      return "NVML_ERROR_NOT_READY";
    case NVML_ERROR_GPU_NOT_FOUND:
      return "NVML_ERROR_GPU_NOT_FOUND";
    case NVML_ERROR_INVALID_STATE:
      return "NVML_ERROR_INVALID_STATE";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED:
      return "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED";
    case NVML_ERROR_UNKNOWN:
      return "NVML_ERROR_UNKNOWN";
    default:
      return absl::StrCat("NVML_ERROR_", code);
  }
}

absl::StatusCode NvmlReturnToCode(nvmlReturn_t code) {
  switch (code) {
    case NVML_SUCCESS:
      return absl::StatusCode::kOk;
    case NVML_ERROR_INVALID_ARGUMENT:
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return absl::StatusCode::kInvalidArgument;
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_FUNCTION_NOT_FOUND:
    case NVML_ERROR_DEPRECATED:
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED:
    case NVML_ERROR_FREQ_NOT_SUPPORTED:
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
      return absl::StatusCode::kUnimplemented;
    case NVML_ERROR_NO_PERMISSION:
    case NVML_ERROR_OPERATING_SYSTEM:
      return absl::StatusCode::kPermissionDenied;
    case NVML_ERROR_NOT_FOUND:
    case NVML_ERROR_GPU_NOT_FOUND:
    case NVML_ERROR_NO_DATA:
      return absl::StatusCode::kNotFound;
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
    case NVML_ERROR_MEMORY:
      return absl::StatusCode::kResourceExhausted;
    case NVML_ERROR_TIMEOUT:
      return absl::StatusCode::kDeadlineExceeded;
    case NVML_ERROR_IN_USE:
    case NVML_ERROR_RESET_REQUIRED:
    case NVML_ERROR_UNINITIALIZED:
    case NVML_ERROR_INVALID_STATE:
    case NVML_ERROR_ALREADY_INITIALIZED:
    case NVML_ERROR_INSUFFICIENT_POWER:
      return absl::StatusCode::kFailedPrecondition;
    case NVML_ERROR_GPU_IS_LOST:
    case NVML_ERROR_DRIVER_NOT_LOADED:
    case NVML_ERROR_LIBRARY_NOT_FOUND:
    case NVML_ERROR_NOT_READY:
    case NVML_ERROR_IRQ_ISSUE:
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return absl::StatusCode::kUnavailable;
    case NVML_ERROR_UNKNOWN:
      return absl::StatusCode::kUnknown;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status NvmlStatus(nvmlReturn_t code, absl::string_view what) {
  if (code == NVML_SUCCESS) {
    return absl::OkStatus();
  }
  return absl::Status(NvmlReturnToCode(code),
                      absl::StrCat(what, ": ", NvmlReturnName(code), " (", code, ")"));
}

}  // namespace dralens::driver::discovery::nvml
