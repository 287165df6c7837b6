#include "driver/discovery/nvml/nvml_device_source.h"

#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "driver/discovery/nvml/nvml_status.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/model/mig_profile.h"

extern char** environ;

namespace dralens::driver::discovery {
namespace {

using namespace nvml;  // NOLINT(build/namespaces): the NVML C names read best unqualified

constexpr char kComponent[] = "nvml";

bool IsGpuLost(const absl::Status& status) {
  return absl::StrContains(status.message(), "NVML_ERROR_GPU_IS_LOST");
}

std::string CString(const char* buffer, size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

// The host NUMA node of a PCI device from sysfs; nullopt when absent or -1.
std::optional<int> SysfsNumaNode(const std::string& sysfs_root, const std::string& bdf) {
  std::ifstream in(absl::StrCat(sysfs_root, "/bus/pci/devices/", bdf, "/numa_node"));
  std::string text;
  int node = -1;
  if (!in || !std::getline(in, text) ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &node) || node < 0) {
    return std::nullopt;
  }
  return node;
}

// "pci<domain>:<bus>" of the root complex above a PCI device, from the sysfs device path
// (/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0); empty when unknown.
std::string SysfsPcieRoot(const std::string& sysfs_root, const std::string& bdf) {
  std::error_code ec;
  const std::filesystem::path resolved =
      std::filesystem::canonical(absl::StrCat(sysfs_root, "/bus/pci/devices/", bdf), ec);
  if (ec) {
    return "";
  }
  std::string root;
  for (const auto& part : resolved) {
    const std::string name = part.string();
    if (name.size() == 10 && absl::StartsWith(name, "pci") && name[7] == ':') {
      root = name;  // the innermost "pciDDDD:BB" wins; there is normally exactly one
    }
  }
  return root;
}

}  // namespace

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
    : options_(std::move(options)), library_(std::move(library)) {}

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

absl::StatusOr<model::GpuInfo> NvmlDeviceSource::ReadGpu(nvmlDevice_t device, unsigned int index) {
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
  unsigned int numa = 0;
  if (nv.DeviceGetNumaNodeId != nullptr && nv.DeviceGetNumaNodeId(device, &numa) == NVML_SUCCESS) {
    gpu.numa_node = static_cast<int>(numa);
  } else if (!gpu.pci_bus_id.empty()) {
    gpu.numa_node = SysfsNumaNode(options_.sysfs_root, gpu.pci_bus_id);
  }
  if (!gpu.pci_bus_id.empty()) {
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
    ASSIGN_OR_RETURN(gpu.mig_profiles, ReadMigProfiles(device, gpu));
    for (const model::MigProfile& p : gpu.mig_profiles) {
      gpu.memory_slices = std::max(gpu.memory_slices, p.memory_slices);
    }
  }
  return gpu;
}

absl::StatusOr<std::vector<model::MigProfile>> NvmlDeviceSource::ReadMigProfiles(
    nvmlDevice_t device, const model::GpuInfo& gpu) {
  const nvml::NvmlApi& nv = api();
  uint64_t total = gpu.memory_bytes;
  if (total == 0) {
    // The parent may hide its memory total (MIG enabled, unprivileged): names then come from
    // the known board table.
    if (const model::MigBoard* board = model::FindMigBoard(gpu.product_name)) {
      total = board->memory_bytes();
    }
  }
  std::vector<model::MigProfile> profiles;
  for (unsigned int index = 0; index < model::kGpuInstanceProfileCount; ++index) {
    nvmlGpuInstanceProfileInfo_t info = {};
    const nvmlReturn_t rc = nv.DeviceGetGpuInstanceProfileInfo(device, index, &info);
    if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_INVALID_ARGUMENT) {
      continue;  // not offered by this board, or an index this driver does not know
    }
    RETURN_IF_ERROR(NvmlStatus(rc, absl::StrCat("nvmlDeviceGetGpuInstanceProfileInfo GPU ",
                                                gpu.uuid, " profile index ", index)));
    model::MigProfile p;
    p.gi_profile_index = index;
    p.gi_profile_id = info.id;
    p.gpu_slices = model::GpuSlicesForGiProfileIndex(index).value_or(info.sliceCount);
    p.ci_profile_index = model::DefaultCiProfileIndex(p.gpu_slices).value_or(0);
    // CI profile IDs equal their indices on every published board (reference §1.3); the real
    // ID is only readable through an existing GPU instance.
    p.ci_profile_id = p.ci_profile_index;
    p.instance_count = info.instanceCount;
    p.memory_mib = info.memorySizeMB;
    p.multiprocessors = info.multiprocessorCount;
    p.copy_engines = info.copyEngineCount;
    p.decoders = info.decoderCount;
    p.encoders = info.encoderCount;
    p.jpegs = info.jpegCount;
    p.ofas = info.ofaCount;
    if (total > 0) {
      p.name = model::MigProfileName(p.gpu_slices, p.gpu_slices, p.memory_mib, total,
                                     model::SuffixForGiProfileIndex(index));
    } else {
      p.name = absl::StrCat(p.gpu_slices, "g.", (p.memory_mib + 1023) / 1024, "gb",
                            model::SuffixForGiProfileIndex(index));
    }
    unsigned int count = 0;
    nvmlReturn_t prc = nv.DeviceGetGpuInstancePossiblePlacements(device, info.id, nullptr, &count);
    std::vector<nvmlGpuInstancePlacement_t> placements(count);
    if (prc == NVML_SUCCESS && count > 0) {
      prc = nv.DeviceGetGpuInstancePossiblePlacements(device, info.id, placements.data(), &count);
      placements.resize(std::min<size_t>(count, placements.size()));
    }
    if (prc == NVML_ERROR_NO_PERMISSION || prc == NVML_ERROR_NOT_SUPPORTED) {
      DLOG(kWarn, kComponent, "MIG placements unavailable; profile cannot be placed",
           {{"gpu", gpu.uuid}, {"profile", p.name}, {"error", NvmlReturnName(prc)}});
      placements.clear();
    } else {
      RETURN_IF_ERROR(
          NvmlStatus(prc, absl::StrCat("nvmlDeviceGetGpuInstancePossiblePlacements_v2 GPU ",
                                       gpu.uuid, " profile ", p.name)));
    }
    for (const nvmlGpuInstancePlacement_t& placement : placements) {
      p.placements.push_back(model::MigPlacement{placement.start, placement.size});
      p.memory_slices = std::max(p.memory_slices, placement.size);
    }
    profiles.push_back(std::move(p));
  }
  return profiles;
}

