#include "exporter/node/mig_collector.h"

#include <set>

#include "src/telemetry/catalog.h"

namespace dralens::exporter {

MigLayoutMetrics MigLayoutMetrics::Create(prometheus::Registry& registry) {
  return MigLayoutMetrics{.devices = telemetry::BuildGauge(registry, "dralens_mig_devices"),
                          .placeable = telemetry::BuildGauge(registry, "dralens_mig_placeable")};
}

void MigCollector::ApplyLayout(const model::NodeLayout& layout) {
  std::set<Group> groups;
  group_of_.clear();
  for (const model::NodeDevice& d : layout.devices) {
    if (d.type == model::DeviceType::kMig) {
      const Group g{d.parent, d.profile};
      groups.insert(g);
      group_of_[d.name] = g;
    }
  }
  for (auto it = groups_.begin(); it != groups_.end();) {
    if (groups.count(it->first) > 0) {
      ++it;
      continue;
    }
    metrics_.devices.Remove(it->second.free);
    metrics_.devices.Remove(it->second.prepared);
    it = groups_.erase(it);
  }
  for (const Group& g : groups) {
    if (groups_.count(g) > 0) {
      continue;
    }
    groups_[g] = GroupSeries{
        .free =
            &metrics_.devices.Add({{"parent", g.first}, {"profile", g.second}, {"state", "free"}}),
        .prepared = &metrics_.devices.Add(
            {{"parent", g.first}, {"profile", g.second}, {"state", "prepared"}})};
  }
  std::map<Group, uint32_t> placeable;
  for (const model::MigPlaceableCount& p : layout.placeable) {
    placeable[{p.parent, p.profile}] = p.count;
  }
  for (auto it = placeable_.begin(); it != placeable_.end();) {
    if (placeable.count(it->first) > 0) {
      ++it;
      continue;
    }
    metrics_.placeable.Remove(it->second);
    it = placeable_.erase(it);
  }
  for (const auto& [g, count] : placeable) {
    prometheus::Gauge*& gauge = placeable_[g];
    if (gauge == nullptr) {
      gauge = &metrics_.placeable.Add({{"parent", g.first}, {"profile", g.second}});
    }
    gauge->Set(count);
  }
}

void MigCollector::Apply(const model::NodeView& view) {
  if (view.layout != layout_) {
    ApplyLayout(*view.layout);
    layout_ = view.layout;
  }
  std::set<std::string> held;
  for (const model::PreparedClaim& claim : view.claims) {
    for (const model::ClaimDevice& d : claim.devices) {
      held.insert(d.device);
    }
  }
  std::map<Group, std::pair<int, int>> counts;  // free, prepared
  for (const auto& [name, group] : group_of_) {
    auto& [free, prepared] = counts[group];
    (held.count(name) > 0 ? prepared : free) += 1;
  }
  for (auto& [g, series] : groups_) {
    series.free->Set(counts[g].first);
    series.prepared->Set(counts[g].second);
  }
}

}  // namespace dralens::exporter
