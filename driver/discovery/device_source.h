// DeviceSource: one GPU backend (NVML on real nodes, a simulated profile in the demo and in
// tests) offering its five capabilities. Components depend on the capability they use:
//   GpuDiscovery      (gpu_discovery.h)       the inventory: slices, health, the MIG manager;
//   MigControl        (mig_control.h)         MIG instances and MIG mode: dynamic MIG;
//   TimeSliceControl  (time_slice_control.h)  time-slicing: sharing;
//   HealthEventSource (health_events.h)       Xids and lost GPUs: the health monitor;
//   UsageSource       (usage_source.h)        utilisation and memory used: the usage sampler.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "driver/discovery/gpu_discovery.h"
#include "driver/discovery/health_events.h"
#include "driver/discovery/mig_control.h"
#include "driver/discovery/time_slice_control.h"
#include "driver/discovery/usage_source.h"
#include "prometheus/registry.h"

namespace dralens::driver::discovery {

// Every implementation is safe to call from several threads at once (see each capability).
class DeviceSource : public GpuDiscovery,
                     public MigControl,
                     public TimeSliceControl,
                     public HealthEventSource,
                     public UsageSource {
 public:
  ~DeviceSource() override = default;
};
using DeviceSourcePtr = std::unique_ptr<DeviceSource>;

struct DeviceSourceOptions {
  std::string kind = "simulated";  // "nvml" | "simulated"
  // simulated: a built-in profile name ("dgx-h100", "a100-40gb", "mixed") or a JSON file path.
  std::string simulated_profile = "dgx-h100";
  // simulated: part of the seed of the deterministic UUIDs.
  std::string node_name = "node";
  // nvml: the library to dlopen.
  std::string nvml_library = "libnvidia-ml.so.1";
  // nvml: where its metrics (NvmlMetrics) go; nullptr: nowhere. Not owned.
  prometheus::Registry* registry = nullptr;
};

// Builds the device source named by `options.kind`. InvalidArgument for an unknown kind;
// otherwise the errors of the chosen backend (missing library, unknown profile, bad JSON).
absl::StatusOr<DeviceSourcePtr> MakeDeviceSource(const DeviceSourceOptions& options);
// Shorthand: MakeDeviceSource({kind, profile, node_name}).
absl::StatusOr<DeviceSourcePtr> MakeDeviceSource(absl::string_view kind,
                                                 absl::string_view simulated_profile,
                                                 absl::string_view node_name = "node");

}  // namespace dralens::driver::discovery
