// NvmlDeviceSource's NVLink and fabric identity: the nvlink_domain of each discovered GPU.
#include <algorithm>
#include <array>
#include <cstring>

#include "driver/discovery/nvlink_domains.h"
#include "driver/discovery/nvml/nvml_device_source.h"
#include "driver/discovery/nvml/nvml_internal.h"

namespace dralens::driver::discovery {

using namespace nvml;           // NOLINT(build/namespaces): the NVML C names read best unqualified
using namespace nvml_internal;  // NOLINT(build/namespaces)

namespace {

// FabricDomain() of the GPU's fabric clique; empty unless NVML has the call and says the GPU
// finished registering with a fabric, without error, under a cluster UUID that is set. A
// single-node NVSwitch system answers NOT_SUPPORTED or never completes; that is no fabric.
std::string ReadFabricDomain(const NvmlApi& nv, nvmlDevice_t device) {
  if (nv.DeviceGetGpuFabricInfoV == nullptr) {
    return "";
  }
  nvmlGpuFabricInfo_v2_t info = {};
  info.version = nvmlGpuFabricInfo_v2;
  if (nv.DeviceGetGpuFabricInfoV(device, &info) != NVML_SUCCESS ||
      info.state != NVML_GPU_FABRIC_STATE_COMPLETED || info.status != NVML_SUCCESS) {
    return "";
  }
  std::array<unsigned char, NVML_GPU_FABRIC_UUID_LEN> uuid = {};
  std::memcpy(uuid.data(), info.clusterUuid, uuid.size());
  if (std::all_of(uuid.begin(), uuid.end(), [](unsigned char b) { return b == 0; })) {
    return "";
  }
  return FabricDomain(uuid, info.cliqueId);
}

// The GPU's active links and their far ends. A link whose state or far end NVML does not give
// (NOT_SUPPORTED on a GPU without NVLink, INVALID_ARGUMENT past its last link) is skipped.
NvLinkEndpoint ReadLinks(const NvmlApi& nv, nvmlDevice_t device, const model::GpuInfo& gpu) {
  NvLinkEndpoint endpoint;
  endpoint.uuid = gpu.uuid;
  endpoint.pci_bus_id = gpu.pci_bus_id;
  if (nv.DeviceGetNvLinkState == nullptr) {
    return endpoint;
  }
  for (unsigned int link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
    nvmlEnableState_t active = NVML_FEATURE_DISABLED;
    if (nv.DeviceGetNvLinkState(device, link, &active) != NVML_SUCCESS ||
        active != NVML_FEATURE_ENABLED) {
      continue;
    }
    ++endpoint.active_links;
    nvmlPciInfo_t remote = {};
    if (nv.DeviceGetNvLinkRemotePciInfo == nullptr ||
        nv.DeviceGetNvLinkRemotePciInfo(device, link, &remote) != NVML_SUCCESS) {
      continue;
    }
    std::string bus_id = CString(remote.busId, sizeof(remote.busId));
    if (bus_id.empty()) {
      bus_id = CString(remote.busIdLegacy, sizeof(remote.busIdLegacy));
    }
    if (!bus_id.empty()) {
      endpoint.remote_bus_ids.push_back(NormalizePciBusId(bus_id));
    }
  }
  return endpoint;
}

}  // namespace

void NvmlDeviceSource::AssignNvLinkDomains(const std::vector<nvmlDevice_t>& devices,
                                           std::vector<model::GpuInfo>& gpus) const {
  const NvmlApi& nv = api();
  std::vector<NvLinkEndpoint> endpoints;
  endpoints.reserve(gpus.size());
  for (size_t i = 0; i < gpus.size() && i < devices.size(); ++i) {
    NvLinkEndpoint endpoint = ReadLinks(nv, devices[i], gpus[i]);
    endpoint.fabric_domain = ReadFabricDomain(nv, devices[i]);
    endpoints.push_back(std::move(endpoint));
  }
  const std::vector<std::string> domains = NvLinkDomains(endpoints);
  for (size_t i = 0; i < domains.size(); ++i) {
    gpus[i].nvlink_domain = domains[i];
  }
}

}  // namespace dralens::driver::discovery
