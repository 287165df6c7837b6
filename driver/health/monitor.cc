#include "driver/health/monitor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "driver/slices/slice_builder.h"
#include "src/common/log.h"

namespace dralens::driver::health {
namespace {

using discovery::HealthEvent;
using discovery::HealthEventKind;
using discovery::kNoMigInstance;

bool TaintLess(const model::DeviceTaint& a, const model::DeviceTaint& b) {
  return a.effect == kTaintEffectNoSchedule && b.effect != kTaintEffectNoSchedule;
}

}  // namespace

absl::string_view ToString(DeviceHealthStatus status) {
  switch (status) {
    case DeviceHealthStatus::kUnknown:
      return "Unknown";
    case DeviceHealthStatus::kHealthy:
      return "Healthy";
    case DeviceHealthStatus::kUnhealthy:
      return "Unhealthy";
  }
  return "Unknown";
}

bool IsIgnoredXid(uint64_t xid) {
  switch (xid) {
    case 13:
    case 31:
    case 43:
    case 45:
    case 68:
    case 109:
      return true;
    default:
      return false;
  }
}

HealthMonitor::HealthMonitor(HealthMonitorOptions options, common::Clock& clock)
    : options_(std::move(options)), clock_(clock) {}

HealthMonitor::~HealthMonitor() { Stop(); }

void HealthMonitor::Start(discovery::HealthEventSource& source) {
  absl::MutexLock lock(&thread_mu_);
  if (thread_.joinable() || stopping_) {
    return;
  }
  thread_ = std::thread([this, &source] { Run(source); });
}

void HealthMonitor::Stop() {
  std::thread thread;
  {
    absl::MutexLock lock(&thread_mu_);
    stopping_ = true;
    thread = std::move(thread_);
  }
  if (thread.joinable()) {
    thread.join();
  }
}

void HealthMonitor::Run(discovery::HealthEventSource& source) {
  while (true) {
    {
      absl::MutexLock lock(&thread_mu_);
      if (stopping_) {
        return;
      }
    }
    absl::StatusOr<std::optional<HealthEvent>> event = source.WaitForEvent(options_.event_wait);
    if (!event.ok()) {
      DLOG(kWarn, "health", "waiting for GPU health events failed",
           {{"error", event.status().ToString()}});
      absl::MutexLock lock(&thread_mu_);
      thread_mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.error_backoff);
      continue;
    }
    if (event->has_value()) {
      Apply(**event);
    }
  }
}

bool HealthMonitor::IsCritical(uint64_t xid) const {
  return !IsIgnoredXid(xid) && !options_.additional_ignored_xids.contains(xid);
}

bool HealthMonitor::AddFault(std::vector<Fault>& faults, Fault fault) {
  for (const Fault& existing : faults) {
    if (existing.kind == fault.kind && existing.xid == fault.xid) {
      return false;
    }
  }
  faults.push_back(std::move(fault));
  return true;
}

void HealthMonitor::SetInventory(const model::Inventory& inventory) {
  bool changed = false;
  {
    absl::MutexLock lock(&mu_);
    inventory_ = inventory;
    for (auto it = gpu_faults_.begin(); it != gpu_faults_.end();) {
      it = inventory_.FindGpuByUuid(it->first) == nullptr ? gpu_faults_.erase(it) : std::next(it);
    }
    for (auto it = mig_faults_.begin(); it != mig_faults_.end();) {
      it = inventory_.FindMigDeviceByUuid(it->first) == nullptr ? mig_faults_.erase(it)
                                                                : std::next(it);
    }
    changed = RecomputeLocked(clock_.Now());
  }
  if (changed) {
    NotifyChanged();
  }
}