absl::StatusOr<model::MigDevice> NvmlDeviceSource::ReadMigDevice(nvmlDevice_t parent,
                                                                 nvmlDevice_t mig,
                                                                 const model::GpuInfo& gpu) {
  const nvml::NvmlApi& nv = api();
  const std::string what = absl::StrCat(" on GPU ", gpu.uuid);
  model::MigDevice out;
  out.parent_uuid = gpu.uuid;
  out.parent_minor = gpu.minor;
  out.parent_index = gpu.index;
  RETURN_IF_ERROR(
      NvmlStatus(nv.DeviceGetGpuInstanceId(mig, &out.gi_id), "nvmlDeviceGetGpuInstanceId" + what));
  nvmlGpuInstance_t gi = nullptr;
  RETURN_IF_ERROR(NvmlStatus(nv.DeviceGetGpuInstanceById(parent, out.gi_id, &gi),
                             absl::StrCat("nvmlDeviceGetGpuInstanceById ", out.gi_id, what)));
  nvmlGpuInstanceInfo_t gi_info = {};
  RETURN_IF_ERROR(NvmlStatus(nv.GpuInstanceGetInfo(gi, &gi_info),
                             absl::StrCat("nvmlGpuInstanceGetInfo ", out.gi_id, what)));
  RETURN_IF_ERROR(NvmlStatus(nv.DeviceGetComputeInstanceId(mig, &out.ci_id),
                             "nvmlDeviceGetComputeInstanceId" + what));
  nvmlComputeInstance_t ci = nullptr;
  RETURN_IF_ERROR(NvmlStatus(
      nv.GpuInstanceGetComputeInstanceById(gi, out.ci_id, &ci),
      absl::StrCat("nvmlGpuInstanceGetComputeInstanceById ", out.gi_id, "/", out.ci_id, what)));
  nvmlComputeInstanceInfo_t ci_info = {};
  RETURN_IF_ERROR(
      NvmlStatus(nv.ComputeInstanceGetInfo(ci, &ci_info),
                 absl::StrCat("nvmlComputeInstanceGetInfo_v2 ", out.gi_id, "/", out.ci_id, what)));
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  RETURN_IF_ERROR(
      NvmlStatus(nv.DeviceGetUUID(mig, uuid, sizeof(uuid)),
                 absl::StrCat("nvmlDeviceGetUUID MIG ", out.gi_id, "/", out.ci_id, what)));
  out.uuid = CString(uuid, sizeof(uuid));
  const model::MigProfile* profile = gpu.FindMigProfileById(gi_info.profileId);
  if (profile == nullptr) {
    return absl::InternalError(absl::StrCat("MIG device ", out.uuid, what,
                                            " has GPU-instance profile ID ", gi_info.profileId,
                                            " which the GPU does not list"));
  }
  out.profile = *profile;
  out.placement = model::MigPlacement{gi_info.placement.start, gi_info.placement.size};
  out.ci_profile_id = ci_info.profileId;
  out.ci_slices = model::SlicesForCiProfileIndex(ci_info.profileId).value_or(profile->gpu_slices);
  return out;
}

