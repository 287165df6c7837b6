// The scripted machine behind the fake libnvidia-ml.so.1 (see fake_nvml.cc): its state and the
// helpers every part of the fake shares. One mutex guards it all (FAKE_LOCK).
#pragma once

#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "driver/discovery/nvml/nvml_types.h"

namespace fake_nvml {

using namespace dralens::driver::discovery::nvml;  // NOLINT(build/namespaces)

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
const std::vector<ProfileRow>& H100Rows();

const std::vector<ProfileRow>& A100Rows();

constexpr int kGpuKind = 1;

constexpr int kMigKind = 2;

struct Tag {
  int kind;
};

// One NVLink of a GPU: up or down, and the PCI bus ID NVML reports at its far end ("" makes
// nvmlDeviceGetNvLinkRemotePciInfo_v2 fail).
struct FakeLink {
  bool active;
  std::string remote_bus_id;
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
  bool denied;  // outside the caller's device cgroup: handles answer NO_PERMISSION
  bool registered;
  unsigned long long supported_events;
  unsigned long long registered_events;
  unsigned numa_node;     // what nvmlDeviceGetNumaNodeId answers (a coherent platform's GPU node)
  unsigned util_percent;  // what nvmlDeviceGetUtilizationRates answers with MIG mode off
  unsigned long long used_mib;
  bool gpm_supported;
  const std::vector<ProfileRow>* rows;
  // Without NVLink (the default) every NVLink call answers NOT_SUPPORTED.
  bool nvlink_supported;
  FakeLink links[NVML_NVLINK_MAX_LINKS];
  // What nvmlDeviceGetGpuFabricInfoV answers: fabric_rc (NOT_SUPPORTED by default), else the
  // info below.
  nvmlReturn_t fabric_rc;
  nvmlGpuFabricInfo_v2_t fabric;
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
  unsigned util_percent = 0;  // the GPU instance's graphics activity, as GPM measures it
  unsigned long long used_mib = 0;
};

struct FakeEvent {
  unsigned gpu;
  unsigned long long type;
  unsigned long long data;
  unsigned gi, ci;
};

inline constexpr unsigned kMaxGpus = 8;

struct State {
  std::mutex mu;
  int init_count = 0;
  int mutations = 0;
  int event_sets = 0;                     // alive
  int event_sets_created = 0;             // ever
  nvmlReturn_t next_wait = NVML_SUCCESS;  // one wait answers this instead, then back to normal
  bool mig_capability = true;             // without it MIG instance calls answer NO_PERMISSION
  unsigned profile_index_limit = 0x12;    // profile indices from here answer INVALID_ARGUMENT
  bool ci_ids_swapped = false;            // CI profile IDs differ from their indices (index ^ 1)
  unsigned next_uuid = 0x100;
  // gpus[0] and gpus[1] are the scripted pair; fakeNvmlSetGpuCount adds H100s up to kMaxGpus.
  unsigned gpu_count = 2;
  FakeGpu gpus[kMaxGpus];
  std::vector<std::unique_ptr<FakeInstance>> instances;
  std::deque<FakeEvent> events;
  char event_set_tag = 0;
  int gpm_samples = 0;  // allocated and not freed
};

// A plain static: tests dlclose the library between cases, and its destructor then frees the
// scripted machine.
State& S();

FakeInstance* AddInstance(State& s, unsigned gpu, const ProfileRow& row, unsigned start,
                          unsigned gi_id, const char* uuid);

const ProfileRow* RowById(const FakeGpu& gpu, unsigned id);

void ResetLocked(State& s);

// Makes gpus[index] (index >= 2) a full H100 80GB with MIG disabled, bus 0x<bus>.
void AddH100(State& s, unsigned index, unsigned bus);

State& Locked(std::unique_lock<std::mutex>& lock);

// Validates a GPU handle: UNINITIALIZED / INVALID_ARGUMENT / GPU_IS_LOST.
nvmlReturn_t Gpu(State& s, nvmlDevice_t device, FakeGpu** out);

FakeInstance* MigByHandle(State& s, nvmlDevice_t device);

FakeInstance* GiByHandle(State& s, nvmlGpuInstance_t gi);

FakeInstance* CiByHandle(State& s, nvmlComputeInstance_t ci);

nvmlReturn_t CopyString(const std::string& value, char* out, unsigned int length);

unsigned GiIdFor(unsigned start, unsigned size);

// The compute-instance profile ID of a CI profile index, and back.
unsigned CiProfileId(const State& s, unsigned index);
unsigned CiProfileIndex(const State& s, unsigned id);

}  // namespace fake_nvml

#define FAKE_LOCK                     \
  std::unique_lock<std::mutex> lock_; \
  ::fake_nvml::State& s = ::fake_nvml::Locked(lock_)

#define FAKE_GPU(device)                                           \
  ::fake_nvml::FakeGpu* gpu = nullptr;                             \
  if (nvmlReturn_t rc_ = ::fake_nvml::Gpu(s, device, &gpu); rc_) { \
    return rc_;                                                    \
  }
