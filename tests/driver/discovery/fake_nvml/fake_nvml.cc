// A fake libnvidia-ml.so.1 for tests: the NVML C ABI that NvmlDeviceSource resolves, backed by
// a scripted two-GPU machine.
//
//   index 0, minor 2: "NVIDIA H100 80GB HBM3", MIG enabled, two MIG devices:
//       3g.40gb (GI profile 9) at 4:4 = GI 2 / CI 0, and 1g.10gb (GI profile 19) at 0:1 = GI 7 / CI
//       0
//   index 1, minor 0: "NVIDIA A100-SXM4-40GB", MIG capable, MIG disabled
//
// Extra C entry points (fakeNvml*) let a test reset the machine, inject events, lose a GPU and
// count calls that would change a GPU. Built twice: as is, and with FAKE_NVML_OMIT_SYMBOL
// defined, which leaves out nvmlDeviceGetCudaComputeCapability.
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "driver/discovery/nvml/nvml_types.h"

using namespace dralens::driver::discovery::nvml;  // NOLINT(build/namespaces)

namespace {

struct ProfileRow {
  unsigned index;
  unsigned id;
  unsigned slices;  // G
  unsigned instances;
  unsigned sm, ce, dec, enc, jpeg, ofa;
  unsigned long long mib;
  unsigned size;  // memory slices
  std::vector<unsigned> starts;
};

// Reference tables §2.5 (H100) and §2.2 (A100-SXM4-40GB), rows by profile index.
const std::vector<ProfileRow>& H100Rows() {
  static const std::vector<ProfileRow> rows = {
      {0, 19, 1, 7, 16, 1, 1, 0, 1, 0, 9984, 1, {0, 1, 2, 3, 4, 5, 6}},
      {1, 14, 2, 3, 32, 2, 2, 0, 2, 0, 20096, 2, {0, 2, 4}},
      {2, 9, 3, 2, 60, 3, 3, 0, 3, 0, 40448, 4, {0, 4}},
      {3, 5, 4, 1, 64, 4, 4, 0, 4, 0, 40448, 4, {0}},
      {4, 0, 7, 1, 132, 8, 7, 0, 7, 1, 81152, 8, {0}},
      {7, 20, 1, 1, 16, 1, 1, 0, 1, 1, 9984, 1, {0, 1, 2, 3, 4, 5, 6}},
      {9, 15, 1, 4, 26, 1, 1, 0, 1, 0, 20096, 2, {0, 2, 4, 6}},
  };
  return rows;
}

const std::vector<ProfileRow>& A100Rows() {
  static const std::vector<ProfileRow> rows = {
      {0, 19, 1, 7, 14, 1, 0, 0, 0, 0, 4864, 1, {0, 1, 2, 3, 4, 5, 6}},
      {1, 14, 2, 3, 28, 2, 1, 0, 0, 0, 9856, 2, {0, 2, 4}},
      {2, 9, 3, 2, 42, 3, 2, 0, 0, 0, 19968, 4, {0, 4}},
      {3, 5, 4, 1, 56, 4, 2, 0, 0, 0, 19968, 4, {0}},
      {4, 0, 7, 1, 98, 7, 5, 0, 1, 1, 40192, 8, {0}},
      {7, 20, 1, 1, 14, 1, 1, 0, 1, 1, 4864, 1, {0, 1, 2, 3, 4, 5, 6}},
      {9, 15, 1, 4, 14, 1, 1, 0, 0, 0, 9856, 2, {0, 2, 4, 6}},
  };
  return rows;
}

constexpr int kGpuKind = 1;
constexpr int kMigKind = 2;

struct Tag {
  int kind;
};

struct FakeGpu {
  Tag tag{kGpuKind};
  unsigned index;
  unsigned minor;
  std::string uuid;
  std::string name;
  int brand;
  unsigned arch;
  int cc_major, cc_minor;
  unsigned long long memory_mib;
  std::string bus_id;
  unsigned domain, bus;
  unsigned pci_device_id;
  bool mig_supported;
  unsigned mig_current, mig_pending;
  bool lost;
  bool registered;
  const std::vector<ProfileRow>* rows;
};

struct FakeInstance {
  Tag mig_tag{kMigKind};  // the MIG device handle
  char gi_tag = 0;        // the GPU instance handle
  char ci_tag = 0;        // the compute instance handle
  unsigned gpu;
  bool ci_alive;
  unsigned gi_id, gi_profile_id, start, size, slices, sm;
  unsigned ci_id, ci_profile_id;
  std::string uuid;
};

struct FakeEvent {
  unsigned gpu;
  unsigned long long xid;
  unsigned gi, ci;
};

struct State {
  std::mutex mu;
  int init_count = 0;
  int mutations = 0;
  int event_sets = 0;
  unsigned next_uuid = 0x100;
  FakeGpu gpus[2];
  std::vector<std::unique_ptr<FakeInstance>> instances;
  std::deque<FakeEvent> events;
  char event_set_tag = 0;
};

// A plain static: tests dlclose the library between cases, and its destructor then frees the
// scripted machine.
State& S() {
  static State state;
  return state;
}

FakeInstance* AddInstance(State& s, unsigned gpu, const ProfileRow& row, unsigned start,
                          unsigned gi_id, const char* uuid) {
  auto inst = std::make_unique<FakeInstance>();
  inst->gpu = gpu;
  inst->ci_alive = false;
  inst->gi_id = gi_id;
  inst->gi_profile_id = row.id;
  inst->start = start;
  inst->size = row.size;
  inst->slices = row.slices;
  inst->sm = row.sm;
  inst->ci_id = 0;
  inst->ci_profile_id = 0;
  if (uuid != nullptr) {
    inst->uuid = uuid;
  } else {
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), "MIG-%08x-0000-4000-8000-00000000%04x", s.next_uuid,
                  s.next_uuid);
    ++s.next_uuid;
    inst->uuid = buffer;
  }
  s.instances.push_back(std::move(inst));
  return s.instances.back().get();
}

