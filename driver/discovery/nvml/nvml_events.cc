// NvmlDeviceSource, health events: the event set and its wait.
#include <algorithm>
#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "driver/discovery/nvml/nvml_device_source.h"
#include "driver/discovery/nvml/nvml_internal.h"
#include "driver/discovery/nvml/nvml_status.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/model/mig_profile.h"

namespace dralens::driver::discovery {

using namespace nvml;           // NOLINT(build/namespaces): the NVML C names read best unqualified
using namespace nvml_internal;  // NOLINT(build/namespaces)

namespace {

// The events dralens acts on, where the GPU supports them.
constexpr unsigned long long kWantedEvents = nvmlEventTypeXidCriticalError |
                                             nvmlEventTypeGpuUnavailableError |
                                             nvmlEventTypeGpuRecoveryAction;

}  // namespace

absl::StatusOr<nvmlEventSet_t> NvmlDeviceSource::EventSet() {
  absl::MutexLock lock(&mu_);
  if (event_set_ != nullptr && !event_set_stale_) {
    return event_set_;
  }
  const nvml::NvmlApi& nv = api();
  if (event_set_ != nullptr) {
    nv.EventSetFree(event_set_);
    event_set_ = nullptr;
    DLOG(kInfo, kComponent, "health event set rebuilt after a MIG mode change or a reset");
  }
  event_set_stale_ = false;
  pending_events_.clear();
  nvmlEventSet_t set = nullptr;
  RETURN_IF_ERROR(NvmlStatus(nv.EventSetCreate(&set), "nvmlEventSetCreate"));
  unsigned int count = 0;
  if (absl::Status s = NvmlStatus(nv.DeviceGetCount(&count), "nvmlDeviceGetCount_v2"); !s.ok()) {
    nv.EventSetFree(set);
    return s;
  }
  int unmonitored = 0;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    unsigned long long supported = 0;
    nvmlReturn_t rc = nv.DeviceGetHandleByIndex(i, &device);
    if (rc == NVML_ERROR_NO_PERMISSION) {
      continue;  // not ours (outside the device cgroup): not in the inventory either
    }
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (rc == NVML_SUCCESS) {
      rc = nv.DeviceGetUUID(device, uuid, sizeof(uuid));
    }
    if (rc == NVML_SUCCESS) {
      rc = nv.DeviceGetSupportedEventTypes(device, &supported);
    }
    const unsigned long long mask = supported & kWantedEvents;
    if (rc == NVML_SUCCESS && (mask & nvmlEventTypeXidCriticalError) == 0) {
      rc = NVML_ERROR_NOT_SUPPORTED;  // without Xids its health cannot be followed
    }
    if (rc == NVML_SUCCESS) {
      rc = nv.DeviceRegisterEvents(device, mask, set);
    }
    if (rc != NVML_SUCCESS) {
      ++unmonitored;
      DLOG(kWarn, kComponent, "GPU health events not registered; the GPU is unmonitored",
           {{"index", i}, {"uuid", CString(uuid, sizeof(uuid))}, {"error", NvmlReturnName(rc)}});
      if (uuid[0] != '\0') {
        pending_events_.push_back(HealthEvent{CString(uuid, sizeof(uuid)),
                                              HealthEventKind::kUnmonitored, 0, kNoMigInstance,
                                              kNoMigInstance});
      }
    }
  }
  metrics_.SetUnmonitored(unmonitored);
  event_set_ = set;
  return set;
}

void NvmlDeviceSource::DropEventSet(absl::string_view why) {
  absl::MutexLock lock(&mu_);
  if (event_set_ != nullptr) {
    api().EventSetFree(event_set_);
    event_set_ = nullptr;
  }
  DLOG(kWarn, kComponent, "health event set freed; rebuilt on the next wait",
       {{"why", std::string(why)}});
}

std::optional<HealthEvent> NvmlDeviceSource::Translate(const nvmlEventData_t& data) {
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  const bool known = api().DeviceGetUUID(data.device, uuid, sizeof(uuid)) == NVML_SUCCESS;
  if (!known) {
    // The device handle no longer answers: the GPU is gone, which GPU cannot be told.
    return HealthEvent{"", HealthEventKind::kGpuLost, data.eventData, kNoMigInstance,
                       kNoMigInstance};
  }
  const std::string gpu = CString(uuid, sizeof(uuid));
  if ((data.eventType & nvmlEventTypeGpuUnavailableError) != 0) {
    return HealthEvent{gpu, HealthEventKind::kGpuLost, 79, kNoMigInstance, kNoMigInstance};
  }
  if ((data.eventType & nvmlEventTypeGpuRecoveryAction) != 0) {
    // The driver asks for a reset (or more): the registration will not survive it.
    DLOG(kWarn, kComponent, "GPU recovery action requested",
         {{"gpu", gpu}, {"action", data.eventData}});
    absl::MutexLock lock(&mu_);
    event_set_stale_ = true;
    return std::nullopt;
  }
  if ((data.eventType & nvmlEventTypeXidCriticalError) != 0) {
    return HealthEvent{gpu, HealthEventKind::kXid, data.eventData, data.gpuInstanceId,
                       data.computeInstanceId};
  }
  return std::nullopt;
}

absl::StatusOr<std::optional<HealthEvent>> NvmlDeviceSource::WaitForEvent(absl::Duration timeout) {
  ASSIGN_OR_RETURN(nvmlEventSet_t set, EventSet());
  {
    absl::MutexLock lock(&mu_);
    if (!pending_events_.empty()) {
      HealthEvent event = std::move(pending_events_.front());
      pending_events_.pop_front();
      return std::optional<HealthEvent>(std::move(event));
    }
  }
  const int64_t ms = std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 0, UINT_MAX);
  nvmlEventData_t data = {};
  const nvmlReturn_t rc = api().EventSetWait(set, &data, static_cast<unsigned int>(ms));
  if (rc == NVML_ERROR_TIMEOUT) {
    return std::optional<HealthEvent>();
  }
  if (rc == NVML_ERROR_GPU_IS_LOST) {
    // A GPU left the bus; a reset may bring it back with its registration gone.
    DropEventSet("a GPU is lost");
    // Not attributable to one GPU: consumers treat an empty UUID as every GPU (reference §6.3).
    return std::optional<HealthEvent>(
        HealthEvent{"", HealthEventKind::kGpuLost, 79, kNoMigInstance, kNoMigInstance});
  }
  if (rc == NVML_ERROR_UNKNOWN) {
    // The header: the set is undefined after UNKNOWN and must be freed.
    DropEventSet("nvmlEventSetWait_v2 answered NVML_ERROR_UNKNOWN");
  }
  RETURN_IF_ERROR(NvmlStatus(rc, "nvmlEventSetWait_v2"));
  return Translate(data);
}

}  // namespace dralens::driver::discovery
