// The fake's NVLink and fabric: its test controls (more GPUs, links, fabric registration) and
// the three NVML calls NvmlDeviceSource reads them with. FAKE_NVML_NO_TOPOLOGY leaves the calls
// out, as a driver older than them would.
#include <algorithm>

#include "tests/driver/discovery/fake_nvml/fake_nvml_state.h"

using namespace fake_nvml;  // NOLINT(build/namespaces)

extern "C" {

// --- test controls ---------------------------------------------------------------------------

// `count` GPUs (2 to 8): GPUs from index 2 on are full H100s on buses 0x52, 0x61, ...
void fakeNvmlSetGpuCount(unsigned count) {
  static constexpr unsigned kBuses[kMaxGpus] = {0x1b, 0x43, 0x52, 0x61, 0x9d, 0xc3, 0xd1, 0xdf};
  FAKE_LOCK;
  count = std::clamp(count, 2u, kMaxGpus);
  for (unsigned i = 2; i < count; ++i) {
    AddH100(s, i, kBuses[i]);
  }
  s.gpu_count = count;
}

// Link `link` of GPU `gpu` is up (or down), its far end at `remote_bus_id` (NVML's form,
// "00000000:1B:00.0"; "" makes reading the far end fail). The GPU then answers NVLink calls.
void fakeNvmlSetNvLink(unsigned gpu, unsigned link, int active, const char* remote_bus_id) {
  FAKE_LOCK;
  s.gpus[gpu].nvlink_supported = true;
  s.gpus[gpu].links[link] = FakeLink{active != 0, remote_bus_id};
}

// What nvmlDeviceGetGpuFabricInfoV answers for GPU `gpu`: `rc`, else the given state, status,
// cluster UUID (16 bytes) and clique.
void fakeNvmlSetFabric(unsigned gpu, int rc, unsigned state, int status,
                       const unsigned char* cluster_uuid, unsigned clique) {
  FAKE_LOCK;
  FakeGpu& g = s.gpus[gpu];
  g.fabric_rc = rc;
  g.fabric = {};
  g.fabric.state = static_cast<nvmlGpuFabricState_t>(state);
  g.fabric.status = status;
  std::memcpy(g.fabric.clusterUuid, cluster_uuid, NVML_GPU_FABRIC_UUID_LEN);
  g.fabric.cliqueId = clique;
}

// --- NVML ------------------------------------------------------------------------------------

#ifndef FAKE_NVML_NO_TOPOLOGY
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                      nvmlEnableState_t* is_active) {
  FAKE_LOCK;
  FAKE_GPU(device);
  if (!gpu->nvlink_supported) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  if (link >= NVML_NVLINK_MAX_LINKS) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *is_active = gpu->links[link].active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                 nvmlPciInfo_t* pci) {
  FAKE_LOCK;
  FAKE_GPU(device);
  if (!gpu->nvlink_supported) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  if (link >= NVML_NVLINK_MAX_LINKS) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (gpu->links[link].remote_bus_id.empty()) {
    return NVML_ERROR_UNKNOWN;
  }
  std::memset(pci, 0, sizeof(*pci));
  return CopyString(gpu->links[link].remote_bus_id, pci->busId, sizeof(pci->busId));
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfo_v2_t* info) {
  FAKE_LOCK;
  FAKE_GPU(device);
  if (info->version != nvmlGpuFabricInfo_v2) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  if (gpu->fabric_rc != NVML_SUCCESS) {
    return gpu->fabric_rc;
  }
  *info = gpu->fabric;
  info->version = nvmlGpuFabricInfo_v2;
  return NVML_SUCCESS;
}
#endif

}  // extern "C"
