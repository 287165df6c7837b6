#include "exporter/node/usage_collector.h"

#include <set>
#include <utility>

#include "src/telemetry/catalog.h"

namespace dralens::exporter {

UsageMetrics UsageMetrics::Create(prometheus::Registry& registry) {
  return UsageMetrics{
      .utilization = telemetry::BuildGauge(registry, "dralens_device_utilization_ratio"),
      .memory_used = telemetry::BuildGauge(registry, "dralens_device_memory_used_bytes"),
      .claim_idle = telemetry::BuildGauge(registry, "dralens_node_claim_idle_seconds"),
      .idle_gpu_seconds = telemetry::BuildCounter(registry, "dralens_node_idle_gpu_seconds_total")};
}

void UsageCollector::Apply(const model::NodeView& view) {
  // Views come with every claim change; the layout (shared between views) rarely changes.
  if (view.layout != layout_) {
    layout_ = view.layout;
    names_.clear();
    std::set<std::string> named;
    if (layout_ != nullptr) {
      for (const model::NodeDevice& d : layout_->devices) {
        names_[d.uuid] = d.name;
        named.insert(d.name);
      }
    }
    for (auto it = devices_.begin(); it != devices_.end();) {
      auto next = std::next(it);
      if (!named.contains(it->first)) {
        DropDevice(it->first);
      }
      it = next;
    }
  }
  claims_ = view.claims;
  std::set<std::string> uids;
  for (const model::PreparedClaim& c : claims_) {
    uids.insert(c.uid);
  }
  for (auto it = idle_.begin(); it != idle_.end();) {
    if (uids.contains(it->first)) {
      ++it;
      continue;
    }
    if (it->second.series != nullptr) {
      metrics_.claim_idle.Remove(it->second.series);
    }
    it = idle_.erase(it);
  }
}

void UsageCollector::SetDevice(const std::string& name, const model::DeviceUsageSample& sample) {
  DeviceSeries& s = devices_[name];
  if (sample.utilization.has_value()) {
    if (s.utilization == nullptr) {
      s.utilization = &metrics_.utilization.Add({{"device", name}});
    }
    s.utilization->Set(*sample.utilization);
  } else if (s.utilization != nullptr) {
    metrics_.utilization.Remove(s.utilization);
    s.utilization = nullptr;
  }
  if (sample.memory_used_bytes.has_value()) {
    if (s.memory_used == nullptr) {
      s.memory_used = &metrics_.memory_used.Add({{"device", name}});
    }
    s.memory_used->Set(static_cast<double>(*sample.memory_used_bytes));
  } else if (s.memory_used != nullptr) {
    metrics_.memory_used.Remove(s.memory_used);
    s.memory_used = nullptr;
  }
}

void UsageCollector::DropDevice(const std::string& name) {
  auto it = devices_.find(name);
  if (it == devices_.end()) {
    return;
  }
  if (it->second.utilization != nullptr) {
    metrics_.utilization.Remove(it->second.utilization);
  }
  if (it->second.memory_used != nullptr) {
    metrics_.memory_used.Remove(it->second.memory_used);
  }
  devices_.erase(it);
}

void UsageCollector::AccrueIdle(const model::PreparedClaim& claim, double seconds) {
  if (seconds <= 0) {
    return;
  }
  for (const model::ClaimDevice& d : claim.devices) {
    if (d.gpus <= 0) {
      continue;
    }
    prometheus::Counter*& counter =
        idle_gpu_seconds_[{claim.namespace_name, d.device_class, d.product}];
    if (counter == nullptr) {
      counter = &metrics_.idle_gpu_seconds.Add({{"namespace", claim.namespace_name},
                                                {"device_class", d.device_class},
                                                {"product", d.product}});
    }
    counter->Increment(d.gpus * seconds);
  }
}

void UsageCollector::ApplyUsage(const model::UsageView& view) {
  std::map<std::string, const model::DeviceUsageSample*> by_uuid;
  std::set<std::string> sampled;
  for (const model::DeviceUsageSample& sample : view.devices) {
    by_uuid[sample.uuid] = &sample;
    auto name = names_.find(sample.uuid);
    if (name == names_.end()) {
      continue;  // not a published device (yet)
    }
    SetDevice(name->second, sample);
    sampled.insert(name->second);
  }
  // A device this round did not reach (lost, or no longer readable) has no current figures.
  for (auto it = devices_.begin(); it != devices_.end();) {
    auto next = std::next(it);
    if (!sampled.contains(it->first)) {
      DropDevice(it->first);
    }
    it = next;
  }
  for (const model::PreparedClaim& claim : claims_) {
    bool busy = false;
    bool decided = !claim.devices.empty();
    for (const model::ClaimDevice& d : claim.devices) {
      auto it = by_uuid.find(d.uuid);
      if (it == by_uuid.end() || !it->second->utilization.has_value()) {
        decided = false;
        continue;
      }
      busy = busy || *it->second->utilization >= idle_threshold_;
    }
    ClaimIdle& idle = idle_[claim.uid];
    if (busy) {
      idle.idle_since.reset();
      idle.accrued_to.reset();
    } else if (decided && !idle.idle_since.has_value()) {
      idle.idle_since = view.at;
    }
    if (idle.idle_since.has_value()) {
      // The same time the idle series shows, in GPU-seconds: from idleness's start, through
      // undecided rounds, to this round.
      // Only forward: a clock that steps back never counts a stretch twice.
      const absl::Time from = idle.accrued_to.value_or(*idle.idle_since);
      if (view.at > from) {
        AccrueIdle(claim, absl::ToDoubleSeconds(view.at - from));
        idle.accrued_to = view.at;
      }
    }
    if (!busy && !decided && idle.series == nullptr) {
      continue;  // never decided: no figure to give
    }
    if (idle.series == nullptr) {
      idle.series = &metrics_.claim_idle.Add(
          {{"namespace", claim.namespace_name}, {"claim", claim.name}, {"uid", claim.uid}});
    }
    idle.series->Set(idle.idle_since.has_value() ? absl::ToDoubleSeconds(view.at - *idle.idle_since)
                                                 : 0.0);
  }
}

}  // namespace dralens::exporter
