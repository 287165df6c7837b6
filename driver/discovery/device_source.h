// DeviceSource: where the node's GPUs come from (NVML on real nodes, a simulated profile in
// the demo and in tests).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "src/model/inventory.h"

namespace dralens::driver::discovery {

enum class HealthEventKind {
  kXid,      // an Xid critical error on a GPU (or one of its MIG devices)
  kGpuLost,  // the GPU fell off the bus / became inaccessible (NVML_ERROR_GPU_IS_LOST)
};
absl::string_view ToString(HealthEventKind kind);

inline constexpr uint32_t kNoMigInstance = 0xFFFFFFFFu;

struct HealthEvent {
  // The affected GPU. Empty for a kGpuLost event that could not be attributed to one GPU (the
  // NVML wait itself failed): consumers treat it as "every GPU".
  std::string gpu_uuid;
  HealthEventKind kind = HealthEventKind::kXid;
  uint64_t xid = 0;  // the Xid for kXid (999 = unknown Xid); 79 for kGpuLost when known
  // The MIG instance the event is attributed to, or kNoMigInstance for the whole GPU.
  uint32_t gi_id = kNoMigInstance;
  uint32_t ci_id = kNoMigInstance;
  bool operator==(const HealthEvent&) const = default;
};

// Time-slice interval names of `nvidia-smi compute-policy --set-timeslice` (reference §7.5).
enum class TimeSlice { kDefault = 0, kShort = 1, kMedium = 2, kLong = 3 };
absl::string_view ToString(TimeSlice interval);

// The node's GPU backend.
//
// Thread-safety: every implementation is safe to call from several threads at once. WaitForEvent
// may block one thread while others discover or manage MIG devices.
class DeviceSource {
 public:
  virtual ~DeviceSource() = default;

  // A fresh snapshot of the GPUs and existing MIG devices. Read-only: never changes any GPU
  // setting. A GPU that is lost is left out (and reported through WaitForEvent).
  virtual absl::StatusOr<model::Inventory> Discover() = 0;

  // Creates a GPU instance of `profile` (e.g. "1g.10gb") at memory-slice `placement_start` on
  // the GPU `gpu_uuid`, and its default compute instance. Errors, as NVML reports them:
  //   NotFound (unknown GPU or profile), Unimplemented (NVML_ERROR_NOT_SUPPORTED: MIG mode
  //   disabled), InvalidArgument (placement not valid for the profile), ResourceExhausted
  //   (NVML_ERROR_INSUFFICIENT_RESOURCES: overlapping placement or profile limit reached),
  //   Unavailable (NVML_ERROR_GPU_IS_LOST).
  virtual absl::StatusOr<model::MigDevice> CreateMigDevice(absl::string_view gpu_uuid,
                                                           absl::string_view profile,
                                                           uint32_t placement_start) = 0;

  // Destroys the compute instance, then its GPU instance once no CI is left in it.
  // NotFound for an unknown MIG device.
  virtual absl::Status DestroyMigDevice(absl::string_view mig_uuid) = 0;
  // The same, by (parent GPU, GI ID, CI ID).
  virtual absl::Status DestroyMigInstance(absl::string_view gpu_uuid, uint32_t gi_id,
                                          uint32_t ci_id) = 0;

  // Enables or disables MIG mode on a MIG-capable GPU (DynamicMIG toggles it on Hopper and
  // later). Unimplemented when the GPU is not MIG capable; FailedPrecondition (IN_USE) when
  // disabling with MIG devices present. On Ampere the change stays pending until a GPU reset.
  virtual absl::Status SetMigMode(absl::string_view gpu_uuid, bool enabled) = 0;

  // Sets the compute time-slice interval of a full GPU.
  virtual absl::Status SetTimeSlice(absl::string_view gpu_uuid, TimeSlice interval) = 0;

  // Blocks up to `timeout` for the next health event. nullopt on timeout.
  virtual absl::StatusOr<std::optional<HealthEvent>> WaitForEvent(absl::Duration timeout) = 0;
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
};

// Builds the device source named by `options.kind`. InvalidArgument for an unknown kind;
// otherwise the errors of the chosen backend (missing library, unknown profile, bad JSON).
absl::StatusOr<DeviceSourcePtr> MakeDeviceSource(const DeviceSourceOptions& options);
// Shorthand: MakeDeviceSource({kind, profile, node_name}).
absl::StatusOr<DeviceSourcePtr> MakeDeviceSource(absl::string_view kind,
                                                 absl::string_view simulated_profile,
                                                 absl::string_view node_name = "node");

}  // namespace dralens::driver::discovery
