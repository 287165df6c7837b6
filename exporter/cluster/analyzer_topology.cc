// Where the devices of multi-device claims landed: dralens_cluster_claim_topology and
// dralens_cluster_claim_spread.
#include <set>
#include <utility>
#include <variant>

#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/analyzer_state.h"

namespace dralens::exporter::cluster {

void Analyzer::RefreshSpread(Claim& claim) {
  std::set<Key> keys;
  for (const auto& [key, cls] : claim.devices) {
    keys.insert(key);
  }
  std::optional<ClaimTopology> topology;
  if (keys.size() >= 2) {
    std::vector<DevicePlace> places;
    bool all_known = true;
    for (const Key& key : keys) {
      const Device* d = state_.FindDevice(key);
      if (d == nullptr) {
        all_known = false;
        places.push_back({});
        continue;
      }
      DevicePlace place;
      place.node = d->node;
      place.pcie_root = d->spec.StringAttribute("pcieRoot");
      if (const std::optional<model::DeviceAttribute> numa = d->spec.Attribute("numaNode");
          numa.has_value() && std::holds_alternative<int64_t>(numa->value)) {
        place.numa_node = std::get<int64_t>(numa->value);
      }
      place.nvlink_domain = d->spec.StringAttribute("nvlinkDomain");
      places.push_back(std::move(place));
    }
    topology = ClaimTopology{.spread = ClassifySpread(places), .nvlink = ClassifyNvlink(places)};
    if (!all_known && claim.spread.has_value() && claim.spread_devices == keys &&
        topology->spread != TopologySpread::kCrossNode) {
      topology = claim.spread;  // a slice of the same devices republished: keep what was known
    }
  }
  claim.spread_devices = std::move(keys);
  if (topology == claim.spread && (topology.has_value() == (claim.spread_series != nullptr))) {
    if (claim.spread_series != nullptr) {
      claim.spread_series->Set(static_cast<double>(claim.spread_devices.size()));
    }
    return;
  }
  if (claim.spread.has_value()) {
    auto c = topology_counts_.find({claim.device_class(), claim.ns(),
                                    std::string(ToString(claim.spread->spread)),
                                    std::string(ToString(claim.spread->nvlink))});
    if (c != topology_counts_.end()) {
      c->second.first->Set(--c->second.second);
    }
  }
  if (claim.spread_series != nullptr) {
    claim_spread_.Remove(claim.spread_series);
    claim.spread_series = nullptr;
  }
  claim.spread = topology;
  if (!topology.has_value()) {
    return;
  }
  const std::string spread(ToString(topology->spread));
  const std::string nvlink(ToString(topology->nvlink));
  auto [it, inserted] = topology_counts_.emplace(
      std::vector<std::string>{claim.device_class(), claim.ns(), spread, nvlink},
      std::make_pair(nullptr, 0));
  if (inserted) {
    it->second.first = &topology_.Add({{"device_class", claim.device_class()},
                                       {"namespace", claim.ns()},
                                       {"spread", spread},
                                       {"nvlink", nvlink}});
  }
  it->second.first->Set(++it->second.second);
  claim.spread_series =
      &claim_spread_.Add({{"namespace", claim.ns()},
                          {"claim", std::string(claim.name)},
                          {"device_class", claim.device_class()},
                          {"spread", spread},
                          {"nvlink", nvlink},
                          {"topology_sensitive",
                           topology_sensitive_.contains(claim.device_class()) ? "true" : "false"}});
  claim.spread_series->Set(static_cast<double>(claim.spread_devices.size()));
}

}  // namespace dralens::exporter::cluster