void HealthMonitor::Apply(const HealthEvent& event) {
  const absl::Time now = clock_.Now();
  const bool lost = event.kind == HealthEventKind::kGpuLost;
  const bool unmonitored = event.kind == HealthEventKind::kUnmonitored;
  const bool gpu_event = lost || unmonitored;
  const bool critical = lost || (!unmonitored && IsCritical(event.xid));
  bool changed = false;
  {
    absl::MutexLock lock(&mu_);
    std::vector<const model::GpuInfo*> gpus;
    if (event.gpu_uuid.empty()) {
      for (const model::GpuInfo& gpu : inventory_.gpus()) {
        gpus.push_back(&gpu);
      }
    } else if (const model::GpuInfo* gpu = inventory_.FindGpuByUuid(event.gpu_uuid)) {
      gpus.push_back(gpu);
    } else {
      DLOG(
          kWarn, "health", "health event for a GPU not in the inventory; dropped",
          {{"gpu", event.gpu_uuid}, {"kind", discovery::ToString(event.kind)}, {"xid", event.xid}});
      return;
    }
    const Fault fault{event.kind, event.xid, now};
    for (const model::GpuInfo* gpu : gpus) {
      std::vector<const model::MigDevice*> targets;
      if (!gpu_event && event.gi_id != kNoMigInstance) {
        for (const model::MigDevice* mig : inventory_.MigDevicesOf(gpu->uuid)) {
          if (mig->gi_id == event.gi_id &&
              (event.ci_id == kNoMigInstance || mig->ci_id == event.ci_id)) {
            targets.push_back(mig);
          }
        }
      }
      for (const model::MigDevice* mig : targets) {
        AddFault(mig_faults_[mig->uuid], fault);
      }
      if (targets.empty()) {
        AddFault(gpu_faults_[gpu->uuid], fault);
      }
    }
    changed = RecomputeLocked(now);
  }
  const common::LogLevel level = critical ? common::LogLevel::kWarn : common::LogLevel::kInfo;
  if (level >= common::GetLogLevel()) {
    common::Log(
        level, "health",
        lost ? "GPU lost"
             : (unmonitored ? "GPU health unmonitored"
                            : (critical ? "critical Xid" : "ignored Xid")),
        {{"gpu", event.gpu_uuid.empty() ? "all" : event.gpu_uuid},
         {"xid", event.xid},
         {"gi", event.gi_id == kNoMigInstance ? std::string("-") : absl::StrCat(event.gi_id)},
         {"ci", event.ci_id == kNoMigInstance ? std::string("-") : absl::StrCat(event.ci_id)}});
  }
  if (changed) {
    NotifyChanged();
  }
}

void HealthMonitor::ClearFaults() {
  bool changed = false;
  {
    absl::MutexLock lock(&mu_);
    gpu_faults_.clear();
    mig_faults_.clear();
    changed = RecomputeLocked(clock_.Now());
  }
  if (changed) {
    NotifyChanged();
  }
}

