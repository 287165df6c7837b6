// The fleet's published devices by class and state (dralens_cluster_pool_devices) and the MIG
// instances each node's free capacity can still take (dralens_cluster_mig_placeable).
#include <algorithm>
#include <utility>

#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/analyzer_state.h"

namespace dralens::exporter::cluster {

void Analyzer::UpdatePoolTotals(const LabelTable<std::array<int, kPoolStates>>& before,
                                const LabelTable<std::array<int, kPoolStates>>& after) {
  LabelTable<bool> touched;
  for (const auto& [labels, counts] : before) {
    PoolTotal& total = pool_totals_[labels];
    for (int s = 0; s < kPoolStates; ++s) {
      total.devices[s] -= counts[s];
    }
    touched[labels] = true;
  }
  for (const auto& [labels, counts] : after) {
    PoolTotal& total = pool_totals_[labels];
    for (int s = 0; s < kPoolStates; ++s) {
      total.devices[s] += counts[s];
    }
    touched[labels] = true;
  }
  // A (driver, class, product) that any node publishes has all three states, zeros included, so
  // that "no free device of this class" reads as 0, not as a missing series; it goes when the
  // last of its devices does. The family holds a few series per class, so removing is cheap.
  for (const auto& [labels, unused] : touched) {
    auto it = pool_totals_.find(labels);
    PoolTotal& total = it->second;
    const bool any =
        std::any_of(total.devices.begin(), total.devices.end(), [](int64_t n) { return n != 0; });
    const std::string& driver = labels_.Value(labels[0]);
    const std::string& device_class = labels_.Value(labels[1]);
    const std::string& product = labels_.Value(labels[2]);
    // The price of a GPU of each (class, product) published, so that rules can price what the
    // node's series count (idle claims) the way stranded cost is priced here.
    if (any && total.gauges[0] == nullptr) {
      const std::pair<std::string, std::string> priced = {device_class, product};
      auto& [gauge, refs] = prices_in_use_[priced];
      if (refs++ == 0) {
        gauge =
            &price_per_gpu_hour_.Add({{"device_class", priced.first}, {"product", priced.second}});
        gauge->Set(prices_.PriceOf(priced.first, priced.second));
      }
    } else if (!any && total.gauges[0] != nullptr) {
      auto price = prices_in_use_.find({device_class, product});
      if (price != prices_in_use_.end() && --price->second.second == 0) {
        price_per_gpu_hour_.Remove(price->second.first);
        prices_in_use_.erase(price);
      }
    }
    for (int s = 0; s < kPoolStates; ++s) {
      if (!any) {
        if (total.gauges[s] != nullptr) {
          pool_devices_.Remove(total.gauges[s]);
        }
        continue;
      }
      if (total.gauges[s] == nullptr) {
        total.gauges[s] =
            &pool_devices_.Add({{"driver", driver},
                                {"device_class", device_class},
                                {"product", product},
                                {"state", std::string(ToString(static_cast<PoolState>(s)))}});
      }
      total.gauges[s]->Set(static_cast<double>(total.devices[s]));
    }
    if (!any) {
      pool_totals_.erase(it);
    }
  }
}

void Analyzer::RecomputePlaceable(const std::string& node, NodeAggregate& agg) {
  std::map<std::vector<std::string>, double> placeable;
  // The node's counter sets, found through its devices: O(devices of the node), not O(sets of
  // the fleet).
  std::set<std::string> set_keys;
  for (const Device* d : state_.DevicesOn(node)) {
    for (const auto& [set_key, counters] : d->consumes) {
      set_keys.insert(set_key);
    }
  }
  for (const std::string& set_key : set_keys) {
    const CounterSet* set = state_.FindCounterSet(set_key);
    if (set == nullptr || set->node != node) {
      continue;
    }
    std::map<std::string, std::vector<Device*>> by_profile;
    for (const Key& key : set->devices) {
      Device& d = *state_.FindDevice(key);
      std::string profile =
          !d.profile().empty() ? d.profile() : (!d.type().empty() ? d.type() : "device");
      auto& list = by_profile[profile];
      if (!d.tainted && ClusterState::HoldersOf(d) == nullptr) {
        list.push_back(&d);
      }
    }
    for (auto& [profile, candidates] : by_profile) {
      std::sort(candidates.begin(), candidates.end(),
                [](const Device* a, const Device* b) { return a->key < b->key; });
      std::map<std::string, double> left = set->capacity;
      for (const auto& [name, used] : set->used) {
        left[name] -= used;
      }
      int fits = 0;
      for (const Device* d : candidates) {
        for (const auto& [consumed_set, counters] : d->consumes) {
          if (consumed_set != set_key) {
            continue;
          }
          bool ok = true;
          for (const auto& [name, need] : counters) {
            ok = ok && fit::WithinCounter(left[name], need);
          }
          if (ok) {
            for (const auto& [name, need] : counters) {
              left[name] -= need;
            }
            ++fits;
          }
        }
      }
      placeable[{set->name, profile}] = fits;
    }
  }
  for (auto it = agg.placeable.begin(); it != agg.placeable.end();) {
    if (placeable.count(it->first) == 0) {
      mig_placeable_.Remove(it->second);
      it = agg.placeable.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [labels, count] : placeable) {
    prometheus::Gauge*& g = agg.placeable[labels];
    if (g == nullptr) {
      g = &mig_placeable_.Add({{"node", node}, {"gpu", labels[0]}, {"profile", labels[1]}});
    }
    g->Set(count);
  }
}

}  // namespace dralens::exporter::cluster
