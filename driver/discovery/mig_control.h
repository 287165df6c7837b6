// MigControl: creating and destroying MIG instances and switching MIG mode (dynamic MIG).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/model/inventory.h"

namespace dralens::driver::discovery {

// Whether a change of MIG mode on `gpu` takes effect at once (Hopper and later), so that
// dynamic MIG may switch it at prepare time. On Ampere the change stays pending until a GPU
// reset; an unknown architecture counts as Ampere.
inline bool MigModeSwitchesWithoutReset(const model::GpuInfo& gpu) {
  return gpu.architecture == "Hopper" || gpu.architecture == "Blackwell" ||
         gpu.architecture == "Rubin";
}

// MIG mode of one GPU as nvmlDeviceGetMigMode reports it.
struct MigModeState {
  model::MigMode current = model::MigMode::kDisabled;
  model::MigMode pending = model::MigMode::kDisabled;
  bool operator==(const MigModeState&) const = default;
};

// Thread-safety: implementations serialise the changes they make; every method may be called
// from any thread.
class MigControl {
 public:
  virtual ~MigControl() = default;

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
  // The same, by (parent GPU, GI ID, CI ID). NotFound when the instance does not exist;
  // Unimplemented (NVML_ERROR_NOT_SUPPORTED) when the GPU is not in MIG mode, which also means
  // the instance does not exist.
  virtual absl::Status DestroyMigInstance(absl::string_view gpu_uuid, uint32_t gi_id,
                                          uint32_t ci_id) = 0;

  // The GPU's current and pending MIG mode. Unimplemented when the GPU is not MIG capable.
  virtual absl::StatusOr<MigModeState> GetMigMode(absl::string_view gpu_uuid) = 0;

  // Enables or disables MIG mode on a MIG-capable GPU (DynamicMIG toggles it on Hopper and
  // later). Unimplemented when the GPU is not MIG capable; FailedPrecondition (IN_USE) when
  // disabling with MIG devices present. On Ampere the change stays pending until a GPU reset.
  virtual absl::Status SetMigMode(absl::string_view gpu_uuid, bool enabled) = 0;
};

}  // namespace dralens::driver::discovery