bool HealthMonitor::RecomputeLocked(absl::Time now) {
  std::vector<Device> devices;
  auto add = [&](std::string name, const std::string& gpu_uuid, const std::string& mig_uuid) {
    Device device;
    device.name = std::move(name);
    device.gpu_uuid = gpu_uuid;
    device.mig_uuid = mig_uuid;
    device.state.pool = options_.pool_name;
    device.state.device = device.name;
    device.state.health = DeviceHealthStatus::kHealthy;

    std::vector<Fault> faults;
    if (auto it = gpu_faults_.find(gpu_uuid); it != gpu_faults_.end()) {
      faults = it->second;
    }
    if (auto it = mig_faults_.find(mig_uuid); !mig_uuid.empty() && it != mig_faults_.end()) {
      for (const Fault& fault : it->second) {
        AddFault(faults, fault);
      }
    }
    std::vector<std::string> parts;
    for (const Fault& fault : faults) {
      model::DeviceTaint taint;
      taint.time_added = fault.time;
      if (fault.kind == HealthEventKind::kUnmonitored) {
        // Not a fault of the GPU: its faults would go unseen. Scheduling decides.
        parts.push_back("health events cannot be monitored");
        taint.key = kUnmonitoredTaintKey;
        taint.effect = kTaintEffectNone;
      } else if (fault.kind == HealthEventKind::kGpuLost) {
        device.state.health = DeviceHealthStatus::kUnhealthy;
        parts.push_back(fault.xid == 0 ? std::string("GPU lost")
                                       : absl::StrCat("GPU lost (Xid ", fault.xid, ")"));
        taint.key = kGpuLostTaintKey;
        taint.effect = kTaintEffectNoSchedule;
      } else {
        const bool critical = IsCritical(fault.xid);
        if (critical) {
          device.state.health = DeviceHealthStatus::kUnhealthy;
        }
        parts.push_back(absl::StrCat("Xid ", fault.xid,
                                     critical ? " (critical)" : " (application error, ignored)"));
        taint.key = kXidTaintKey;
        taint.value = absl::StrCat(fault.xid);
        taint.effect = critical ? kTaintEffectNoSchedule : kTaintEffectNone;
      }
      device.taints.push_back(std::move(taint));
    }
    // A GPU lost reported twice with different Xids still gets one gpu-lost taint.
    std::vector<model::DeviceTaint> unique;
    for (model::DeviceTaint& taint : device.taints) {
      if (std::none_of(unique.begin(), unique.end(), [&](const model::DeviceTaint& t) {
            return t.key == taint.key && t.value == taint.value;
          })) {
        unique.push_back(std::move(taint));
      }
    }
    std::stable_sort(unique.begin(), unique.end(), TaintLess);
    if (unique.size() > kMaxTaintsPerDevice) {
      unique.resize(kMaxTaintsPerDevice);
    }
    device.taints = std::move(unique);
    device.state.message = absl::StrJoin(parts, "; ");
    devices.push_back(std::move(device));
  };

  for (const model::GpuInfo& gpu : inventory_.gpus()) {
    if (slices::OffersFullGpu(gpu, options_.dynamic_mig)) {
      add(slices::GpuDeviceName(gpu), gpu.uuid, "");
    }
  }
  if (!options_.dynamic_mig) {
    for (const model::MigDevice& mig : inventory_.mig_devices()) {
      add(slices::MigDeviceName(mig), mig.parent_uuid, mig.uuid);
    }
  }

  bool changed = devices.size() != devices_.size();
  for (size_t i = 0; i < devices.size(); ++i) {
    Device& device = devices[i];
    const Device* old = nullptr;
    for (const Device& candidate : devices_) {
      if (candidate.name == device.name && candidate.gpu_uuid == device.gpu_uuid &&
          candidate.mig_uuid == device.mig_uuid) {
        old = &candidate;
        break;
      }
    }
    const bool same = old != nullptr && old->state.health == device.state.health &&
                      old->state.message == device.state.message && old->taints == device.taints;
    device.state.last_updated = same ? old->state.last_updated : now;
    if (!same || i >= devices_.size() || devices_[i].name != device.name) {
      changed = true;
    }
  }
  devices_ = std::move(devices);
  if (changed) {
    ++version_;
  }
  return changed;
}

void HealthMonitor::NotifyChanged() {
  absl::MutexLock lock(&callbacks_mu_);
  for (auto& [id, callback] : callbacks_) {
    callback();
  }
}

std::vector<DeviceHealthState> HealthMonitor::Snapshot(uint64_t* version) const {
  absl::MutexLock lock(&mu_);
  std::vector<DeviceHealthState> states;
  states.reserve(devices_.size());
  for (const Device& device : devices_) {
    states.push_back(device.state);
  }
  if (version != nullptr) {
    *version = version_;
  }
  return states;
}

std::map<std::string, std::vector<model::DeviceTaint>> HealthMonitor::Taints() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::vector<model::DeviceTaint>> taints;
  for (const Device& device : devices_) {
    if (!device.taints.empty()) {
      taints[device.name] = device.taints;
    }
  }
  return taints;
}

uint64_t HealthMonitor::Version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

uint64_t HealthMonitor::OnChange(std::function<void()> callback) {
  absl::MutexLock lock(&callbacks_mu_);
  const uint64_t id = next_callback_id_++;
  callbacks_.emplace(id, std::move(callback));
  return id;
}

void HealthMonitor::RemoveOnChange(uint64_t id) {
  absl::MutexLock lock(&callbacks_mu_);
  callbacks_.erase(id);
}

}  // namespace dralens::driver::health
