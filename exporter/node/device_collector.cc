#include "exporter/node/device_collector.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/telemetry/catalog.h"

namespace dralens::exporter {
namespace {

prometheus::Labels InfoLabels(const model::NodeDevice& d) {
  return {{"device", d.name},
          {"uuid", d.uuid},
          {"product", d.product},
          {"type", std::string(model::ToString(d.type))},
          {"parent", d.parent},
          {"profile", d.profile},
          {"numa_node", d.numa_node ? absl::StrCat(*d.numa_node) : ""},
          {"pci_bus_id", d.pci_bus_id}};
}

}  // namespace

DeviceMetrics DeviceMetrics::Create(prometheus::Registry& registry) {
  auto& prepared_claims = telemetry::BuildGauge(registry, "dralens_node_prepared_claims");
  auto& prepared_devices = telemetry::BuildGauge(registry, "dralens_node_prepared_devices");
  return DeviceMetrics{
      .info = telemetry::BuildGauge(registry, "dralens_device_info"),
      .memory_bytes = telemetry::BuildGauge(registry, "dralens_device_memory_bytes"),
      .state = telemetry::BuildGauge(registry, "dralens_device_state"),
      .consumers = telemetry::BuildGauge(registry, "dralens_device_consumers"),
      .prepared_claims_family = prepared_claims,
      .prepared_devices_family = prepared_devices,
      .prepared_claims = prepared_claims.Add({}),
      .prepared_gpus = prepared_devices.Add({{"type", "gpu"}}),
      .prepared_migs = prepared_devices.Add({{"type", "mig"}})};
}

void DeviceCollector::ApplyLayout(const model::NodeLayout& layout) {
  std::map<std::string, const model::NodeDevice*> now;
  for (const model::NodeDevice& d : layout.devices) {
    now[d.name] = &d;
  }
  // Devices that went away, or whose identity changed, lose their series.
  for (auto it = series_.begin(); it != series_.end();) {
    auto found = now.find(it->first);
    if (found != now.end() && InfoLabels(*found->second) == it->second.info) {
      ++it;
      continue;
    }
    metrics_.info.Remove(&metrics_.info.Add(it->second.info));
    metrics_.memory_bytes.Remove(it->second.memory);
    metrics_.state.Remove(it->second.free);
    metrics_.state.Remove(it->second.prepared);
    metrics_.state.Remove(it->second.unhealthy);
    metrics_.consumers.Remove(it->second.consumers);
    it = series_.erase(it);
  }
  for (const auto& [name, d] : now) {
    auto [it, added] = series_.try_emplace(name);
    Series& s = it->second;
    s.memory = &metrics_.memory_bytes.Add({{"device", name}});
    s.memory->Set(static_cast<double>(d->memory_bytes));
    if (!added) {
      continue;
    }
    s.info = InfoLabels(*d);
    metrics_.info.Add(s.info).Set(1);
    s.free = &metrics_.state.Add({{"device", name}, {"state", "free"}});
    s.prepared = &metrics_.state.Add({{"device", name}, {"state", "prepared"}});
    s.unhealthy = &metrics_.state.Add({{"device", name}, {"state", "unhealthy"}});
    s.consumers = &metrics_.consumers.Add({{"device", name}});
  }
}

void DeviceCollector::Apply(const model::NodeView& view) {
  if (view.layout != layout_) {
    ApplyLayout(*view.layout);
    layout_ = view.layout;
  }
  std::map<std::string, std::set<std::string>> holders;  // device -> claim UIDs
  std::set<std::string> gpus;
  std::set<std::string> migs;
  for (const model::PreparedClaim& claim : view.claims) {
    for (const model::ClaimDevice& d : claim.devices) {
      holders[d.device].insert(claim.uid);
      (d.type == model::DeviceType::kMig ? migs : gpus).insert(d.device);
    }
  }
  for (const auto& [name, s] : series_) {
    auto it = holders.find(name);
    const size_t users = it == holders.end() ? 0 : it->second.size();
    const bool unhealthy = view.unhealthy.count(name) > 0;
    s.free->Set(!unhealthy && users == 0 ? 1 : 0);
    s.prepared->Set(!unhealthy && users > 0 ? 1 : 0);
    s.unhealthy->Set(unhealthy ? 1 : 0);
    s.consumers->Set(static_cast<double>(users));
  }
  metrics_.prepared_claims.Set(static_cast<double>(view.claims.size()));
  metrics_.prepared_gpus.Set(static_cast<double>(gpus.size()));
  metrics_.prepared_migs.Set(static_cast<double>(migs.size()));
}

}  // namespace dralens::exporter