absl::StatusOr<std::vector<model::MigDevice>> NvmlDeviceSource::ReadMigDevices(
    nvmlDevice_t device, const model::GpuInfo& gpu) {
  const nvml::NvmlApi& nv = api();
  unsigned int max = 0;
  RETURN_IF_ERROR(NvmlStatus(nv.DeviceGetMaxMigDeviceCount(device, &max),
                             absl::StrCat("nvmlDeviceGetMaxMigDeviceCount GPU ", gpu.uuid)));
  std::vector<model::MigDevice> out;
  for (unsigned int i = 0; i < max; ++i) {
    nvmlDevice_t mig = nullptr;
    const nvmlReturn_t rc = nv.DeviceGetMigDeviceHandleByIndex(device, i, &mig);
    if (rc == NVML_ERROR_NOT_FOUND || rc == NVML_ERROR_INVALID_ARGUMENT) {
      continue;  // empty MIG index
    }
    RETURN_IF_ERROR(NvmlStatus(
        rc, absl::StrCat("nvmlDeviceGetMigDeviceHandleByIndex GPU ", gpu.uuid, " index ", i)));
    ASSIGN_OR_RETURN(model::MigDevice mig_device, ReadMigDevice(device, mig, gpu));
    out.push_back(std::move(mig_device));
  }
  return out;
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

  unsigned int count = 0;
  RETURN_IF_ERROR(NvmlStatus(nv.DeviceGetCount(&count), "nvmlDeviceGetCount_v2"));
  std::vector<model::GpuInfo> gpus;
  std::vector<model::MigDevice> migs;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    absl::Status status = NvmlStatus(nv.DeviceGetHandleByIndex(i, &device),
                                     absl::StrCat("nvmlDeviceGetHandleByIndex_v2 ", i));
    absl::StatusOr<model::GpuInfo> gpu =
        status.ok() ? ReadGpu(device, i) : absl::StatusOr<model::GpuInfo>(status);
    absl::StatusOr<std::vector<model::MigDevice>> gpu_migs = std::vector<model::MigDevice>();
    if (gpu.ok()) {
      gpu->driver_version = driver_version;
      gpu->cuda_driver_version = cuda_version;
      if (gpu->mig_enabled()) {
        gpu_migs = ReadMigDevices(device, *gpu);
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
      return common::Annotate(failure, "NVML discovery");
    }
    gpus.push_back(*std::move(gpu));
    for (model::MigDevice& mig : *gpu_migs) {
      migs.push_back(std::move(mig));
    }
  }
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
  return ReadGpu(*device, index);
}

