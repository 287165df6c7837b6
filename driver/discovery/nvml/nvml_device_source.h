// NvmlDeviceSource: the GPUs of a real node, through libnvidia-ml loaded at run time.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "driver/discovery/device_source.h"
#include "driver/discovery/nvml/nvml_library.h"
#include "driver/discovery/nvml/nvml_metrics.h"
#include "prometheus/registry.h"
#include "src/model/inventory.h"

namespace dralens::driver::discovery {

struct NvmlOptions {
  // Passed to dlopen as is: a bare soname searches the usual library path.
  std::string library_path = "libnvidia-ml.so.1";
  // Root of sysfs, for the NUMA node and PCIe root of each GPU (/sys/bus/pci/devices/<bdf>).
  std::string sysfs_root = "/sys";
  // Where NvmlMetrics go; nullptr: nowhere.
  prometheus::Registry* registry = nullptr;
  // nvidia-smi, for time-slicing (NVML has no public non-vGPU time-slice call, reference §7.5).
  std::string nvidia_smi_path = "nvidia-smi";
};

// "00000000:1B:00.0" -> "0000:1b:00.0" (lower case, 4-digit domain), as go-nvlib publishes it.
std::string NormalizePciBusId(absl::string_view bus_id);
// go-nvlib names of nvmlBrandType_t and nvmlDeviceArchitecture_t values.
std::string BrandName(int brand);
std::string ArchitectureName(unsigned int architecture);
// nvmlSystemGetCudaDriverVersion's integer: 12040 -> "12.4".
std::string CudaDriverVersionString(int version);

// Discovery follows the DRA driver's call sequence (reference §5) and only reads: it never
// calls a function that changes a GPU setting. NVML stays initialised (one nvmlInitWithFlags)
// for the lifetime of the object. MIG create/destroy, MIG mode and time-slicing change the GPU
// and are meant for the MIG manager and sharing code only.
//
// What NVML refuses with NVML_ERROR_NO_PERMISSION (a GPU outside the container's device
// cgroup; GetGpuInstanceProfileInfo, GetGpuInstanceById or GetComputeInstanceById without the
// MIG capability) is left out of the inventory, logged and counted (NvmlMetrics); the rest is
// returned. A lost GPU is left out as well.
//
// Health events: the event set registers, per GPU, the Xid, GPU-unavailable and recovery-action
// events it supports. It is freed and built again after nvmlEventSetWait answers
// NVML_ERROR_UNKNOWN (the set is undefined then), after a lost GPU, a MIG mode change or a
// recovery-action event. A GPU that supports none of them, or whose registration fails, is
// reported once per set as a kUnmonitored event and counted.
//
// Thread-safe: NVML is thread-safe; MIG changes are serialised by a mutex; one thread at a time
// should call WaitForEvent.
class NvmlDeviceSource : public DeviceSource {
 public:
  // Loads the library (errors name the library or the missing symbol) and initialises NVML.
  static absl::StatusOr<std::unique_ptr<NvmlDeviceSource>> Create(const NvmlOptions& options);
  ~NvmlDeviceSource() override;

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
  // UsageSource (nvml_usage.cc)
  absl::StatusOr<std::vector<DeviceUsage>> SampleUsage() override;

 private:
  NvmlDeviceSource(NvmlOptions options, std::unique_ptr<nvml::NvmlLibrary> library);

  const nvml::NvmlApi& api() const { return library_->api(); }
  absl::StatusOr<model::GpuInfo> ReadGpu(nvml::nvmlDevice_t device, unsigned int index,
                                         DeniedCounts& denied);
  // Sets the nvlink_domain of each GPU (nvml_nvlink.cc); `devices[i]` is the handle of
  // `gpus[i]`. Reads only, and never fails: what NVML does not tell (an old driver without the
  // calls, NOT_SUPPORTED, a fabric not registered) is no NVLink or no fabric.
  void AssignNvLinkDomains(const std::vector<nvml::nvmlDevice_t>& devices,
                           std::vector<model::GpuInfo>& gpus) const;
  absl::StatusOr<std::vector<model::MigProfile>> ReadMigProfiles(nvml::nvmlDevice_t device,
                                                                 const model::GpuInfo& gpu,
                                                                 DeniedCounts& denied);
  absl::StatusOr<std::vector<model::MigDevice>> ReadMigDevices(nvml::nvmlDevice_t device,
                                                               const model::GpuInfo& gpu,
                                                               DeniedCounts& denied);
  // The number of SM slices of a GPU instance's compute-instance profile with ID
  // `ci_profile_id` (IDs are mapped through the profile infos, never used as indices).
  std::optional<uint32_t> CiSlicesOf(nvml::nvmlGpuInstance_t gi, uint32_t ci_profile_id);
  absl::StatusOr<model::MigDevice> ReadMigDevice(nvml::nvmlDevice_t parent, nvml::nvmlDevice_t mig,
                                                 const model::GpuInfo& gpu);
  absl::StatusOr<nvml::nvmlDevice_t> HandleByUuid(absl::string_view uuid);
  absl::StatusOr<model::GpuInfo> ReadGpuByUuid(absl::string_view uuid, nvml::nvmlDevice_t* device);
  absl::Status DestroyLocked(nvml::nvmlDevice_t parent, absl::string_view parent_uuid,
                             uint32_t gi_id, uint32_t ci_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RunNvidiaSmi(const std::vector<std::string>& args);
  absl::StatusOr<nvml::nvmlEventSet_t> EventSet();
  // Frees the event set; the next WaitForEvent builds a new one.
  void DropEventSet(absl::string_view why) ABSL_LOCKS_EXCLUDED(mu_);
  // What the event set's data means as a health event; nullopt for none.
  std::optional<HealthEvent> Translate(const nvml::nvmlEventData_t& data);
  // Whether the GPU answers GPM queries (and the library has the GPM functions).
  bool GpmSupported(nvml::nvmlDevice_t device) const;
  // Takes a GPM sample of the MIG device's GPU instance and returns its graphics-engine activity
  // since the previous one (0..1); nullopt on the first sample or a failure.
  std::optional<double> GpmActivity(nvml::nvmlDevice_t parent, unsigned int gi_id,
                                    const std::string& mig_uuid)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(usage_mu_);
  void FreeGpmSamples() ABSL_LOCKS_EXCLUDED(usage_mu_);

  const NvmlOptions options_;
  std::unique_ptr<nvml::NvmlLibrary> library_;
  bool initialized_ = false;
  NvmlMetrics metrics_;

  absl::Mutex mu_;  // serialises MIG changes and the lazy event-set setup
  nvml::nvmlEventSet_t event_set_ ABSL_GUARDED_BY(mu_) = nullptr;
  // A MIG mode change or a recovery action asked for a new event set.
  bool event_set_stale_ ABSL_GUARDED_BY(mu_) = false;
  // kUnmonitored events of the current set, not yet returned by WaitForEvent.
  std::deque<HealthEvent> pending_events_ ABSL_GUARDED_BY(mu_);

  absl::Mutex usage_mu_;  // one SampleUsage at a time
  // The previous GPM sample of each MIG device, by MIG UUID.
  std::map<std::string, nvml::nvmlGpmSample_t> gpm_samples_ ABSL_GUARDED_BY(usage_mu_);
};

}  // namespace dralens::driver::discovery
