#include "driver/discovery/device_source.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "driver/discovery/nvml/nvml_device_source.h"
#include "driver/discovery/simulated/simulated_device_source.h"
#include "src/common/status.h"

namespace dralens::driver::discovery {

absl::StatusOr<DeviceSourcePtr> MakeDeviceSource(const DeviceSourceOptions& options) {
  if (options.kind == "simulated") {
    ASSIGN_OR_RETURN(SimulatedProfile profile, LoadSimulatedProfile(options.simulated_profile));
    ASSIGN_OR_RETURN(std::unique_ptr<SimulatedDeviceSource> source,
                     SimulatedDeviceSource::Create(profile, options.node_name));
    return DeviceSourcePtr(std::move(source));
  }
  if (options.kind == "nvml") {
    NvmlOptions nvml_options;
    nvml_options.library_path = options.nvml_library;
    nvml_options.registry = options.registry;
    ASSIGN_OR_RETURN(std::unique_ptr<NvmlDeviceSource> source,
                     NvmlDeviceSource::Create(nvml_options));
    return DeviceSourcePtr(std::move(source));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device source \"", options.kind, "\" (expected nvml or simulated)"));
}

absl::StatusOr<DeviceSourcePtr> MakeDeviceSource(absl::string_view kind,
                                                 absl::string_view simulated_profile,
                                                 absl::string_view node_name) {
  DeviceSourceOptions options;
  options.kind = std::string(kind);
  options.simulated_profile = std::string(simulated_profile);
  options.node_name = std::string(node_name);
  return MakeDeviceSource(options);
}

}  // namespace dralens::driver::discovery
