#include "src/sim/scheduler.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/fit/device_fit.h"
#include "src/model/codec.h"

namespace dralens::sim {
namespace {

using nlohmann::json;

constexpr char kComponent[] = "workload";

}  // namespace

Scheduler::Scheduler(std::string driver, k8s::KubeClient& client, common::Clock& clock)
    : driver_(std::move(driver)), client_(client), clock_(clock) {}

absl::StatusOr<Scheduler::View> Scheduler::Observe() {
  View view;
  ASSIGN_OR_RETURN(k8s::ListResult slices, client_.List(k8s::kResourceSlices, "", {}));
  for (const json& item : slices.items) {
    absl::StatusOr<model::ResourceSlice> slice = model::Decode<model::ResourceSlice>(item);
    if (!slice.ok() || slice->spec.driver != driver_) {
      continue;
    }
    for (const model::CounterSet& set : slice->spec.shared_counters) {
      for (const auto& [name, counter] : set.counters) {
        view.counter_capacity[absl::StrCat(slice->spec.pool.name, "/", set.name, "/", name)] =
            counter.value;
      }
    }
    view.slices.push_back(*std::move(slice));
  }
  ASSIGN_OR_RETURN(k8s::ListResult classes, client_.List(k8s::kDeviceClasses, "", {}));
  for (const json& item : classes.items) {
    absl::StatusOr<model::DeviceClass> c = model::Decode<model::DeviceClass>(item);
    if (c.ok()) {
      view.classes.emplace(c->metadata.name, *std::move(c));
    }
  }
  return view;
}

cel::Verdict Scheduler::Evaluate(const std::string& expression, const model::SliceDevice& device,
                                 const std::string& driver) {
  std::unique_ptr<cel::Program>& program = programs_[expression];
  if (program == nullptr) {
    absl::StatusOr<cel::Program> compiled = cel::Program::Compile(expression);
    if (!compiled.ok()) {
      DLOG(kWarn, kComponent, "selector does not compile",
           {{"expression", expression}, {"error", compiled.status().message()}});
      programs_.erase(expression);
      return cel::Verdict::kUnknown;
    }
    program = std::make_unique<cel::Program>(*std::move(compiled));
  }
  const cel::DeviceView view{driver, &device.attributes, &device.capacity};
  return program->Evaluate(view).verdict;
}

std::vector<Placement> Scheduler::Fit(const model::ExactDeviceRequest& request, const View& view) {
  std::vector<Placement> out;
  auto device_class = view.classes.find(request.device_class_name);
  if (device_class == view.classes.end()) {
    return out;
  }
  auto expressions = [](const std::vector<model::DeviceSelector>& selectors) {
    std::vector<std::string> out;
    for (const model::DeviceSelector& s : selectors) {
      if (s.cel.has_value()) {
        out.push_back(s.cel->expression);
      }
    }
    return out;
  };
  const std::vector<std::string> class_expressions =
      expressions(device_class->second.spec.selectors);
  const std::vector<std::string> request_expressions = expressions(request.selectors);
  std::map<std::string, common::Quantity> share;
  if (request.capacity.has_value()) {
    share = request.capacity->requests;
  }
  for (const model::ResourceSlice& slice : view.slices) {
    const std::string& pool = slice.spec.pool.name;
    for (const model::SliceDevice& device : slice.spec.devices) {
      const std::string key = absl::StrCat(pool, "/", device.name);
      if (allocated_.count(key) > 0 || !fit::SharingFits(!share.empty(), device)) {
        continue;
      }
      if (!share.empty()) {
        auto used = shares_used_.find(key);
        if (!fit::CapacityFits(device, share,
                               used == shares_used_.end()
                                   ? std::map<std::string, common::Quantity>{}
                                   : used->second)) {
          continue;
        }
      }
      // Counters by the pool's sets; a set the pool does not publish does not fit.
      const fit::CounterFit counters = fit::FitCounters(
          fit::ConsumptionOf(device),
          [&](const std::string& set, const std::string& name) -> std::optional<double> {
            const std::string counter = absl::StrCat(pool, "/", set, "/", name);
            auto capacity = view.counter_capacity.find(counter);
            if (capacity == view.counter_capacity.end()) {
              return std::nullopt;
            }
            auto used = counters_used_.find(counter);
            return capacity->second.AsApproximateDouble() -
                   (used == counters_used_.end() ? 0 : used->second.AsApproximateDouble());
          });
      if (counters != fit::CounterFit::kFits) {
        continue;
      }
      auto all_of = [&](const std::vector<std::string>& list) {
        return fit::AllOf(list.size(),
                          [&](size_t i) { return Evaluate(list[i], device, slice.spec.driver); });
      };
      const fit::Match match = fit::MatchDevice([&] { return all_of(class_expressions); },
                                                [&] { return all_of(request_expressions); },
                                                device.taints, request.tolerations);
      if (match == fit::Match::kMatch) {
        out.push_back(Placement{pool, device.name, device.consumes_counters, share});
      }
    }
  }
  return out;
}

absl::StatusOr<std::optional<Scheduler::Allocation>> Scheduler::Allocate(
    const std::string& ns, const std::string& name, const std::vector<std::string>& pods,
    const View& view) {
  ASSIGN_OR_RETURN(json object, client_.Get(k8s::kResourceClaims, ns, name));
  ASSIGN_OR_RETURN(model::ResourceClaim claim,
                   common::Annotate(model::Decode<model::ResourceClaim>(object),
                                    absl::StrCat("decode claim ", name)));
  if (claim.spec.devices.requests.empty() ||
      !claim.spec.devices.requests.front().exactly.has_value()) {
    return std::nullopt;  // the generator makes one exact request per claim
  }
  const std::string& request_name = claim.spec.devices.requests.front().name;
  const model::ExactDeviceRequest& request = *claim.spec.devices.requests.front().exactly;
  const std::vector<Placement> fits = Fit(request, view);
  if (fits.empty()) {
    return std::nullopt;
  }
  // Topology-unaware (see the file comment): the first pool with enough devices that fit.
  const size_t count = request.count > 0 ? static_cast<size_t>(request.count) : 1;
  std::vector<Placement> picks;
  for (const Placement& candidate : fits) {
    std::vector<const Placement*> same_pool;
    for (const Placement& p : fits) {
      if (p.pool == candidate.pool) {
        same_pool.push_back(&p);
      }
    }
    if (same_pool.size() < count) {
      continue;
    }
    picks.push_back(*same_pool.front());
    for (auto it = same_pool.rbegin(); picks.size() < count; ++it) {
      picks.push_back(**it);
    }
    break;
  }
  if (picks.empty()) {
    return std::nullopt;  // no node has enough
  }
  Allocation allocation;
  // The node of the pool (node-local pools are named after their node).
  allocation.node = picks.front().pool;
  json config = json::array();
  auto device_class = view.classes.find(request.device_class_name);
  if (device_class != view.classes.end()) {
    for (const model::DeviceClassConfiguration& c : device_class->second.spec.config) {
      if (c.opaque.has_value()) {
        config.push_back(
            {{"source", "FromClass"},
             {"requests", json::array({request_name})},
             {"opaque", {{"driver", c.opaque->driver}, {"parameters", c.opaque->parameters}}}});
      }
    }
  }
  for (const json& c : object["spec"]["devices"].value("config", json::array())) {
    json entry = c;
    entry["source"] = "FromClaim";
    config.push_back(entry);
  }
  json results = json::array();
  for (const Placement& held : picks) {
    json result = {{"request", request_name},
                   {"driver", driver_},
                   {"pool", held.pool},
                   {"device", held.device}};
    if (!held.share.empty()) {
      // The scheduler's share ID: a UID unique among the device's allocations.
      result["shareID"] = absl::StrFormat("00000000-0000-4000-8000-%012d", ++shares_);
      json consumed = json::object();
      for (const auto& [capacity, amount] : held.share) {
        consumed[capacity] = amount.String();
      }
      result["consumedCapacity"] = consumed;
    }
    results.push_back(std::move(result));
  }
  json status = {
      {"devices", {{"results", results}}},
      {"nodeSelector",
       {{"nodeSelectorTerms",
         json::array(
             {{{"matchFields", json::array({{{"key", "metadata.name"},
                                             {"operator", "In"},
                                             {"values", json::array({allocation.node})}}})}}})}}}};
  if (!config.empty()) {
    status["devices"]["config"] = config;
  }
  // As kube-scheduler does with DRADeviceBindingConditions: when the allocation was made, which
  // `dralens explain` prices a claim from.
  status["allocationTimestamp"] =
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", clock_.Now(), absl::UTCTimeZone());
  object["status"]["allocation"] = status;
  json reserved = json::array();
  for (const std::string& pod : pods) {
    auto p = client_.Get(k8s::kPods, ns, pod);
    RETURN_IF_ERROR(p.status());
    reserved.push_back({{"resource", "pods"}, {"name", pod}, {"uid", (*p)["metadata"]["uid"]}});
  }
  object["status"]["reservedFor"] = reserved;
  RETURN_IF_ERROR_CTX(client_.Update(k8s::kResourceClaims, ns, object, "status").status(),
                      absl::StrCat("allocate claim ", name));
  for (Placement& held : picks) {
    Book(held, /*take=*/true);
    allocation.held.push_back(std::move(held));
  }
  return allocation;
}

void Scheduler::Release(const std::vector<Placement>& held) {
  for (const Placement& h : held) {
    Book(h, /*take=*/false);
  }
}

void Scheduler::Book(const Placement& held, bool take) {
  auto move = [take](common::Quantity& used, const common::Quantity& amount) {
    (void)(take ? used.Add(amount) : used.Sub(amount));
  };
  const std::string key = absl::StrCat(held.pool, "/", held.device);
  if (!held.share.empty()) {
    for (const auto& [capacity, amount] : held.share) {
      move(shares_used_[key][capacity], amount);
    }
  } else if (take) {
    allocated_.insert(key);
  } else {
    allocated_.erase(key);
  }
  for (const model::DeviceCounterConsumption& c : held.counters) {
    for (const auto& [counter, value] : c.counters) {
      move(counters_used_[absl::StrCat(held.pool, "/", c.counter_set, "/", counter)], value.value);
    }
  }
}

}  // namespace dralens::sim
