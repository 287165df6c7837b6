// Analyzer::ShortTogether: the claims of a gang evaluated together.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/analyzer_state.h"

namespace dralens::exporter::cluster {

int64_t Analyzer::ShortTogether(const std::string& ns, const std::vector<std::string>& claims) {
  absl::MutexLock lock(&mu_);
  std::set<Key> taken;
  // Counters the gang's tentative picks consume, per counter set.
  std::map<std::string, std::map<std::string, double>> consumed;
  auto fits_counters = [&](const Device& d) {
    for (const auto& [set_key, need] : d.consumes) {
      auto set = counter_sets_.find(set_key);
      if (set == counter_sets_.end()) {
        continue;
      }
      for (const auto& [name, value] : need) {
        auto cap = set->second->capacity.find(name);
        auto used = set->second->used.find(name);
        const double left = (cap == set->second->capacity.end() ? 0 : cap->second) -
                            (used == set->second->used.end() ? 0 : used->second) -
                            consumed[set_key][name];
        if (value > left + kEpsilon) {
          return false;
        }
      }
    }
    return true;
  };
  // Takes up to `need` devices for `leaf` (all that match for All); returns the shortfall.
  // With `commit` false, only counts.
  auto place = [&](const Request& leaf, bool commit) -> int64_t {
    auto keys = class_devices_.find(leaf.device_class);
    if (classes_.count(leaf.device_class) == 0 || keys == class_devices_.end()) {
      return leaf.all ? 1 : leaf.count;
    }
    std::vector<Device*> picks;
    int64_t matching = 0;
    std::set<Key> local;
    std::map<std::string, std::map<std::string, double>> local_consumed;
    for (const Key& key : keys->second) {
      Device& d = *devices_.at(key);
      if (LeafMatch(leaf, d) != 3) {
        continue;
      }
      ++matching;
      if (!leaf.all && static_cast<int64_t>(picks.size()) >= leaf.count) {
        continue;
      }
      if (taken.count(key) > 0 || DeviceAllocated(d) || DeviceBlocked(d) || NodeDown(d.node) ||
          !fits_counters(d)) {
        continue;
      }
      picks.push_back(&d);
      for (const auto& [set_key, need] : d.consumes) {
        for (const auto& [name, value] : need) {
          consumed[set_key][name] += value;
          local_consumed[set_key][name] += value;
        }
      }
    }
    if (!commit) {
      for (const auto& [set_key, need] : local_consumed) {
        for (const auto& [name, value] : need) {
          consumed[set_key][name] -= value;
        }
      }
    } else {
      for (Device* d : picks) {
        taken.insert(d->key);
      }
    }
    const int64_t need = leaf.all ? std::max<int64_t>(matching, 1) : leaf.count;
    return std::max<int64_t>(0, need - static_cast<int64_t>(picks.size()));
  };
  int64_t short_devices = 0;
  for (const std::string& name : claims) {
    auto it = claims_by_key_.find(absl::StrCat(ns, "/", name));
    if (it == claims_by_key_.end() || it->second->allocated) {
      continue;
    }
    for (const std::shared_ptr<Request>& r : it->second->requests) {
      if (r->alternatives.empty()) {
        short_devices += place(*r, true);
        continue;
      }
      const Request* chosen = nullptr;
      for (const std::shared_ptr<Request>& alt : r->alternatives) {
        if (place(*alt, false) == 0) {
          chosen = alt.get();
          break;
        }
      }
      if (chosen == nullptr && !r->alternatives.empty()) {
        chosen = r->alternatives.front().get();
      }
      if (chosen != nullptr) {
        short_devices += place(*chosen, true);
      }
    }
  }
  return short_devices;
}

}  // namespace dralens::exporter::cluster
