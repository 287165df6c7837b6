#include "tests/driver/discovery/fake_nvml/fake_nvml_state.h"

namespace fake_nvml {

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
  s.event_sets_created = 0;
  s.next_wait = NVML_SUCCESS;
  s.mig_capability = true;
  s.profile_index_limit = 0x12;
  s.ci_ids_swapped = false;
  s.next_uuid = 0x100;
  s.instances.clear();
  s.events.clear();
  s.gpm_samples = 0;
  s.gpu_count = 2;
  for (FakeGpu& gpu : s.gpus) {
    gpu = FakeGpu{};
  }
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
  h100.supported_events = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError |
                          nvmlEventTypeSingleBitEccError | nvmlEventTypeGpuUnavailableError |
                          nvmlEventTypeGpuRecoveryAction;
  h100.numa_node = 7;
  h100.gpm_supported = true;
  h100.fabric_rc = NVML_ERROR_NOT_SUPPORTED;
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
  a100.supported_events = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError |
                          nvmlEventTypeSingleBitEccError;
  a100.numa_node = 0;
  a100.fabric_rc = NVML_ERROR_NOT_SUPPORTED;

  FakeInstance* big =
      AddInstance(s, 0, *RowById(h100, 9), 4, 2, "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee");
  big->ci_alive = true;
  big->ci_profile_id = 2;
  FakeInstance* small =
      AddInstance(s, 0, *RowById(h100, 19), 0, 7, "MIG-12345678-1234-1234-1234-123456789abc");
  small->ci_alive = true;
  small->ci_profile_id = 0;
}

void AddH100(State& s, unsigned index, unsigned bus) {
  FakeGpu& gpu = s.gpus[index];
  gpu = FakeGpu{};
  gpu.index = index;
  gpu.minor = index + 1;
  char text[64];
  std::snprintf(text, sizeof(text), "GPU-%08x-0000-4000-8000-%012x", index, index);
  gpu.uuid = text;
  std::snprintf(text, sizeof(text), "00000000:%02X:00.0", bus);
  gpu.bus_id = text;
  gpu.name = "NVIDIA H100 80GB HBM3";
  gpu.brand = 14;
  gpu.arch = 9;
  gpu.cc_major = 9;
  gpu.cc_minor = 0;
  gpu.memory_mib = 81559;
  gpu.domain = 0;
  gpu.bus = bus;
  gpu.pci_device_id = 0x233010DE;
  gpu.mig_supported = true;
  gpu.mig_current = gpu.mig_pending = 0;
  gpu.rows = &H100Rows();
  gpu.supported_events = nvmlEventTypeXidCriticalError;
  gpu.fabric_rc = NVML_ERROR_NOT_SUPPORTED;
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
      if (gpu.denied) {
        return NVML_ERROR_NO_PERMISSION;
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

unsigned CiProfileId(const State& s, unsigned index) {
  return s.ci_ids_swapped ? index ^ 1 : index;
}
unsigned CiProfileIndex(const State& s, unsigned id) { return s.ci_ids_swapped ? id ^ 1 : id; }

}  // namespace fake_nvml
