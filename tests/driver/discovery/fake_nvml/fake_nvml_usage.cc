// The fake's usage answers: nvmlDeviceGetUtilizationRates (NOT_SUPPORTED in MIG mode, as on a
// real H100) and GPM samples of GPU instances, whose graphics activity is what the test set.
#include <cstring>

#include "tests/driver/discovery/fake_nvml/fake_nvml_state.h"

using namespace fake_nvml;  // NOLINT(build/namespaces)

namespace {

struct FakeGpmSample {
  bool taken = false;
  unsigned util_percent = 0;
};

}  // namespace

extern "C" {

// Utilisation and memory used of a GPU (gi == ~0u) or of one of its GPU instances.
void fakeNvmlSetUsage(unsigned gpu, unsigned gi, unsigned util_percent,
                      unsigned long long used_mib) {
  FAKE_LOCK;
  if (gi == ~0u) {
    s.gpus[gpu].util_percent = util_percent;
    s.gpus[gpu].used_mib = used_mib;
    return;
  }
  for (auto& inst : s.instances) {
    if (inst->gpu == gpu && inst->gi_id == gi) {
      inst->util_percent = util_percent;
      inst->used_mib = used_mib;
    }
  }
}

void fakeNvmlSetGpmSupported(unsigned gpu, int supported) {
  FAKE_LOCK;
  s.gpus[gpu].gpm_supported = supported != 0;
}

int fakeNvmlGpmSamplesAlive() {
  FAKE_LOCK;
  return s.gpm_samples;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  FAKE_LOCK;
  if (MigByHandle(s, device) != nullptr) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  FAKE_GPU(device);
  if (gpu->mig_current == 1) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  utilization->gpu = gpu->util_percent;
  utilization->memory = 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t* support) {
  FAKE_LOCK;
  FAKE_GPU(device);
  if (support->version != NVML_GPM_SUPPORT_VERSION) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  support->isSupportedDevice = gpu->gpm_supported ? 1 : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t* sample) {
  FAKE_LOCK;
  *sample = reinterpret_cast<nvmlGpmSample_t>(new FakeGpmSample());
  ++s.gpm_samples;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
  FAKE_LOCK;
  if (sample == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  delete reinterpret_cast<FakeGpmSample*>(sample);
  --s.gpm_samples;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpu_instance_id,
                                 nvmlGpmSample_t sample) {
  FAKE_LOCK;
  FAKE_GPU(device);
  if (!gpu->gpm_supported) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  for (auto& inst : s.instances) {
    if (&s.gpus[inst->gpu] == gpu && inst->gi_id == gpu_instance_id) {
      auto* out = reinterpret_cast<FakeGpmSample*>(sample);
      out->taken = true;
      out->util_percent = inst->util_percent;
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

// The activity between two samples is what the GPU instance was set to when the second was taken.
nvmlReturn_t nvmlGpmMetricsGet(void* metrics_get) {
  FAKE_LOCK;
  (void)s;
  auto* get = static_cast<nvmlGpmMetricsGet1_t*>(metrics_get);
  if (get->version != NVML_GPM_METRICS_GET_VERSION) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  auto* first = reinterpret_cast<FakeGpmSample*>(get->sample1);
  auto* second = reinterpret_cast<FakeGpmSample*>(get->sample2);
  if (first == nullptr || second == nullptr || !first->taken || !second->taken) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  for (unsigned i = 0; i < get->numMetrics; ++i) {
    // Only metrics[0..numMetrics) belong to the caller.
    nvmlGpmMetric_t& m = get->metrics[i];
    if (m.metricId == NVML_GPM_METRIC_GRAPHICS_UTIL) {
      m.nvmlReturn = NVML_SUCCESS;
      m.value = second->util_percent;
    } else {
      m.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
  }
  return NVML_SUCCESS;
}

}  // extern "C"
