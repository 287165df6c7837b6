// Analyzer::ShortTogether: the claims of a gang evaluated together.
#include <map>
#include <optional>
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
  // What the allocations and the gang's picks so far leave; a set not published does not block.
  auto fits_counters = [&](const Device& d) {
    return fit::FitCounters(
               d.consumes,
               [&](const std::string& set_key, const std::string& name) -> std::optional<double> {
                 std::optional<double> left = state_.CounterLeft(set_key, name);
                 if (!left.has_value()) {
                   return std::nullopt;
                 }
                 return *left - consumed[set_key][name];
               }) != fit::CounterFit::kExceeds;
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
    for (const auto& [order, device] : keys->second) {
      Device& d = *device;
      if (LeafMatch(leaf, d) != fit::Match::kMatch) {
        continue;
      }
      ++matching;
      if (!leaf.all && static_cast<int64_t>(picks.size()) >= leaf.count) {
        continue;
      }
      if (taken.count(d.key) > 0 || state_.DeviceAllocated(d) || state_.DeviceBlocked(d) ||
          state_.NodeDown(d.node) || !fits_counters(d)) {
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
    const Claim* claim = state_.FindClaim(absl::StrCat(ns, "/", name));
    if (claim == nullptr || claim->allocated) {
      continue;
    }
    for (const std::shared_ptr<Request>& r : claim->requests) {
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
