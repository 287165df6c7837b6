#include "src/fit/device_fit.h"

#include <algorithm>

namespace dralens::fit {

absl::string_view ToString(Match match) {
  switch (match) {
    case Match::kNoMatch:
      return "no_match";
    case Match::kUnknown:
      return "unknown";
    case Match::kTainted:
      return "tainted";
    case Match::kMatch:
      return "match";
  }
  return "no_match";
}

cel::Verdict AllOf(size_t count, absl::FunctionRef<cel::Verdict(size_t)> evaluate) {
  cel::Verdict result = cel::Verdict::kTrue;
  for (size_t i = 0; i < count; ++i) {
    const cel::Verdict v = evaluate(i);
    if (v == cel::Verdict::kFalse) {
      return v;
    }
    if (v == cel::Verdict::kUnknown) {
      result = v;
    }
  }
  return result;
}

bool Blocking(const model::DeviceTaint& taint) {
  return taint.effect == "NoSchedule" || taint.effect == "NoExecute";
}

bool Tolerates(const model::DeviceToleration& toleration, const model::DeviceTaint& taint) {
  if (!toleration.effect.empty() && toleration.effect != taint.effect) {
    return false;
  }
  if (toleration.op == "Exists") {
    return toleration.key.empty() || toleration.key == taint.key;
  }
  return toleration.key == taint.key && toleration.value == taint.value;
}

const model::DeviceTaint* UntoleratedTaint(
    const std::vector<model::DeviceTaint>& taints,
    const std::vector<model::DeviceToleration>& tolerations) {
  for (const model::DeviceTaint& taint : taints) {
    if (Blocking(taint) &&
        std::none_of(tolerations.begin(), tolerations.end(),
                     [&](const model::DeviceToleration& t) { return Tolerates(t, taint); })) {
      return &taint;
    }
  }
  return nullptr;
}

Match MatchDevice(SelectorsVerdict class_selectors, SelectorsVerdict request_selectors,
                  const std::vector<model::DeviceTaint>& taints,
                  const std::vector<model::DeviceToleration>& tolerations) {
  cel::Verdict v = class_selectors();
  if (v == cel::Verdict::kTrue) {
    v = request_selectors();
  }
  if (v == cel::Verdict::kFalse) {
    return Match::kNoMatch;
  }
  if (v == cel::Verdict::kUnknown) {
    return Match::kUnknown;
  }
  return UntoleratedTaint(taints, tolerations) != nullptr ? Match::kTainted : Match::kMatch;
}

bool WithinCounter(double left, double need) { return !(need > left + kCounterSlack); }

std::vector<CounterConsumption> ConsumptionOf(const model::SliceDevice& device) {
  std::vector<CounterConsumption> out;
  for (const model::DeviceCounterConsumption& c : device.consumes_counters) {
    std::map<std::string, double> counters;
    for (const auto& [name, counter] : c.counters) {
      counters[name] = counter.value.AsApproximateDouble();
    }
    out.emplace_back(c.counter_set, std::move(counters));
  }
  return out;
}

CounterFit FitCounters(const std::vector<CounterConsumption>& consumes, CounterLeft left) {
  bool missing = false;
  for (const auto& [set, counters] : consumes) {
    for (const auto& [name, need] : counters) {
      const std::optional<double> room = left(set, name);
      if (!room.has_value()) {
        missing = true;
        break;  // the whole set is unknown
      }
      if (!WithinCounter(*room, need)) {
        return CounterFit::kExceeds;
      }
    }
  }
  return missing ? CounterFit::kMissingSet : CounterFit::kFits;
}

bool SharingFits(bool share, const model::SliceDevice& device) {
  return device.allow_multiple_allocations.value_or(false) == share;
}

bool CapacityFits(const model::SliceDevice& device,
                  const std::map<std::string, common::Quantity>& requested,
                  const std::map<std::string, common::Quantity>& used) {
  for (const auto& [name, amount] : requested) {
    auto capacity = device.capacity.find(name);
    if (capacity == device.capacity.end()) {
      return false;
    }
    auto u = used.find(name);
    common::Quantity total = u == used.end() ? common::Quantity() : u->second;
    if (!total.Add(amount).ok() || total > capacity->second.value) {
      return false;
    }
  }
  return true;
}

}  // namespace dralens::fit
