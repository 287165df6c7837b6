// A fake libnvidia-ml.so.1 for tests: the NVML C ABI that NvmlDeviceSource resolves, backed by
// a scripted two-GPU machine (up to eight with fakeNvmlSetGpuCount).
//
//   index 0, minor 2: "NVIDIA H100 80GB HBM3", MIG enabled, two MIG devices:
//       3g.40gb (GI profile 9) at 4:4 = GI 2 / CI 0, and 1g.10gb (GI profile 19) at 0:1 = GI 7 / CI
//       0
//   index 1, minor 0: "NVIDIA A100-SXM4-40GB", MIG capable, MIG disabled
//
// Extra C entry points (fakeNvml*) let a test reset the machine, inject events, lose a GPU, put
// a GPU outside the caller's device cgroup, withdraw the MIG capability, make the driver know
// fewer profiles, make CI profile IDs differ from their indices, fail one event wait, and count
// calls that would change a GPU and the event sets made. The parts: this file (library, system,
// identity), fake_nvml_mig.cc, fake_nvml_events.cc, fake_nvml_nvlink.cc, fake_nvml_usage.cc,
// fake_nvml_state.{h,cc}. Built four times: as is; with FAKE_NVML_OMIT_SYMBOL, which leaves out
// nvmlDeviceGetCudaComputeCapability; with FAKE_NVML_LEGACY_ONLY, which has nvmlEventSetWait
// instead of nvmlEventSetWait_v2; and with FAKE_NVML_NO_TOPOLOGY, which has none of the NVLink
// and fabric calls (a driver older than them).
#include "tests/driver/discovery/fake_nvml/fake_nvml_state.h"

using namespace fake_nvml;  // NOLINT(build/namespaces)

