// The fake libnvidia-ml.so.1, health events.
#include "tests/driver/discovery/fake_nvml/fake_nvml_state.h"

using namespace fake_nvml;  // NOLINT(build/namespaces)

extern "C" {

// --- events ----------------------------------------------------------------------------------

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  FAKE_LOCK;
  ++s.event_sets;
  ++s.event_sets_created;
  *set = reinterpret_cast<nvmlEventSet_t>(&s.event_set_tag);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                              unsigned long long* event_types) {
  FAKE_LOCK;
  FAKE_GPU(device);
  *event_types = gpu->supported_events;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long event_types,
                                      nvmlEventSet_t /*set*/) {
  FAKE_LOCK;
  FAKE_GPU(device);
  if ((event_types & ~gpu->supported_events) != 0) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  gpu->registered_events |= event_types;
  gpu->registered = (gpu->registered_events & nvmlEventTypeXidCriticalError) != 0;
  return NVML_SUCCESS;
}

#ifdef FAKE_NVML_LEGACY_ONLY
// A library of a driver older than dralens supports: only the unversioned wait, whose event data
// lacks the GPU and compute instance IDs.
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t /*set*/, nvmlEventData_t* /*data*/,
                              unsigned int /*timeout_ms*/) {
  return NVML_ERROR_TIMEOUT;
}
#else
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t /*set*/, nvmlEventData_t* data,
                                 unsigned int /*timeout_ms*/) {
  FAKE_LOCK;
  if (s.next_wait != NVML_SUCCESS) {
    const nvmlReturn_t rc = s.next_wait;
    s.next_wait = NVML_SUCCESS;
    return rc;
  }
  for (const FakeGpu& gpu : s.gpus) {
    if (gpu.lost) {
      return NVML_ERROR_GPU_IS_LOST;
    }
  }
  while (!s.events.empty()) {
    const FakeEvent event = s.events.front();
    s.events.pop_front();
    FakeGpu& gpu = s.gpus[event.gpu];
    if ((gpu.registered_events & event.type) == 0) {
      continue;  // not registered with the set: NVML never delivers it
    }
    data->device = reinterpret_cast<nvmlDevice_t>(&gpu.tag);
    data->eventType = event.type;
    data->eventData = event.data;
    data->gpuInstanceId = event.gi;
    data->computeInstanceId = event.ci;
    return NVML_SUCCESS;
  }
  return NVML_ERROR_TIMEOUT;  // never sleeps: tests stay fast
}
#endif

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t /*set*/) {
  FAKE_LOCK;
  --s.event_sets;
  for (FakeGpu& gpu : s.gpus) {  // one set at a time in this fake: its registrations go with it
    gpu.registered = false;
    gpu.registered_events = 0;
  }
  return NVML_SUCCESS;
}

}  // extern "C"