absl::StatusOr<model::MigDevice> NvmlDeviceSource::CreateMigDevice(absl::string_view gpu_uuid,
                                                                   absl::string_view profile,
                                                                   uint32_t placement_start) {
  const nvml::NvmlApi& nv = api();
  absl::MutexLock lock(&mu_);
  nvmlDevice_t device = nullptr;
  ASSIGN_OR_RETURN(model::GpuInfo gpu, ReadGpuByUuid(gpu_uuid, &device));
  const model::MigProfile* p = gpu.FindMigProfile(profile);
  if (p == nullptr) {
    return absl::NotFoundError(absl::StrCat("MIG profile ", profile, " is not offered by ",
                                            gpu.product_name, " ", gpu_uuid));
  }
  // The size comes from the profile's placements; an unlisted start is left to NVML to reject.
  const nvmlGpuInstancePlacement_t placement{placement_start, p->memory_slices};
  const std::string what =
      absl::StrCat(p->name, " at ", placement_start, ":", p->memory_slices, " on ", gpu_uuid);
  nvmlGpuInstance_t gi = nullptr;
  RETURN_IF_ERROR(
      NvmlStatus(nv.DeviceCreateGpuInstanceWithPlacement(device, p->gi_profile_id, &placement, &gi),
                 "nvmlDeviceCreateGpuInstanceWithPlacement " + what));
  // From here on a failure destroys what was created, so nothing leaks.
  nvmlComputeInstance_t ci = nullptr;
  auto rollback = [&](absl::Status status) {
    if (ci != nullptr) {
      nv.ComputeInstanceDestroy(ci);
    }
    const nvmlReturn_t rc = nv.GpuInstanceDestroy(gi);
    if (rc != NVML_SUCCESS) {
      DLOG(kError, kComponent, "rollback of a new GPU instance failed",
           {{"what", what}, {"error", NvmlReturnName(rc)}});
    }
    return status;
  };
  nvmlGpuInstanceInfo_t gi_info = {};
  if (absl::Status s =
          NvmlStatus(nv.GpuInstanceGetInfo(gi, &gi_info), "nvmlGpuInstanceGetInfo " + what);
      !s.ok()) {
    return rollback(s);
  }
  nvmlComputeInstanceProfileInfo_t ci_profile = {};
  if (absl::Status s = NvmlStatus(
          nv.GpuInstanceGetComputeInstanceProfileInfo(
              gi, p->ci_profile_index, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_profile),
          "nvmlGpuInstanceGetComputeInstanceProfileInfo " + what);
      !s.ok()) {
    return rollback(s);
  }
  if (absl::Status s = NvmlStatus(nv.GpuInstanceCreateComputeInstance(gi, ci_profile.id, &ci),
                                  "nvmlGpuInstanceCreateComputeInstance " + what);
      !s.ok()) {
    return rollback(s);
  }
  nvmlComputeInstanceInfo_t ci_info = {};
  if (absl::Status s = NvmlStatus(nv.ComputeInstanceGetInfo(ci, &ci_info),
                                  "nvmlComputeInstanceGetInfo_v2 " + what);
      !s.ok()) {
    return rollback(s);
  }
  // No NVML call maps (GPU, GI, CI) to a MIG handle: walk the MIG indices (reference §1.7).
  unsigned int max = 0;
  if (absl::Status s = NvmlStatus(nv.DeviceGetMaxMigDeviceCount(device, &max),
                                  "nvmlDeviceGetMaxMigDeviceCount " + what);
      !s.ok()) {
    return rollback(s);
  }
  for (unsigned int i = 0; i < max; ++i) {
    nvmlDevice_t mig = nullptr;
    if (nv.DeviceGetMigDeviceHandleByIndex(device, i, &mig) != NVML_SUCCESS) {
      continue;
    }
    unsigned int gi_id = 0;
    unsigned int ci_id = 0;
    if (nv.DeviceGetGpuInstanceId(mig, &gi_id) != NVML_SUCCESS ||
        nv.DeviceGetComputeInstanceId(mig, &ci_id) != NVML_SUCCESS || gi_id != gi_info.id ||
        ci_id != ci_info.id) {
      continue;
    }
    absl::StatusOr<model::MigDevice> created = ReadMigDevice(device, mig, gpu);
    if (!created.ok()) {
      return rollback(created.status());
    }
    DLOG(kInfo, kComponent, "MIG device created",
         {{"gpu", gpu_uuid},
          {"profile", p->name},
          {"uuid", created->uuid},
          {"gi", gi_id},
          {"ci", ci_id}});
    return created;
  }
  return rollback(
      absl::InternalError(absl::StrCat("created ", what, " (gi ", gi_info.id, " ci ", ci_info.id,
                                       ") but found no MIG device handle for it")));
}

