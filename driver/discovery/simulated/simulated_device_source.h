// SimulatedDeviceSource: GPUs from a SimulatedProfile, with NVML's MIG semantics (reference
// nvml-and-mig.md §8) and fault injection for tests.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "driver/discovery/device_source.h"
#include "driver/discovery/simulated/simulated_profile.h"
#include "src/model/inventory.h"
#include "src/model/mig_profile.h"

namespace dralens::driver::discovery {

// Operations that fault injection can target.
enum class SimulatedOp {
  kDiscover,
  kCreateMigDevice,
  kDestroyMigDevice,  // both DestroyMigDevice and DestroyMigInstance
  kGetMigMode,
  kSetMigMode,
  kSetTimeSlice,
  kWaitForEvent,
};
absl::string_view ToString(SimulatedOp op);

// Deterministic UUID in NVML's textual form: "<prefix>-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
// lower-case hex, derived only from `seed`.
std::string DeterministicUuid(absl::string_view prefix, absl::string_view seed);

// Simulated GPUs. UUIDs are derived from (profile name, node name, GPU index) and, for MIG
// devices, the GI/CI IDs and a per-GPU creation counter, so a run that performs the same calls
// sees the same UUIDs; a re-created MIG device gets a new UUID, as on real drivers.
//
// GI IDs follow the pattern of published listings (full 0, half 1-2, quarter 3-6, eighth 7-14,
// by placement start); CI IDs count from 0 within the GI.
//
// Thread-safe: one mutex guards all state; WaitForEvent releases it while waiting.
class SimulatedDeviceSource : public DeviceSource {
 public:
  // Validates the profile (ValidateSimulatedProfile) and creates its pre-defined MIG devices.
  static absl::StatusOr<std::unique_ptr<SimulatedDeviceSource>> Create(
      const SimulatedProfile& profile, absl::string_view node_name);

  // GpuDiscovery
  absl::StatusOr<model::Inventory> Discover() override;
  // MigControl
  absl::StatusOr<model::MigDevice> CreateMigDevice(absl::string_view gpu_uuid,
                                                   absl::string_view profile,
                                                   uint32_t placement_start) override;
  absl::Status DestroyMigDevice(absl::string_view mig_uuid) override;
  absl::Status DestroyMigInstance(absl::string_view gpu_uuid, uint32_t gi_id,
                                  uint32_t ci_id) override;
  absl::StatusOr<MigModeState> GetMigMode(absl::string_view gpu_uuid) override;
  absl::Status SetMigMode(absl::string_view gpu_uuid, bool enabled) override;
  // TimeSliceControl
  absl::Status SetTimeSlice(absl::string_view gpu_uuid, TimeSlice interval) override;
  // HealthEventSource
  absl::StatusOr<std::optional<HealthEvent>> WaitForEvent(absl::Duration timeout) override;
  // UsageSource, as NVML answers: a GPU not in MIG mode reports utilisation; in MIG mode it
  // reports memory only, and its MIG devices report GPM activity on Hopper and later (none on
  // the first sample of a device) and memory only before.
  absl::StatusOr<std::vector<DeviceUsage>> SampleUsage() override;

  // The load that `owner` (a process, a pod) puts on a device (a GPU's or MIG device's UUID), as
  // the demo's pods do: reported by SampleUsage until cleared. A device's figures are the sum of
  // its owners' (utilisation at most 1); without load it reports 0 and no memory used. NotFound
  // for an unknown device.
  absl::Status SetLoad(absl::string_view uuid, absl::string_view owner, double utilization,
                       uint64_t memory_used_bytes);
  void ClearLoad(absl::string_view uuid, absl::string_view owner);

  // Fault injection. The next `count` calls of `op` fail with `error` (not OK) before doing
  // anything; a later call for the same op replaces the pending failures.
  void FailNextCalls(SimulatedOp op, int count, absl::Status error);
  // Queues an Xid event. NotFound for an unknown GPU.
  absl::Status InjectXid(absl::string_view gpu_uuid, uint64_t xid, uint32_t gi_id = kNoMigInstance,
                         uint32_t ci_id = kNoMigInstance);
  // Marks the GPU lost: it disappears from Discover, every operation on it fails with
  // NVML_ERROR_GPU_IS_LOST, and a kGpuLost event (Xid 79) is queued.
  absl::Status InjectGpuLost(absl::string_view gpu_uuid);
  // Resets the GPU (nvidia-smi -r, a driver reload, or what a crash recovery does): every MIG
  // instance on it is gone, a pending MIG mode takes effect (how Ampere switches), the time
  // slice is back to its default and a lost GPU is back. NotFound for an unknown GPU.
  absl::Status InjectGpuReset(absl::string_view gpu_uuid);

  // Test accessors.
  std::optional<TimeSlice> TimeSliceForTest(absl::string_view gpu_uuid);
  int CallCountForTest(SimulatedOp op);

 private:
  struct ComputeInstance {
    uint32_t id = 0;
    uint32_t profile_id = 0;
    uint32_t slices = 0;
    std::string uuid;
  };
  struct GpuInstance {
    uint32_t id = 0;
    model::MigProfile profile;
    model::MigPlacement placement;
    std::vector<ComputeInstance> cis;
  };
  struct Gpu {
    model::GpuInfo info;  // static facts; MIG mode fields are refreshed from the state below
    const model::MigBoard* board = nullptr;
    model::MigMode current = model::MigMode::kDisabled;
    model::MigMode pending = model::MigMode::kDisabled;
    std::vector<GpuInstance> gis;
    bool lost = false;
    TimeSlice time_slice = TimeSlice::kDefault;
    uint64_t creations = 0;  // MIG devices ever created on this GPU: part of the UUID seed
  };
  struct Fault {
    int remaining = 0;
    absl::Status error;
  };
  struct Load {
    double utilization = 0;
    uint64_t memory_used_bytes = 0;
  };

  SimulatedDeviceSource(SimulatedProfile profile, std::string node_name);

  // Sets each GPU's nvlink_domain from the profile's NVLink layout, described as the links a
  // real node of that kind reports (NvLinkDomains names the domains as NVML discovery does).
  void AssignNvLinkDomains() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts the call and returns the injected error, if any.
  absl::Status Enter(SimulatedOp op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The GPU, or NotFound / GPU_IS_LOST.
  absl::StatusOr<Gpu*> FindGpu(absl::string_view uuid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<model::MigDevice> CreateLocked(Gpu& gpu, const model::MigProfile& profile,
                                                uint32_t start) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status DestroyLocked(Gpu& gpu, uint32_t gi_id, uint32_t ci_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  model::MigDevice ToMigDevice(const Gpu& gpu, const GpuInstance& gi,
                               const ComputeInstance& ci) const;

  const SimulatedProfile profile_;
  const std::string node_name_;

  absl::Mutex mu_;
  std::vector<Gpu> gpus_ ABSL_GUARDED_BY(mu_);
  std::map<SimulatedOp, Fault> faults_ ABSL_GUARDED_BY(mu_);
  std::map<SimulatedOp, int> calls_ ABSL_GUARDED_BY(mu_);
  std::deque<HealthEvent> events_ ABSL_GUARDED_BY(mu_);
  // By device UUID, then owner.
  std::map<std::string, std::map<std::string, Load, std::less<>>, std::less<>> loads_
      ABSL_GUARDED_BY(mu_);
  // MIG devices sampled in the last round: GPM has a previous sample for them.
  std::set<std::string> gpm_sampled_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dralens::driver::discovery
