#include "src/model/device_type.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace dralens::model {

absl::string_view ToString(DeviceType type) {
  switch (type) {
    case DeviceType::kGpu:
      return "gpu";
    case DeviceType::kMig:
      return "mig";
  }
  return "gpu";
}

absl::StatusOr<DeviceType> ParseDeviceType(absl::string_view type) {
  if (type == "gpu") {
    return DeviceType::kGpu;
  }
  if (type == "mig") {
    return DeviceType::kMig;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device type \"", absl::CEscape(type), "\" (want gpu or mig)"));
}

}  // namespace dralens::model