absl::Status NvmlDeviceSource::DestroyLocked(nvmlDevice_t parent, absl::string_view parent_uuid,
                                             uint32_t gi_id, uint32_t ci_id) {
  const nvml::NvmlApi& nv = api();
  const std::string what = absl::StrCat("gi ", gi_id, " ci ", ci_id, " on ", parent_uuid);
  nvmlGpuInstance_t gi = nullptr;
  RETURN_IF_ERROR(NvmlStatus(nv.DeviceGetGpuInstanceById(parent, gi_id, &gi),
                             "nvmlDeviceGetGpuInstanceById " + what));
  nvmlComputeInstance_t ci = nullptr;
  RETURN_IF_ERROR(NvmlStatus(nv.GpuInstanceGetComputeInstanceById(gi, ci_id, &ci),
                             "nvmlGpuInstanceGetComputeInstanceById " + what));
  // The CI goes before its GI (reference §0.5).
  RETURN_IF_ERROR(NvmlStatus(nv.ComputeInstanceDestroy(ci), "nvmlComputeInstanceDestroy " + what));
  const nvmlReturn_t rc = nv.GpuInstanceDestroy(gi);
  if (rc == NVML_ERROR_IN_USE) {
    // Other compute instances (or processes) still use the GI: the CI is gone, the GI stays.
    DLOG(kWarn, kComponent, "GPU instance still in use after its compute instance was destroyed",
         {{"what", what}});
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(NvmlStatus(rc, "nvmlGpuInstanceDestroy " + what));
  DLOG(kInfo, kComponent, "MIG device destroyed", {{"what", what}});
  return absl::OkStatus();
}

absl::Status NvmlDeviceSource::DestroyMigDevice(absl::string_view mig_uuid) {
  const nvml::NvmlApi& nv = api();
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(nvmlDevice_t mig, HandleByUuid(mig_uuid));
  nvmlDevice_t parent = nullptr;
  RETURN_IF_ERROR(
      NvmlStatus(nv.DeviceGetDeviceHandleFromMigDeviceHandle(mig, &parent),
                 absl::StrCat("nvmlDeviceGetDeviceHandleFromMigDeviceHandle ", mig_uuid)));
  unsigned int gi_id = 0;
  unsigned int ci_id = 0;
  RETURN_IF_ERROR(NvmlStatus(nv.DeviceGetGpuInstanceId(mig, &gi_id),
                             absl::StrCat("nvmlDeviceGetGpuInstanceId ", mig_uuid)));
  RETURN_IF_ERROR(NvmlStatus(nv.DeviceGetComputeInstanceId(mig, &ci_id),
                             absl::StrCat("nvmlDeviceGetComputeInstanceId ", mig_uuid)));
  char parent_uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  RETURN_IF_ERROR(NvmlStatus(nv.DeviceGetUUID(parent, parent_uuid, sizeof(parent_uuid)),
                             absl::StrCat("nvmlDeviceGetUUID parent of ", mig_uuid)));
  return DestroyLocked(parent, CString(parent_uuid, sizeof(parent_uuid)), gi_id, ci_id);
}

absl::Status NvmlDeviceSource::DestroyMigInstance(absl::string_view gpu_uuid, uint32_t gi_id,
                                                  uint32_t ci_id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(nvmlDevice_t parent, HandleByUuid(gpu_uuid));
  return DestroyLocked(parent, gpu_uuid, gi_id, ci_id);
}

absl::StatusOr<MigModeState> NvmlDeviceSource::GetMigMode(absl::string_view gpu_uuid) {
  ASSIGN_OR_RETURN(nvmlDevice_t device, HandleByUuid(gpu_uuid));
  unsigned int current = 0;
  unsigned int pending = 0;
  RETURN_IF_ERROR(NvmlStatus(api().DeviceGetMigMode(device, &current, &pending),
                             absl::StrCat("nvmlDeviceGetMigMode ", gpu_uuid)));
  auto mode = [](unsigned int value) {
    return value == NVML_DEVICE_MIG_ENABLE ? model::MigMode::kEnabled : model::MigMode::kDisabled;
  };
  return MigModeState{mode(current), mode(pending)};
}

absl::Status NvmlDeviceSource::SetMigMode(absl::string_view gpu_uuid, bool enabled) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(nvmlDevice_t device, HandleByUuid(gpu_uuid));
  nvmlReturn_t activation = NVML_SUCCESS;
  const std::string what =
      absl::StrCat("nvmlDeviceSetMigMode ", enabled ? "enable " : "disable ", gpu_uuid);
  RETURN_IF_ERROR(NvmlStatus(
      api().DeviceSetMigMode(device, enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE,
                             &activation),
      what));
  return NvmlStatus(activation, what + ": activation");
}

