// The fake libnvidia-ml.so.1, MIG: profiles, placements, instances, MIG mode.
#include "tests/driver/discovery/fake_nvml/fake_nvml_state.h"

using namespace fake_nvml;  // NOLINT(build/namespaces)

extern "C" {

// --- MIG -------------------------------------------------------------------------------------

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current,
                                  unsigned int* pending) {
  FAKE_LOCK;
  FAKE_GPU(device);
  if (!gpu->mig_supported) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  *current = gpu->mig_current;
  *pending = gpu->mig_pending;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode,
                                  nvmlReturn_t* activation) {
  FAKE_LOCK;
  FAKE_GPU(device);
  ++s.mutations;
  if (!gpu->mig_supported) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  if (mode == 0) {
    for (auto& inst : s.instances) {
      if (inst->gpu == gpu->index) {
        return NVML_ERROR_IN_USE;
      }
    }
  }
  gpu->mig_pending = mode;
  if (gpu->arch >= 9) {
    // Hopper and later switch at once, resetting the GPU: its event registration is gone.
    gpu->mig_current = mode;
    gpu->registered = false;
    gpu->registered_events = 0;
  }
  // Ampere keeps the change pending until a GPU reset (reference §1.6).
  *activation = NVML_SUCCESS;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t* info) {
  FAKE_LOCK;
  FAKE_GPU(device);
  if (profile >= s.profile_index_limit) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (!gpu->mig_supported) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  if (!s.mig_capability) {
    return NVML_ERROR_NO_PERMISSION;
  }
  for (const ProfileRow& row : *gpu->rows) {
    if (row.index == profile) {
      *info =
          nvmlGpuInstanceProfileInfo_t{row.id,  0,       row.slices, row.instances, row.sm, row.ce,
                                       row.dec, row.enc, row.jpeg,   row.ofa,       row.mib};
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device,
                                                           unsigned int profile_id,
                                                           nvmlGpuInstancePlacement_t* placements,
                                                           unsigned int* count) {
  FAKE_LOCK;
  FAKE_GPU(device);
  const ProfileRow* row = RowById(*gpu, profile_id);
  if (row == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (placements == nullptr) {
    *count = static_cast<unsigned>(row->starts.size());
    return NVML_SUCCESS;
  }
  if (*count < row->starts.size()) {
    *count = static_cast<unsigned>(row->starts.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (size_t i = 0; i < row->starts.size(); ++i) {
    placements[i] = nvmlGpuInstancePlacement_t{row->starts[i], row->size};
  }
  *count = static_cast<unsigned>(row->starts.size());
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profile_id,
                                                      const nvmlGpuInstancePlacement_t* placement,
                                                      nvmlGpuInstance_t* gi) {
  FAKE_LOCK;
  FAKE_GPU(device);
  ++s.mutations;
  if (!gpu->mig_supported || gpu->mig_current == 0) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  const ProfileRow* row = RowById(*gpu, profile_id);
  if (row == nullptr || placement->size != row->size) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  bool listed = false;
  for (unsigned start : row->starts) {
    listed = listed || start == placement->start;
  }
  if (!listed) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  unsigned same = 0;
  for (auto& inst : s.instances) {
    if (inst->gpu != gpu->index) {
      continue;
    }
    if (placement->start < inst->start + inst->size && inst->start < placement->start + row->size) {
      return NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    same += inst->gi_profile_id == profile_id ? 1 : 0;
  }
  if (same >= row->instances) {
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
  }
  FakeInstance* inst = AddInstance(s, gpu->index, *row, placement->start,
                                   GiIdFor(placement->start, row->size), nullptr);
  *gi = reinterpret_cast<nvmlGpuInstance_t>(&inst->gi_tag);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gi) {
  FAKE_LOCK;
  ++s.mutations;
  FakeInstance* inst = GiByHandle(s, gi);
  if (inst == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (inst->ci_alive) {
    return NVML_ERROR_IN_USE;
  }
  for (auto it = s.instances.begin(); it != s.instances.end(); ++it) {
    if (it->get() == inst) {
      s.instances.erase(it);
      break;
    }
  }
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                          nvmlGpuInstance_t* gi) {
  FAKE_LOCK;
  FAKE_GPU(device);
  if (!gpu->mig_supported) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  if (gpu->mig_current == 0) {
    // An H100 with MIG mode off on driver 580.159.04 answers NOT_FOUND here, not NOT_SUPPORTED.
    return NVML_ERROR_NOT_FOUND;
  }
  if (!s.mig_capability) {
    return NVML_ERROR_NO_PERMISSION;
  }
  for (auto& inst : s.instances) {
    if (inst->gpu == gpu->index && inst->gi_id == id) {
      *gi = reinterpret_cast<nvmlGpuInstance_t>(&inst->gi_tag);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gi, nvmlGpuInstanceInfo_t* info) {
  FAKE_LOCK;
  FakeInstance* inst = GiByHandle(s, gi);
  if (inst == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  info->device = reinterpret_cast<nvmlDevice_t>(&s.gpus[inst->gpu].tag);
  info->id = inst->gi_id;
  info->profileId = inst->gi_profile_id;
  info->placement = nvmlGpuInstancePlacement_t{inst->start, inst->size};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gi,
                                                          unsigned int profile,
                                                          unsigned int eng_profile,
                                                          nvmlComputeInstanceProfileInfo_t* info) {
  static constexpr unsigned kSlices[] = {1, 2, 3, 4, 7, 8, 6, 1, 7};
  FAKE_LOCK;
  FakeInstance* inst = GiByHandle(s, gi);
  if (inst == nullptr || eng_profile != 0 || profile >= 9) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const unsigned slices = kSlices[profile];
  if (slices > inst->slices || profile >= 7) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  *info = nvmlComputeInstanceProfileInfo_t{CiProfileId(s, profile),
                                           slices,
                                           inst->slices / slices,
                                           inst->sm * slices / inst->slices,
                                           1,
                                           1,
                                           0,
                                           0,
                                           0};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gi, unsigned int profile_id,
                                                  nvmlComputeInstance_t* ci) {
  FAKE_LOCK;
  ++s.mutations;
  FakeInstance* inst = GiByHandle(s, gi);
  if (inst == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (inst->ci_alive) {
    return NVML_ERROR_INSUFFICIENT_RESOURCES;  // this fake holds one CI per GI
  }
  inst->ci_alive = true;
  inst->ci_id = 0;
  inst->ci_profile_id = profile_id;
  *ci = reinterpret_cast<nvmlComputeInstance_t>(&inst->ci_tag);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t ci) {
  FAKE_LOCK;
  ++s.mutations;
  FakeInstance* inst = CiByHandle(s, ci);
  if (inst == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  inst->ci_alive = false;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gi, unsigned int id,
                                                   nvmlComputeInstance_t* ci) {
  FAKE_LOCK;
  FakeInstance* inst = GiByHandle(s, gi);
  if (inst == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (!s.mig_capability) {
    return NVML_ERROR_NO_PERMISSION;
  }
  if (!inst->ci_alive || inst->ci_id != id) {
    return NVML_ERROR_NOT_FOUND;
  }
  *ci = reinterpret_cast<nvmlComputeInstance_t>(&inst->ci_tag);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t ci,
                                           nvmlComputeInstanceInfo_t* info) {
  FAKE_LOCK;
  FakeInstance* inst = CiByHandle(s, ci);
  if (inst == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  info->device = reinterpret_cast<nvmlDevice_t>(&s.gpus[inst->gpu].tag);
  info->gpuInstance = reinterpret_cast<nvmlGpuInstance_t>(&inst->gi_tag);
  info->id = inst->ci_id;
  info->profileId = inst->ci_profile_id;
  info->placement = nvmlComputeInstancePlacement_t{0, inst->slices};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  FAKE_LOCK;
  FakeInstance* inst = MigByHandle(s, device);
  if (inst == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *id = inst->gi_id;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  FAKE_LOCK;
  FakeInstance* inst = MigByHandle(s, device);
  if (inst == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *id = inst->ci_id;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  FAKE_LOCK;
  FAKE_GPU(device);
  *count = gpu->mig_supported && gpu->mig_current != 0 ? 7 : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t* mig) {
  FAKE_LOCK;
  FAKE_GPU(device);
  unsigned seen = 0;
  for (auto& inst : s.instances) {
    if (inst->gpu == gpu->index && inst->ci_alive) {
      if (seen == index) {
        *mig = reinterpret_cast<nvmlDevice_t>(&inst->mig_tag);
        return NVML_SUCCESS;
      }
      ++seen;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t* device) {
  FAKE_LOCK;
  FakeInstance* inst = MigByHandle(s, mig);
  if (inst == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *device = reinterpret_cast<nvmlDevice_t>(&s.gpus[inst->gpu].tag);
  return NVML_SUCCESS;
}

}  // extern "C"
