// NvmlDeviceSource, usage: utilisation and memory used of every GPU and MIG device.
//
// A full GPU not in MIG mode: nvmlDeviceGetUtilizationRates (what nvidia-smi shows). With MIG
// on, NVML answers NOT_SUPPORTED there, for the parent and its MIG devices alike; a MIG device's
// activity is read through GPM instead (Hopper and later): one sample per GPU instance each
// round, and the graphics-engine activity between it and the previous round's sample. Memory
// used comes from nvmlDeviceGetMemoryInfo of the GPU or MIG device handle.
#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "driver/discovery/nvml/nvml_device_source.h"
#include "driver/discovery/nvml/nvml_internal.h"
#include "driver/discovery/nvml/nvml_status.h"
#include "src/common/log.h"
#include "src/common/status.h"

namespace dralens::driver::discovery {

using namespace nvml;           // NOLINT(build/namespaces): the NVML C names read best unqualified
using namespace nvml_internal;  // NOLINT(build/namespaces)

namespace {

std::optional<std::string> UuidOf(const NvmlApi& nv, nvmlDevice_t device) {
  char buffer[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  if (nv.DeviceGetUUID(device, buffer, sizeof(buffer)) != NVML_SUCCESS) {
    return std::nullopt;
  }
  return CString(buffer, sizeof(buffer));
}

void ReadMemory(const NvmlApi& nv, nvmlDevice_t device, DeviceUsage& usage) {
  nvmlMemory_t memory = {};
  if (nv.DeviceGetMemoryInfo(device, &memory) == NVML_SUCCESS) {
    usage.memory_used_bytes = memory.used;
    usage.memory_total_bytes = memory.total;
  }
}

// A percentage from NVML as a ratio in [0, 1].
double Ratio(double percent) { return std::clamp(percent / 100.0, 0.0, 1.0); }

}  // namespace

bool NvmlDeviceSource::GpmSupported(nvmlDevice_t device) const {
  const NvmlApi& nv = api();
  if (nv.GpmQueryDeviceSupport == nullptr || nv.GpmSampleAlloc == nullptr ||
      nv.GpmSampleFree == nullptr || nv.GpmMigSampleGet == nullptr || nv.GpmMetricsGet == nullptr) {
    return false;
  }
  nvmlGpmSupport_t support = {};
  support.version = NVML_GPM_SUPPORT_VERSION;
  return nv.GpmQueryDeviceSupport(device, &support) == NVML_SUCCESS &&
         support.isSupportedDevice != 0;
}

std::optional<double> NvmlDeviceSource::GpmActivity(nvmlDevice_t parent, unsigned int gi_id,
                                                    const std::string& mig_uuid) {
  const NvmlApi& nv = api();
  nvmlGpmSample_t sample = nullptr;
  if (nv.GpmSampleAlloc(&sample) != NVML_SUCCESS || sample == nullptr) {
    return std::nullopt;
  }
  if (const nvmlReturn_t rc = nv.GpmMigSampleGet(parent, gi_id, sample); rc != NVML_SUCCESS) {
    DLOG(kDebug, kComponent, "GPM sample failed",
         {{"mig", mig_uuid}, {"error", NvmlReturnName(rc)}});
    nv.GpmSampleFree(sample);
    return std::nullopt;
  }
  std::optional<double> activity;
  auto previous = gpm_samples_.find(mig_uuid);
  if (previous != gpm_samples_.end()) {
    nvmlGpmMetricsGet1_t get = {};
    get.version = NVML_GPM_METRICS_GET_VERSION;
    get.numMetrics = 1;
    get.sample1 = previous->second;
    get.sample2 = sample;
    get.metrics[0].metricId = NVML_GPM_METRIC_GRAPHICS_UTIL;
    const nvmlReturn_t rc = nv.GpmMetricsGet(&get);
    if (rc == NVML_SUCCESS && get.metrics[0].nvmlReturn == NVML_SUCCESS) {
      activity = Ratio(get.metrics[0].value);
    } else {
      DLOG(kDebug, kComponent, "GPM metrics failed",
           {{"mig", mig_uuid},
            {"error", NvmlReturnName(rc != NVML_SUCCESS ? rc : get.metrics[0].nvmlReturn)}});
    }
    nv.GpmSampleFree(previous->second);
    previous->second = sample;
  } else {
    gpm_samples_.emplace(mig_uuid, sample);
  }
  return activity;
}

absl::StatusOr<std::vector<DeviceUsage>> NvmlDeviceSource::SampleUsage() {
  const NvmlApi& nv = api();
  absl::MutexLock lock(&usage_mu_);
  unsigned int count = 0;
  RETURN_IF_ERROR(NvmlStatus(nv.DeviceGetCount(&count), "nvmlDeviceGetCount_v2"));
  std::vector<DeviceUsage> out;
  std::set<std::string> sampled_migs;
  absl::Status first_error;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    if (const nvmlReturn_t rc = nv.DeviceGetHandleByIndex(i, &device); rc != NVML_SUCCESS) {
      // Outside the device cgroup (NO_PERMISSION) or lost: discovery logs and counts those.
      if (first_error.ok()) {
        first_error = NvmlStatus(rc, absl::StrCat("nvmlDeviceGetHandleByIndex_v2 ", i));
      }
      continue;
    }
    std::optional<std::string> uuid = UuidOf(nv, device);
    if (!uuid) {
      continue;
    }
    DeviceUsage gpu;
    gpu.uuid = *uuid;
    ReadMemory(nv, device, gpu);
    unsigned int current = 0;
    unsigned int pending = 0;
    const bool mig_on = nv.DeviceGetMigMode(device, &current, &pending) == NVML_SUCCESS &&
                        current == NVML_DEVICE_MIG_ENABLE;
    if (!mig_on && nv.DeviceGetUtilizationRates != nullptr) {
      nvmlUtilization_t rates = {};
      if (nv.DeviceGetUtilizationRates(device, &rates) == NVML_SUCCESS) {
        gpu.utilization = Ratio(rates.gpu);
        gpu.method = UsageMethod::kDeviceUtilization;
      }
    }
    out.push_back(std::move(gpu));
    if (!mig_on) {
      continue;
    }
    const bool gpm = GpmSupported(device);
    unsigned int max = 0;
    if (nv.DeviceGetMaxMigDeviceCount(device, &max) != NVML_SUCCESS) {
      continue;
    }
    for (unsigned int m = 0; m < max; ++m) {
      nvmlDevice_t mig = nullptr;
      if (nv.DeviceGetMigDeviceHandleByIndex(device, m, &mig) != NVML_SUCCESS) {
        continue;  // an empty MIG index, or one this process may not read
      }
      std::optional<std::string> mig_uuid = UuidOf(nv, mig);
      unsigned int gi_id = 0;
      if (!mig_uuid || nv.DeviceGetGpuInstanceId(mig, &gi_id) != NVML_SUCCESS) {
        continue;
      }
      DeviceUsage usage;
      usage.uuid = *mig_uuid;
      ReadMemory(nv, mig, usage);
      if (gpm) {
        usage.method = UsageMethod::kGpm;
        usage.utilization = GpmActivity(device, gi_id, *mig_uuid);
        sampled_migs.insert(*mig_uuid);
      }
      out.push_back(std::move(usage));
    }
  }
  // A MIG device gone since the last round: its last sample compares with nothing any more.
  for (auto it = gpm_samples_.begin(); it != gpm_samples_.end();) {
    if (sampled_migs.contains(it->first)) {
      ++it;
    } else {
      nv.GpmSampleFree(it->second);
      it = gpm_samples_.erase(it);
    }
  }
  if (out.empty() && !first_error.ok()) {
    return first_error;
  }
  return out;
}

void NvmlDeviceSource::FreeGpmSamples() {
  absl::MutexLock lock(&usage_mu_);
  for (auto& [uuid, sample] : gpm_samples_) {
    api().GpmSampleFree(sample);
  }
  gpm_samples_.clear();
}

}  // namespace dralens::driver::discovery