absl::Status NvmlDeviceSource::RunNvidiaSmi(const std::vector<std::string>& args) {
  std::vector<std::string> argv_storage = {options_.nvidia_smi_path};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) {
    argv.push_back(arg.data());
  }
  argv.push_back(nullptr);
  // nvidia-smi runs with our libnvidia-ml preloaded, as the DRA driver does (reference §7.5).
  std::vector<std::string> env_storage;
  const char* preload = nullptr;
  for (char** e = environ; *e != nullptr; ++e) {
    if (absl::StartsWith(*e, "LD_PRELOAD=")) {
      preload = *e + strlen("LD_PRELOAD=");
    } else {
      env_storage.emplace_back(*e);
    }
  }
  if (absl::StrContains(options_.library_path, "/")) {
    env_storage.push_back(absl::StrCat("LD_PRELOAD=", options_.library_path,
                                       preload != nullptr && *preload != '\0' ? " " : "",
                                       preload != nullptr ? preload : ""));
  } else if (preload != nullptr) {
    env_storage.push_back(absl::StrCat("LD_PRELOAD=", preload));
  }
  std::vector<char*> envp;
  for (std::string& entry : env_storage) {
    envp.push_back(entry.data());
  }
  envp.push_back(nullptr);

  const std::string command = absl::StrJoin(argv_storage, " ");
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data());
  if (err != 0) {
    return common::ErrnoStatus(err, "spawn", command);
  }
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) {
      return common::ErrnoStatus(errno, "wait for", command);
    }
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    return absl::InternalError(
        absl::StrCat(command, ": ",
                     WIFEXITED(wstatus) ? absl::StrCat("exit status ", WEXITSTATUS(wstatus))
                                        : absl::StrCat("killed by signal ", WTERMSIG(wstatus))));
  }
  return absl::OkStatus();
}