const ProfileRow* RowById(const FakeGpu& gpu, unsigned id) {
  for (const ProfileRow& row : *gpu.rows) {
    if (row.id == id) {
      return &row;
    }
  }
  return nullptr;
}

void ResetLocked(State& s) {
  s.init_count = 0;
  s.mutations = 0;
  s.event_sets = 0;
  s.next_uuid = 0x100;
  s.instances.clear();
  s.events.clear();
  FakeGpu& h100 = s.gpus[0];
  h100 = FakeGpu{};
  h100.index = 0;
  h100.minor = 2;
  h100.uuid = "GPU-11111111-2222-3333-4444-555555555555";
  h100.name = "NVIDIA H100 80GB HBM3";
  h100.brand = 14;  // NVML_BRAND_NVIDIA
  h100.arch = 9;    // Hopper
  h100.cc_major = 9;
  h100.cc_minor = 0;
  h100.memory_mib = 81559;
  h100.bus_id = "00000000:1B:00.0";
  h100.domain = 0;
  h100.bus = 0x1b;
  h100.pci_device_id = 0x233010DE;
  h100.mig_supported = true;
  h100.mig_current = h100.mig_pending = 1;
  h100.rows = &H100Rows();
  FakeGpu& a100 = s.gpus[1];
  a100 = FakeGpu{};
  a100.index = 1;
  a100.minor = 0;
  a100.uuid = "GPU-66666666-7777-8888-9999-000000000000";
  a100.name = "NVIDIA A100-SXM4-40GB";
  a100.brand = 2;  // NVML_BRAND_TESLA
  a100.arch = 7;   // Ampere
  a100.cc_major = 8;
  a100.cc_minor = 0;
  a100.memory_mib = 40960;
  a100.bus_id = "00000000:43:00.0";
  a100.domain = 0;
  a100.bus = 0x43;
  a100.pci_device_id = 0x20B010DE;
  a100.mig_supported = true;
  a100.mig_current = a100.mig_pending = 0;
  a100.rows = &A100Rows();

  FakeInstance* big =
      AddInstance(s, 0, *RowById(h100, 9), 4, 2, "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee");
  big->ci_alive = true;
  big->ci_profile_id = 2;
  FakeInstance* small =
      AddInstance(s, 0, *RowById(h100, 19), 0, 7, "MIG-12345678-1234-1234-1234-123456789abc");
  small->ci_alive = true;
  small->ci_profile_id = 0;
}

State& Locked(std::unique_lock<std::mutex>& lock) {
  State& s = S();
  lock = std::unique_lock<std::mutex>(s.mu);
  static bool initialised = false;
  if (!initialised) {
    initialised = true;
    ResetLocked(s);
  }
  return s;
}

