// NvmlDeviceSource, MIG: profiles, existing MIG devices, create and destroy, MIG mode.
#include <algorithm>
#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "driver/discovery/nvml/nvml_device_source.h"
#include "driver/discovery/nvml/nvml_internal.h"
#include "driver/discovery/nvml/nvml_status.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/model/mig_profile.h"

namespace dralens::driver::discovery {

using namespace nvml;           // NOLINT(build/namespaces): the NVML C names read best unqualified
using namespace nvml_internal;  // NOLINT(build/namespaces)

namespace {

// Far above any profile index a header defines (0x12 in NVML 13): only a library that never
// answers NVML_ERROR_INVALID_ARGUMENT reaches it.
constexpr unsigned int kProfileIndexLimit = 256;

}  // namespace

absl::StatusOr<std::vector<model::MigProfile>> NvmlDeviceSource::ReadMigProfiles(
    nvmlDevice_t device, const model::GpuInfo& gpu, DeniedCounts& denied) {
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
  // Profile indices 0, 1, ... until the library says the index is beyond what it knows, so a
  // newer driver's profiles are found without a rebuild.
  for (unsigned int index = 0; index < kProfileIndexLimit; ++index) {
    nvmlGpuInstanceProfileInfo_t info = {};
    const nvmlReturn_t rc = nv.DeviceGetGpuInstanceProfileInfo(device, index, &info);
    if (rc == NVML_ERROR_INVALID_ARGUMENT) {
      break;  // past the last index this driver knows
    }
    if (rc == NVML_ERROR_NOT_SUPPORTED) {
      continue;  // not offered by this board
    }
    if (rc == NVML_ERROR_NO_PERMISSION) {
      // Without the MIG capability no profile is readable: the GPU is offered whole only.
      ++denied.mig_profiles;
      DLOG(kWarn, kComponent, "MIG profiles not readable without the MIG capability; left out",
           {{"gpu", gpu.uuid}, {"profile_index", index}});
      return std::vector<model::MigProfile>();
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
  out.ci_slices = CiSlicesOf(gi, ci_info.profileId).value_or(profile->gpu_slices);
  return out;
}

std::optional<uint32_t> NvmlDeviceSource::CiSlicesOf(nvmlGpuInstance_t gi, uint32_t ci_profile_id) {
  const nvml::NvmlApi& nv = api();
  for (unsigned int index = 0; index < kProfileIndexLimit; ++index) {
    nvmlComputeInstanceProfileInfo_t info = {};
    const nvmlReturn_t rc = nv.GpuInstanceGetComputeInstanceProfileInfo(
        gi, index, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info);
    if (rc == NVML_ERROR_INVALID_ARGUMENT) {
      break;
    }
    if (rc == NVML_SUCCESS && info.id == ci_profile_id) {
      return info.sliceCount;
    }
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<model::MigDevice>> NvmlDeviceSource::ReadMigDevices(
    nvmlDevice_t device, const model::GpuInfo& gpu, DeniedCounts& denied) {
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
    absl::StatusOr<model::MigDevice> mig_device = ReadMigDevice(device, mig, gpu);
    if (IsNoPermission(mig_device.status())) {
      // GetGpuInstanceById / GetComputeInstanceById need the MIG capability.
      ++denied.mig_devices;
      DLOG(kWarn, kComponent, "MIG device not readable without the MIG capability; left out",
           {{"gpu", gpu.uuid}, {"mig_index", i}, {"error", mig_device.status().message()}});
      continue;
    }
    RETURN_IF_ERROR(mig_device.status());
    out.push_back(*std::move(mig_device));
  }
  return out;
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
  const nvmlReturn_t rc = api().DeviceSetMigMode(
      device, enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE, &activation);
  // Whatever came of it, the GPU may have been reset: its event registration is rebuilt.
  event_set_stale_ = true;
  RETURN_IF_ERROR(NvmlStatus(rc, what));
  return NvmlStatus(activation, what + ": activation");
}

}  // namespace dralens::driver::discovery