absl::Status NvmlDeviceSource::SetTimeSlice(absl::string_view gpu_uuid, TimeSlice interval) {
  const int value = static_cast<int>(interval);
  if (value < 0 || value > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("time-slice interval ", value, " is out of range 0..3"));
  }
  absl::MutexLock lock(&mu_);
  // A clean NotFound / GPU_IS_LOST before running anything.
  RETURN_IF_ERROR(HandleByUuid(gpu_uuid).status());
  const std::string uuid(gpu_uuid);
  RETURN_IF_ERROR(RunNvidiaSmi({"-i", uuid, "-c", "DEFAULT"}));
  return RunNvidiaSmi({"compute-policy", "-i", uuid, "--set-timeslice", absl::StrCat(value)});
}

absl::StatusOr<nvmlEventSet_t> NvmlDeviceSource::EventSet() {
  absl::MutexLock lock(&mu_);
  if (event_set_ != nullptr) {
    return event_set_;
  }
  const nvml::NvmlApi& nv = api();
  nvmlEventSet_t set = nullptr;
  RETURN_IF_ERROR(NvmlStatus(nv.EventSetCreate(&set), "nvmlEventSetCreate"));
  unsigned int count = 0;
  if (absl::Status s = NvmlStatus(nv.DeviceGetCount(&count), "nvmlDeviceGetCount_v2"); !s.ok()) {
    nv.EventSetFree(set);
    return s;
  }
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    unsigned long long supported = 0;
    nvmlReturn_t rc = nv.DeviceGetHandleByIndex(i, &device);
    if (rc == NVML_SUCCESS) {
      rc = nv.DeviceGetSupportedEventTypes(device, &supported);
    }
    const unsigned long long mask = supported & nvmlEventTypeXidCriticalError;
    if (rc == NVML_SUCCESS && mask != 0) {
      rc = nv.DeviceRegisterEvents(device, mask, set);
    }
    if (rc != NVML_SUCCESS && rc != NVML_ERROR_NOT_SUPPORTED) {
      DLOG(kWarn, kComponent, "GPU health events not registered; the GPU is unmonitored",
           {{"index", i}, {"error", NvmlReturnName(rc)}});
    }
  }
  event_set_ = set;
  return set;
}

absl::StatusOr<std::optional<HealthEvent>> NvmlDeviceSource::WaitForEvent(absl::Duration timeout) {
  ASSIGN_OR_RETURN(nvmlEventSet_t set, EventSet());
  const int64_t ms = std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 0, UINT_MAX);
  nvmlEventData_t data = {};
  const nvmlReturn_t rc = api().EventSetWait(set, &data, static_cast<unsigned int>(ms));
  if (rc == NVML_ERROR_TIMEOUT) {
    return std::optional<HealthEvent>();
  }
  if (rc == NVML_ERROR_GPU_IS_LOST) {
    // Not attributable to one GPU: consumers treat an empty UUID as every GPU (reference §6.3).
    return std::optional<HealthEvent>(
        HealthEvent{"", HealthEventKind::kGpuLost, 79, kNoMigInstance, kNoMigInstance});
  }
  RETURN_IF_ERROR(NvmlStatus(rc, "nvmlEventSetWait_v2"));
  if ((data.eventType & nvmlEventTypeXidCriticalError) == 0) {
    return std::optional<HealthEvent>();
  }
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  if (api().DeviceGetUUID(data.device, uuid, sizeof(uuid)) != NVML_SUCCESS) {
    return std::optional<HealthEvent>(
        HealthEvent{"", HealthEventKind::kGpuLost, data.eventData, kNoMigInstance, kNoMigInstance});
  }
  return std::optional<HealthEvent>(HealthEvent{CString(uuid, sizeof(uuid)), HealthEventKind::kXid,
                                                data.eventData, data.gpuInstanceId,
                                                data.computeInstanceId});
}

}  // namespace dralens::driver::discovery
