// NvmlLibrary: libnvidia-ml loaded with dlopen and the functions dralens calls, resolved with
// dlsym. The versioned exports (nvmlDeviceGetCount_v2, nvmlDeviceGetPciInfo_v3,
// nvmlEventSetWait_v2, nvmlDeviceGetGpuInstancePossiblePlacements_v2, ...) are required: their
// legacy predecessors take other structs or mean other things. A library without them is
// refused with an error that names the minimum driver (docs/hardware.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "driver/discovery/nvml/nvml_types.h"

namespace dralens::driver::discovery::nvml {

// The oldest NVIDIA driver branch whose libnvidia-ml exports every required symbol.
inline constexpr char kMinimumDriver[] = "R470";

// Function table. Every member is non-null after Load() except those marked optional.
struct NvmlApi {
  nvmlReturn_t (*InitWithFlags)(unsigned int flags) = nullptr;
  nvmlReturn_t (*Shutdown)() = nullptr;
  nvmlReturn_t (*SystemGetDriverVersion)(char* version, unsigned int length) = nullptr;
  nvmlReturn_t (*SystemGetCudaDriverVersion)(int* version) = nullptr;
  nvmlReturn_t (*DeviceGetCount)(unsigned int* count) = nullptr;
  nvmlReturn_t (*DeviceGetHandleByIndex)(unsigned int index, nvmlDevice_t* device) = nullptr;
  nvmlReturn_t (*DeviceGetHandleByUUID)(const char* uuid, nvmlDevice_t* device) = nullptr;
  nvmlReturn_t (*DeviceGetMinorNumber)(nvmlDevice_t device, unsigned int* minor) = nullptr;
  nvmlReturn_t (*DeviceGetIndex)(nvmlDevice_t device, unsigned int* index) = nullptr;
  nvmlReturn_t (*DeviceGetUUID)(nvmlDevice_t device, char* uuid, unsigned int length) = nullptr;
  nvmlReturn_t (*DeviceGetName)(nvmlDevice_t device, char* name, unsigned int length) = nullptr;
  nvmlReturn_t (*DeviceGetBrand)(nvmlDevice_t device, int* brand) = nullptr;
  nvmlReturn_t (*DeviceGetArchitecture)(nvmlDevice_t device, unsigned int* arch) = nullptr;
  nvmlReturn_t (*DeviceGetCudaComputeCapability)(nvmlDevice_t device, int* major,
                                                 int* minor) = nullptr;
  nvmlReturn_t (*DeviceGetMemoryInfo)(nvmlDevice_t device, nvmlMemory_t* memory) = nullptr;
  nvmlReturn_t (*DeviceGetPciInfo)(nvmlDevice_t device, nvmlPciInfo_t* pci) = nullptr;
  // Optional (R550+): null means "not supported".
  nvmlReturn_t (*DeviceGetNumaNodeId)(nvmlDevice_t device, unsigned int* node) = nullptr;
  nvmlReturn_t (*DeviceGetMigMode)(nvmlDevice_t device, unsigned int* current,
                                   unsigned int* pending) = nullptr;
  nvmlReturn_t (*DeviceSetMigMode)(nvmlDevice_t device, unsigned int mode,
                                   nvmlReturn_t* activation_status) = nullptr;
  nvmlReturn_t (*DeviceGetGpuInstanceProfileInfo)(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_t* info) = nullptr;
  nvmlReturn_t (*DeviceGetGpuInstancePossiblePlacements)(nvmlDevice_t device,
                                                         unsigned int profile_id,
                                                         nvmlGpuInstancePlacement_t* placements,
                                                         unsigned int* count) = nullptr;
  nvmlReturn_t (*DeviceCreateGpuInstanceWithPlacement)(nvmlDevice_t device, unsigned int profile_id,
                                                       const nvmlGpuInstancePlacement_t* placement,
                                                       nvmlGpuInstance_t* gpu_instance) = nullptr;
  nvmlReturn_t (*GpuInstanceDestroy)(nvmlGpuInstance_t gpu_instance) = nullptr;
  nvmlReturn_t (*DeviceGetGpuInstanceById)(nvmlDevice_t device, unsigned int id,
                                           nvmlGpuInstance_t* gpu_instance) = nullptr;
  nvmlReturn_t (*GpuInstanceGetInfo)(nvmlGpuInstance_t gpu_instance,
                                     nvmlGpuInstanceInfo_t* info) = nullptr;
  nvmlReturn_t (*GpuInstanceGetComputeInstanceProfileInfo)(
      nvmlGpuInstance_t gpu_instance, unsigned int profile, unsigned int eng_profile,
      nvmlComputeInstanceProfileInfo_t* info) = nullptr;
  nvmlReturn_t (*GpuInstanceCreateComputeInstance)(nvmlGpuInstance_t gpu_instance,
                                                   unsigned int profile_id,
                                                   nvmlComputeInstance_t* ci) = nullptr;
  nvmlReturn_t (*ComputeInstanceDestroy)(nvmlComputeInstance_t ci) = nullptr;
  nvmlReturn_t (*GpuInstanceGetComputeInstanceById)(nvmlGpuInstance_t gpu_instance, unsigned int id,
                                                    nvmlComputeInstance_t* ci) = nullptr;
  nvmlReturn_t (*ComputeInstanceGetInfo)(nvmlComputeInstance_t ci,
                                         nvmlComputeInstanceInfo_t* info) = nullptr;
  nvmlReturn_t (*DeviceGetGpuInstanceId)(nvmlDevice_t device, unsigned int* id) = nullptr;
  nvmlReturn_t (*DeviceGetComputeInstanceId)(nvmlDevice_t device, unsigned int* id) = nullptr;
  nvmlReturn_t (*DeviceGetMaxMigDeviceCount)(nvmlDevice_t device, unsigned int* count) = nullptr;
  nvmlReturn_t (*DeviceGetMigDeviceHandleByIndex)(nvmlDevice_t device, unsigned int index,
                                                  nvmlDevice_t* mig_device) = nullptr;
  nvmlReturn_t (*DeviceGetDeviceHandleFromMigDeviceHandle)(nvmlDevice_t mig_device,
                                                           nvmlDevice_t* device) = nullptr;
  nvmlReturn_t (*EventSetCreate)(nvmlEventSet_t* set) = nullptr;
  nvmlReturn_t (*DeviceGetSupportedEventTypes)(nvmlDevice_t device,
                                               unsigned long long* event_types) = nullptr;
  nvmlReturn_t (*DeviceRegisterEvents)(nvmlDevice_t device, unsigned long long event_types,
                                       nvmlEventSet_t set) = nullptr;
  nvmlReturn_t (*EventSetWait)(nvmlEventSet_t set, nvmlEventData_t* data,
                               unsigned int timeout_ms) = nullptr;
  nvmlReturn_t (*EventSetFree)(nvmlEventSet_t set) = nullptr;
  // Usage sampling. Optional: null means "not supported" (GPM needs R520+).
  nvmlReturn_t (*DeviceGetUtilizationRates)(nvmlDevice_t device,
                                            nvmlUtilization_t* utilization) = nullptr;
  nvmlReturn_t (*GpmQueryDeviceSupport)(nvmlDevice_t device, nvmlGpmSupport_t* support) = nullptr;
  nvmlReturn_t (*GpmSampleAlloc)(nvmlGpmSample_t* sample) = nullptr;
  nvmlReturn_t (*GpmSampleFree)(nvmlGpmSample_t sample) = nullptr;
  nvmlReturn_t (*GpmMigSampleGet)(nvmlDevice_t device, unsigned int gpu_instance_id,
                                  nvmlGpmSample_t sample) = nullptr;
  // Takes an nvmlGpmMetricsGetN_t of any N (see nvml_types.h).
  nvmlReturn_t (*GpmMetricsGet)(void* metrics_get) = nullptr;
  // NVLink and fabric identity. Optional: null means "no NVLink" / "no fabric" (the fabric call
  // needs R550+).
  nvmlReturn_t (*DeviceGetNvLinkState)(nvmlDevice_t device, unsigned int link,
                                       nvmlEnableState_t* is_active) = nullptr;
  nvmlReturn_t (*DeviceGetNvLinkRemotePciInfo)(nvmlDevice_t device, unsigned int link,
                                               nvmlPciInfo_t* pci) = nullptr;
  nvmlReturn_t (*DeviceGetGpuFabricInfoV)(nvmlDevice_t device,
                                          nvmlGpuFabricInfo_v2_t* info) = nullptr;
};

// The dlopen handle and the resolved table. Closing happens in the destructor. Thread-safe after
// Load (the table is immutable).
class NvmlLibrary {
 public:
  // dlopen(path, RTLD_LAZY | RTLD_GLOBAL), then dlsym of every function.
  //   NotFound "load <path>: <dlerror>" when the library cannot be opened;
  //   FailedPrecondition "<path>: missing NVML symbol <name>" when a required one is absent.
  static absl::StatusOr<std::unique_ptr<NvmlLibrary>> Load(absl::string_view path);
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  const NvmlApi& api() const { return api_; }
  const std::string& path() const { return path_; }
  // The names of the required symbols, in resolution order (for tests and diagnostics).
  static std::vector<std::string> RequiredSymbols();

 private:
  NvmlLibrary(std::string path, void* handle) : path_(std::move(path)), handle_(handle) {}

  std::string path_;
  void* handle_ = nullptr;
  NvmlApi api_;
};

}  // namespace dralens::driver::discovery::nvml
