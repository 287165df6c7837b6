// What kind of device a node publishes: a full GPU or a MIG device. One enum for the slices'
// `type` attribute, the checkpoint, the sharing rules and every metric label that names it.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dralens::model {

enum class DeviceType { kGpu, kMig };

// "gpu" | "mig": the device `type` attribute, the checkpoint field and the metric label value.
absl::string_view ToString(DeviceType type);
// The inverse of ToString; InvalidArgument naming the value otherwise.
absl::StatusOr<DeviceType> ParseDeviceType(absl::string_view type);

}  // namespace dralens::model
