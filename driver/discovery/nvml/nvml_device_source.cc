#include "driver/discovery/nvml/nvml_device_source.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "driver/discovery/nvml/nvml_internal.h"
#include "driver/discovery/nvml/nvml_status.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/model/mig_profile.h"

namespace dralens::driver::discovery {

using namespace nvml;           // NOLINT(build/namespaces): the NVML C names read best unqualified
using namespace nvml_internal;  // NOLINT(build/namespaces)

std::string NormalizePciBusId(absl::string_view bus_id) {
  std::string id = absl::AsciiStrToLower(absl::StripAsciiWhitespace(bus_id));
  const size_t colon = id.find(':');
  if (colon == 8 && absl::StartsWith(id, "0000")) {
    id.erase(0, 4);
  }
  return id;
}

std::string BrandName(int brand) {
  static constexpr std::array<const char*, 17> kNames = {
      "Unknown",   "Quadro",      "Tesla",     "NVS",        "Grid",      "GeForce",
      "Titan",     "NvidiaVApps", "NvidiaVPC", "NvidiaVCS",  "NvidiaVWS", "NvidiaCloudGaming",
      "QuadroRTX", "NvidiaRTX",   "Nvidia",    "GeForceRTX", "TitanRTX"};
  if (brand < 0 || static_cast<size_t>(brand) >= kNames.size()) {
    return "Unknown";
  }
  return kNames[static_cast<size_t>(brand)];
}

std::string ArchitectureName(unsigned int architecture) {
  switch (architecture) {
    case 2:
      return "Kepler";
    case 3:
      return "Maxwell";
    case 4:
      return "Pascal";
    case 5:
      return "Volta";
    case 6:
      return "Turing";
    case 7:
      return "Ampere";
    case 8:
      return "Ada Lovelace";
    case 9:
      return "Hopper";
    case 10:
      return "Blackwell";
    case 13:
      return "Rubin";
    default:
      return "Unknown";
  }
}

std::string CudaDriverVersionString(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

NvmlDeviceSource::NvmlDeviceSource(NvmlOptions options, std::unique_ptr<nvml::NvmlLibrary> library)
    : options_(std::move(options)), library_(std::move(library)), metrics_(options_.registry) {}

absl::StatusOr<std::unique_ptr<NvmlDeviceSource>> NvmlDeviceSource::Create(
    const NvmlOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<nvml::NvmlLibrary> library,
                   nvml::NvmlLibrary::Load(options.library_path));
  std::unique_ptr<NvmlDeviceSource> source(new NvmlDeviceSource(options, std::move(library)));
  // NO_GPUS: a node without GPUs still initialises (and then discovers none), as the DRA
  // driver does.
  RETURN_IF_ERROR(NvmlStatus(source->api().InitWithFlags(NVML_INIT_FLAG_NO_GPUS),
                             absl::StrCat("nvmlInitWithFlags (", options.library_path, ")")));
  source->initialized_ = true;
  return source;
}

NvmlDeviceSource::~NvmlDeviceSource() {
  FreeGpmSamples();
  {
    absl::MutexLock lock(&mu_);
    if (event_set_ != nullptr) {
      api().EventSetFree(event_set_);
      event_set_ = nullptr;
    }
  }
  if (initialized_) {
    api().Shutdown();
  }
}

absl::StatusOr<model::GpuInfo> NvmlDeviceSource::ReadGpu(nvmlDevice_t device, unsigned int index,
                                                         DeniedCounts& denied) {
  const nvml::NvmlApi& nv = api();
  model::GpuInfo gpu;
  gpu.index = index;
  const std::string what = absl::StrCat("GPU ", index);
  RETURN_IF_ERROR(NvmlStatus(nv.DeviceGetMinorNumber(device, &gpu.minor),
                             absl::StrCat("nvmlDeviceGetMinorNumber ", what)));
  char buffer[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  RETURN_IF_ERROR(NvmlStatus(nv.DeviceGetUUID(device, buffer, sizeof(buffer)),
                             absl::StrCat("nvmlDeviceGetUUID ", what)));
  gpu.uuid = CString(buffer, sizeof(buffer));
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  RETURN_IF_ERROR(NvmlStatus(nv.DeviceGetName(device, name, sizeof(name)),
                             absl::StrCat("nvmlDeviceGetName ", what)));
  gpu.product_name = CString(name, sizeof(name));
  int brand = 0;
  RETURN_IF_ERROR(
      NvmlStatus(nv.DeviceGetBrand(device, &brand), absl::StrCat("nvmlDeviceGetBrand ", what)));
  gpu.brand = BrandName(brand);
  unsigned int arch = 0;
  RETURN_IF_ERROR(NvmlStatus(nv.DeviceGetArchitecture(device, &arch),
                             absl::StrCat("nvmlDeviceGetArchitecture ", what)));
  gpu.architecture = ArchitectureName(arch);
  RETURN_IF_ERROR(NvmlStatus(
      nv.DeviceGetCudaComputeCapability(device, &gpu.cuda_compute_major, &gpu.cuda_compute_minor),
      absl::StrCat("nvmlDeviceGetCudaComputeCapability ", what)));
  nvmlMemory_t memory = {};
  const nvmlReturn_t mem_rc = nv.DeviceGetMemoryInfo(device, &memory);
  if (mem_rc == NVML_SUCCESS) {
    gpu.memory_bytes = memory.total;
  } else if (mem_rc != NVML_ERROR_NOT_SUPPORTED && mem_rc != NVML_ERROR_NO_PERMISSION) {
    return NvmlStatus(mem_rc, absl::StrCat("nvmlDeviceGetMemoryInfo ", what));
  }
  nvmlPciInfo_t pci = {};
  RETURN_IF_ERROR(NvmlStatus(nv.DeviceGetPciInfo(device, &pci),
                             absl::StrCat("nvmlDeviceGetPciInfo_v3 ", what)));
  gpu.pci_bus_id = NormalizePciBusId(CString(pci.busId, sizeof(pci.busId)));
  if (!gpu.pci_bus_id.empty()) {
    // The host NUMA node of the PCI device, not nvmlDeviceGetNumaNodeId: on coherent systems
    // (GH200, GB200) that is the GPU memory's own CPU-less node, not the CPUs near the GPU.
    gpu.numa_node = SysfsNumaNode(options_.sysfs_root, gpu.pci_bus_id);
    gpu.pcie_root = SysfsPcieRoot(options_.sysfs_root, gpu.pci_bus_id);
  }
  unsigned int current = 0;
  unsigned int pending = 0;
  const nvmlReturn_t mig_rc = nv.DeviceGetMigMode(device, &current, &pending);
  if (mig_rc == NVML_SUCCESS) {
    gpu.mig_capable = true;
    gpu.mig_mode_current =
        current == NVML_DEVICE_MIG_ENABLE ? model::MigMode::kEnabled : model::MigMode::kDisabled;
    gpu.mig_mode_pending =
        pending == NVML_DEVICE_MIG_ENABLE ? model::MigMode::kEnabled : model::MigMode::kDisabled;
  } else if (mig_rc != NVML_ERROR_NOT_SUPPORTED) {
    return NvmlStatus(mig_rc, absl::StrCat("nvmlDeviceGetMigMode ", what));
  }
  if (gpu.mig_capable) {
    ASSIGN_OR_RETURN(gpu.mig_profiles, ReadMigProfiles(device, gpu, denied));
    for (const model::MigProfile& p : gpu.mig_profiles) {
      gpu.memory_slices = std::max(gpu.memory_slices, p.memory_slices);
    }
  }
  return gpu;
}

absl::StatusOr<model::Inventory> NvmlDeviceSource::Discover() {
  const nvml::NvmlApi& nv = api();
  char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  RETURN_IF_ERROR(
      NvmlStatus(nv.SystemGetDriverVersion(driver, sizeof(driver)), "nvmlSystemGetDriverVersion"));
  int cuda = 0;
  RETURN_IF_ERROR(
      NvmlStatus(nv.SystemGetCudaDriverVersion(&cuda), "nvmlSystemGetCudaDriverVersion"));
  const std::string driver_version = CString(driver, sizeof(driver));
  const std::string cuda_version = CudaDriverVersionString(cuda);

  // _v2 counts the GPUs this process may not open as well; their handles answer
  // NVML_ERROR_NO_PERMISSION.
  unsigned int count = 0;
  RETURN_IF_ERROR(NvmlStatus(nv.DeviceGetCount(&count), "nvmlDeviceGetCount_v2"));
  std::vector<model::GpuInfo> gpus;
  std::vector<nvmlDevice_t> handles;  // of `gpus`, in the same order
  std::vector<model::MigDevice> migs;
  DeniedCounts denied;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    absl::Status status = NvmlStatus(nv.DeviceGetHandleByIndex(i, &device),
                                     absl::StrCat("nvmlDeviceGetHandleByIndex_v2 ", i));
    absl::StatusOr<model::GpuInfo> gpu =
        status.ok() ? ReadGpu(device, i, denied) : absl::StatusOr<model::GpuInfo>(status);
    absl::StatusOr<std::vector<model::MigDevice>> gpu_migs = std::vector<model::MigDevice>();
    if (gpu.ok()) {
      gpu->driver_version = driver_version;
      gpu->cuda_driver_version = cuda_version;
      if (gpu->mig_enabled()) {
        gpu_migs = ReadMigDevices(device, *gpu, denied);
      }
    }
    const absl::Status failure = !gpu.ok() ? gpu.status() : gpu_migs.status();
    if (!failure.ok()) {
      if (IsGpuLost(failure)) {
        // A lost GPU must not hide the healthy ones; WaitForEvent reports the loss.
        DLOG(kWarn, kComponent, "GPU is lost; left out of the inventory",
             {{"index", i}, {"error", failure.message()}});
        continue;
      }
      if (IsNoPermission(failure)) {
        // Outside this container's device cgroup: another driver's, or not for us.
        ++denied.gpus;
        DLOG(kWarn, kComponent, "GPU not accessible to this process; left out of the inventory",
             {{"index", i}, {"error", failure.message()}});
        continue;
      }
      return common::Annotate(failure, "NVML discovery");
    }
    gpus.push_back(*std::move(gpu));
    handles.push_back(device);
    for (model::MigDevice& mig : *gpu_migs) {
      migs.push_back(std::move(mig));
    }
  }
  AssignNvLinkDomains(handles, gpus);
  metrics_.SetDenied(denied);
  return common::Annotate(
      model::Inventory::Create(driver_version, cuda_version, std::move(gpus), std::move(migs)),
      "NVML discovery");
}

absl::StatusOr<nvmlDevice_t> NvmlDeviceSource::HandleByUuid(absl::string_view uuid) {
  nvmlDevice_t device = nullptr;
  const std::string text(uuid);
  RETURN_IF_ERROR(NvmlStatus(api().DeviceGetHandleByUUID(text.c_str(), &device),
                             absl::StrCat("nvmlDeviceGetHandleByUUID ", uuid)));
  return device;
}

absl::StatusOr<model::GpuInfo> NvmlDeviceSource::ReadGpuByUuid(absl::string_view uuid,
                                                               nvmlDevice_t* device) {
  ASSIGN_OR_RETURN(*device, HandleByUuid(uuid));
  unsigned int index = 0;
  RETURN_IF_ERROR(
      NvmlStatus(api().DeviceGetIndex(*device, &index), absl::StrCat("nvmlDeviceGetIndex ", uuid)));
  DeniedCounts denied;  // one GPU's reading, not a discovery: not counted
  return ReadGpu(*device, index, denied);
}

}  // namespace dralens::driver::discovery