// Validates a GPU handle: UNINITIALIZED / INVALID_ARGUMENT / GPU_IS_LOST.
nvmlReturn_t Gpu(State& s, nvmlDevice_t device, FakeGpu** out) {
  if (s.init_count <= 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  for (FakeGpu& gpu : s.gpus) {
    if (reinterpret_cast<nvmlDevice_t>(&gpu.tag) == device) {
      if (gpu.lost) {
        return NVML_ERROR_GPU_IS_LOST;
      }
      *out = &gpu;
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_INVALID_ARGUMENT;
}

FakeInstance* MigByHandle(State& s, nvmlDevice_t device) {
  for (auto& inst : s.instances) {
    if (reinterpret_cast<nvmlDevice_t>(&inst->mig_tag) == device && inst->ci_alive) {
      return inst.get();
    }
  }
  return nullptr;
}

FakeInstance* GiByHandle(State& s, nvmlGpuInstance_t gi) {
  for (auto& inst : s.instances) {
    if (reinterpret_cast<nvmlGpuInstance_t>(&inst->gi_tag) == gi) {
      return inst.get();
    }
  }
  return nullptr;
}

FakeInstance* CiByHandle(State& s, nvmlComputeInstance_t ci) {
  for (auto& inst : s.instances) {
    if (reinterpret_cast<nvmlComputeInstance_t>(&inst->ci_tag) == ci && inst->ci_alive) {
      return inst.get();
    }
  }
  return nullptr;
}

nvmlReturn_t CopyString(const std::string& value, char* out, unsigned int length) {
  if (out == nullptr || value.size() + 1 > length) {
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::memcpy(out, value.c_str(), value.size() + 1);
  return NVML_SUCCESS;
}

unsigned GiIdFor(unsigned start, unsigned size) {
  switch (size) {
    case 8:
      return 0;
    case 4:
      return 1 + start / 4;
    case 2:
      return 3 + start / 2;
    default:
      return 7 + start;
  }
}

}  // namespace

#define FAKE_LOCK                     \
  std::unique_lock<std::mutex> lock_; \
  State& s = Locked(lock_)

#define FAKE_GPU(device)                              \
  FakeGpu* gpu = nullptr;                             \
  if (nvmlReturn_t rc_ = Gpu(s, device, &gpu); rc_) { \
    return rc_;                                       \
  }

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
  s.events.push_back(FakeEvent{gpu, xid, gi, ci});
}

void fakeNvmlSetGpuLost(unsigned gpu, int lost) {
  FAKE_LOCK;
  s.gpus[gpu].lost = lost != 0;
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
  *count = 2;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  FAKE_LOCK;
  if (s.init_count <= 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  if (index >= 2) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (s.gpus[index].lost) {
    return NVML_ERROR_GPU_IS_LOST;
  }
  *device = reinterpret_cast<nvmlDevice_t>(&s.gpus[index].tag);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  FAKE_LOCK;
  if (s.init_count <= 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  for (FakeGpu& gpu : s.gpus) {
    if (gpu.uuid == uuid) {
      if (gpu.lost) {
        return NVML_ERROR_GPU_IS_LOST;
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
  FAKE_GPU(device);
  memory->total = gpu->memory_mib << 20;
  memory->used = 0;
  memory->free = memory->total;
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

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* /*node*/) {
  FAKE_LOCK;
  FAKE_GPU(device);
  return NVML_ERROR_NOT_SUPPORTED;  // not a coherent platform: the caller reads sysfs
}

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
  gpu->mig_current = gpu->mig_pending = mode;
  *activation = NVML_SUCCESS;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t* info) {
  FAKE_LOCK;
  FAKE_GPU(device);
  if (profile >= 0x12) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (!gpu->mig_supported) {
    return NVML_ERROR_NOT_SUPPORTED;
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
  if (!gpu->mig_supported || gpu->mig_current == 0) {
    return NVML_ERROR_NOT_SUPPORTED;
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
  *info = nvmlComputeInstanceProfileInfo_t{
      profile, slices, inst->slices / slices, inst->sm * slices / inst->slices, 1, 1, 0, 0, 0};
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

// --- events ----------------------------------------------------------------------------------

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  FAKE_LOCK;
  ++s.event_sets;
  *set = reinterpret_cast<nvmlEventSet_t>(&s.event_set_tag);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                              unsigned long long* event_types) {
  FAKE_LOCK;
  FAKE_GPU(device);
  *event_types = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError |
                 nvmlEventTypeSingleBitEccError;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long event_types,
                                      nvmlEventSet_t /*set*/) {
  FAKE_LOCK;
  FAKE_GPU(device);
  gpu->registered = (event_types & nvmlEventTypeXidCriticalError) != 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t /*set*/, nvmlEventData_t* data,
                                 unsigned int /*timeout_ms*/) {
  FAKE_LOCK;
  for (const FakeGpu& gpu : s.gpus) {
    if (gpu.lost) {
      return NVML_ERROR_GPU_IS_LOST;
    }
  }
  while (!s.events.empty()) {
    const FakeEvent event = s.events.front();
    s.events.pop_front();
    FakeGpu& gpu = s.gpus[event.gpu];
    if (!gpu.registered) {
      continue;
    }
    data->device = reinterpret_cast<nvmlDevice_t>(&gpu.tag);
    data->eventType = nvmlEventTypeXidCriticalError;
    data->eventData = event.xid;
    data->gpuInstanceId = event.gi;
    data->computeInstanceId = event.ci;
    return NVML_SUCCESS;
  }
  return NVML_ERROR_TIMEOUT;  // never sleeps: tests stay fast
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t /*set*/) {
  FAKE_LOCK;
  --s.event_sets;
  return NVML_SUCCESS;
}

}  // extern "C"
