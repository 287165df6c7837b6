// SimulatedDeviceSource, usage: the loads set by SetLoad, reported the way NVML reports them.
#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "driver/discovery/simulated/simulated_device_source.h"

namespace dralens::driver::discovery {

absl::Status SimulatedDeviceSource::SetLoad(absl::string_view uuid, absl::string_view owner,
                                            double utilization, uint64_t memory_used_bytes) {
  absl::MutexLock lock(&mu_);
  bool known = false;
  for (const Gpu& gpu : gpus_) {
    known = known || gpu.info.uuid == uuid;
    for (const GpuInstance& gi : gpu.gis) {
      for (const ComputeInstance& ci : gi.cis) {
        known = known || ci.uuid == uuid;
      }
    }
  }
  if (!known) {
    return absl::NotFoundError(absl::StrCat("no simulated GPU or MIG device ", uuid));
  }
  loads_[std::string(uuid)][std::string(owner)] =
      Load{std::clamp(utilization, 0.0, 1.0), memory_used_bytes};
  return absl::OkStatus();
}

void SimulatedDeviceSource::ClearLoad(absl::string_view uuid, absl::string_view owner) {
  absl::MutexLock lock(&mu_);
  auto device = loads_.find(uuid);
  if (device == loads_.end()) {
    return;
  }
  if (auto it = device->second.find(owner); it != device->second.end()) {
    device->second.erase(it);
  }
  if (device->second.empty()) {
    loads_.erase(device);
  }
}

absl::StatusOr<std::vector<DeviceUsage>> SimulatedDeviceSource::SampleUsage() {
  absl::MutexLock lock(&mu_);
  std::vector<DeviceUsage> out;
  std::set<std::string> sampled;
  auto load_of = [this](const std::string& uuid) {
    Load sum;
    if (auto it = loads_.find(uuid); it != loads_.end()) {
      for (const auto& [owner, load] : it->second) {
        sum.utilization = std::min(1.0, sum.utilization + load.utilization);
        sum.memory_used_bytes += load.memory_used_bytes;
      }
    }
    return sum;
  };
  for (const Gpu& gpu : gpus_) {
    if (gpu.lost) {
      continue;  // NVML answers GPU_IS_LOST: left out
    }
    DeviceUsage whole;
    whole.uuid = gpu.info.uuid;
    whole.memory_total_bytes = gpu.info.memory_bytes;
    if (gpu.current != model::MigMode::kEnabled) {
      const Load load = load_of(gpu.info.uuid);
      whole.utilization = load.utilization;
      whole.memory_used_bytes = load.memory_used_bytes;
      whole.method = UsageMethod::kDeviceUtilization;
      out.push_back(std::move(whole));
      continue;
    }
    uint64_t used = 0;
    std::vector<DeviceUsage> migs;
    for (const GpuInstance& gi : gpu.gis) {
      for (const ComputeInstance& ci : gi.cis) {
        const Load load = load_of(ci.uuid);
        DeviceUsage mig;
        mig.uuid = ci.uuid;
        mig.memory_used_bytes = load.memory_used_bytes;
        mig.memory_total_bytes = gi.profile.memory_mib << 20;
        used += load.memory_used_bytes;
        if (gpu.board->architecture_enum >= 9) {
          mig.method = UsageMethod::kGpm;
          if (gpm_sampled_.contains(ci.uuid)) {
            mig.utilization = load.utilization;
          }
          sampled.insert(ci.uuid);
        }
        migs.push_back(std::move(mig));
      }
    }
    whole.memory_used_bytes = used;
    out.push_back(std::move(whole));
    for (DeviceUsage& mig : migs) {
      out.push_back(std::move(mig));
    }
  }
  gpm_sampled_ = std::move(sampled);
  return out;
}

}  // namespace dralens::driver::discovery