extern "C" {

// --- test controls ---------------------------------------------------------------------------

void fakeNvmlReset() {
  FAKE_LOCK;
  ResetLocked(s);
}

int fakeNvmlInitCount() {
  FAKE_LOCK;
  return s.init_count;
}

int fakeNvmlMutationCount() {
  FAKE_LOCK;
  return s.mutations;
}

void fakeNvmlPushXid(unsigned gpu, unsigned long long xid, unsigned gi, unsigned ci) {
  FAKE_LOCK;
  s.events.push_back(FakeEvent{gpu, nvmlEventTypeXidCriticalError, xid, gi, ci});
}

void fakeNvmlSetGpuLost(unsigned gpu, int lost) {
  FAKE_LOCK;
  s.gpus[gpu].lost = lost != 0;
}

// An event of any type (e.g. nvmlEventTypeGpuUnavailableError) for GPU `gpu`.
void fakeNvmlPushEvent(unsigned gpu, unsigned long long type, unsigned long long data) {
  FAKE_LOCK;
  s.events.push_back(FakeEvent{gpu, type, data, kNvmlNoInstanceId, kNvmlNoInstanceId});
}

// The GPU is outside the caller's device cgroup: its handle answers NVML_ERROR_NO_PERMISSION
// (nvmlDeviceGetCount_v2 still counts it).
void fakeNvmlSetDenied(unsigned gpu, int denied) {
  FAKE_LOCK;
  s.gpus[gpu].denied = denied != 0;
}

// Without the MIG capability, GetGpuInstanceProfileInfo, GetGpuInstanceById and
// GetComputeInstanceById answer NVML_ERROR_NO_PERMISSION.
void fakeNvmlSetMigCapability(int granted) {
  FAKE_LOCK;
  s.mig_capability = granted != 0;
}

// GPU-instance profile indices from `limit` answer NVML_ERROR_INVALID_ARGUMENT (an older driver).
void fakeNvmlSetProfileIndexLimit(unsigned limit) {
  FAKE_LOCK;
  s.profile_index_limit = limit;
}

// Compute-instance profile IDs become index ^ 1, so that an ID used as an index is caught.
void fakeNvmlSwapCiProfileIds(int swapped) {
  FAKE_LOCK;
  s.ci_ids_swapped = swapped != 0;
}

void fakeNvmlSetSupportedEvents(unsigned gpu, unsigned long long types) {
  FAKE_LOCK;
  s.gpus[gpu].supported_events = types;
}

// The next nvmlEventSetWait_v2 answers `rc`.
void fakeNvmlFailNextWait(int rc) {
  FAKE_LOCK;
  s.next_wait = static_cast<nvmlReturn_t>(rc);
}

int fakeNvmlEventSetsCreated() {
  FAKE_LOCK;
  return s.event_sets_created;
}

int fakeNvmlEventSetsAlive() {
  FAKE_LOCK;
  return s.event_sets;
}

unsigned long long fakeNvmlRegisteredEvents(unsigned gpu) {
  FAKE_LOCK;
  return s.gpus[gpu].registered_events;
}

void fakeNvmlSetMigSupported(unsigned gpu, int supported) {
  FAKE_LOCK;
  s.gpus[gpu].mig_supported = supported != 0;
}

// --- library and system ----------------------------------------------------------------------

nvmlReturn_t nvmlInitWithFlags(unsigned int /*flags*/) {
  FAKE_LOCK;
  ++s.init_count;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown() {
  FAKE_LOCK;
  if (s.init_count <= 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  --s.init_count;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  FAKE_LOCK;
  if (s.init_count <= 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  return CopyString("550.163.01", version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  *version = 12040;
  return NVML_SUCCESS;
}

// --- enumeration and identity ----------------------------------------------------------------

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  FAKE_LOCK;
  if (s.init_count <= 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  *count = s.gpu_count;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  FAKE_LOCK;
  if (s.init_count <= 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  if (index >= s.gpu_count) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (s.gpus[index].lost) {
    return NVML_ERROR_GPU_IS_LOST;
  }
  if (s.gpus[index].denied) {
    return NVML_ERROR_NO_PERMISSION;
  }
  *device = reinterpret_cast<nvmlDevice_t>(&s.gpus[index].tag);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  FAKE_LOCK;
  if (s.init_count <= 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  for (unsigned i = 0; i < s.gpu_count; ++i) {
    FakeGpu& gpu = s.gpus[i];
    if (gpu.uuid == uuid) {
      if (gpu.lost) {
        return NVML_ERROR_GPU_IS_LOST;
      }
      if (gpu.denied) {
        return NVML_ERROR_NO_PERMISSION;
      }
      *device = reinterpret_cast<nvmlDevice_t>(&gpu.tag);
      return NVML_SUCCESS;
    }
  }
  for (auto& inst : s.instances) {
    if (inst->ci_alive && inst->uuid == uuid) {
      *device = reinterpret_cast<nvmlDevice_t>(&inst->mig_tag);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
  FAKE_LOCK;
  FAKE_GPU(device);
  *minor = gpu->minor;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  FAKE_LOCK;
  FAKE_GPU(device);
  *index = gpu->index;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  FAKE_LOCK;
  if (FakeInstance* mig = MigByHandle(s, device)) {
    return CopyString(mig->uuid, uuid, length);
  }
  FAKE_GPU(device);
  return CopyString(gpu->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  FAKE_LOCK;
  FAKE_GPU(device);
  return CopyString(gpu->name, name, length);
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, int* brand) {
  FAKE_LOCK;
  FAKE_GPU(device);
  *brand = gpu->brand;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int* arch) {
  FAKE_LOCK;
  FAKE_GPU(device);
  *arch = gpu->arch;
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_SYMBOL
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
  FAKE_LOCK;
  FAKE_GPU(device);
  *major = gpu->cc_major;
  *minor = gpu->cc_minor;
  return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  FAKE_LOCK;
  if (FakeInstance* mig = MigByHandle(s, device)) {
    const ProfileRow* row = RowById(s.gpus[mig->gpu], mig->gi_profile_id);
    memory->total = (row != nullptr ? row->mib : 0) << 20;
    memory->used = mig->used_mib << 20;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
  }
  FAKE_GPU(device);
  memory->total = gpu->memory_mib << 20;
  memory->used = gpu->used_mib << 20;
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  FAKE_LOCK;
  FAKE_GPU(device);
  std::memset(pci, 0, sizeof(*pci));
  std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:00.0", gpu->domain,
                gpu->bus);
  pci->domain = gpu->domain;
  pci->bus = gpu->bus;
  pci->device = 0;
  pci->pciDeviceId = gpu->pci_device_id;
  CopyString(gpu->bus_id, pci->busId, sizeof(pci->busId));
  return NVML_SUCCESS;
}

// As on a coherent platform (GH200, GB200): the node of the GPU's own memory, which has no CPUs.
// Not what resource.kubernetes.io/numaNode means; the caller must read sysfs instead.
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node) {
  FAKE_LOCK;
  FAKE_GPU(device);
  *node = gpu->numa_node;
  return NVML_SUCCESS;
}

}  // extern "C"
