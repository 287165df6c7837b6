#include "src/sim/workload.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "driver/proto/dra/v1/api.grpc.pb.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/model/codec.h"

namespace dralens::sim {
namespace {

using nlohmann::json;
namespace dra = ::k8s::io::kubelet::pkg::apis::dra::v1;

constexpr char kComponent[] = "workload";

struct KindWeight {
  WorkloadKind kind;
  int weight;
};
// A realistic mix: mostly whole GPUs and MIG slices, some sharing, a few hopeless requests.
constexpr KindWeight kMix[] = {
    {WorkloadKind::kFullGpu, 24}, {WorkloadKind::kMig1g, 16},        {WorkloadKind::kMig2g, 10},
    {WorkloadKind::kMig3g, 8},    {WorkloadKind::kTimeSliced, 10},   {WorkloadKind::kMps, 10},
    {WorkloadKind::kShared, 8},   {WorkloadKind::kUnsatisfiable, 4}, {WorkloadKind::kNoPod, 6},
};
// With memory_shares, drawn after the mix above so that the mix keeps its sequence without.
constexpr int kMemoryShareWeight = 16;
constexpr char kShareMemory[] = "10Gi";
constexpr int kTwoGpuWeight = 6;

std::string GpuClass(const std::string& driver) { return driver; }
std::string MigClass(const std::string& driver) {
  return absl::StrCat("mig.", driver.substr(driver.find('.') + 1));
}
std::string SharedClass(const std::string& driver) {
  return absl::StrCat("gpu-shared.", driver.substr(driver.find('.') + 1));
}

json Opaque(const std::string& driver, const json& sharing) {
  return {{"driver", driver},
          {"parameters",
           {{"apiVersion", "resource.dralens.dev/v1beta1"},
            {"kind", "GpuConfig"},
            {"sharing", sharing}}}};
}

json Selector(const std::string& expression) { return {{"cel", {{"expression", expression}}}}; }

std::string TypeIs(const std::string& driver, const std::string& type) {
  return absl::StrCat("device.driver == '", driver, "' && device.attributes['", driver,
                      "'].type == '", type, "'");
}

// The dra.sock client of one node, as the kubelet holds it.
std::unique_ptr<dra::DRAPlugin::Stub> Stub(const std::string& socket) {
  return dra::DRAPlugin::NewStub(
      grpc::CreateChannel(absl::StrCat("unix://", socket), grpc::InsecureChannelCredentials()));
}

std::unique_ptr<grpc::ClientContext> Deadline() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(45));
  return context;
}

// A request for one claim, as the kubelet sends for a pod.
template <typename Request>
Request OneClaim(const std::string& ns, const std::string& name, const std::string& uid) {
  Request request;
  auto* c = request.add_claims();
  c->set_namespace_(ns);
  c->set_name(name);
  c->set_uid(uid);
  return request;
}

// What went wrong for `uid`: the call, a missing answer, or the claim's own error; "" if nothing.
template <typename Response>
std::string ClaimError(const grpc::Status& status, const Response& response,
                       const std::string& uid) {
  if (!status.ok()) {
    return status.error_message();
  }
  auto it = response.claims().find(uid);
  return it == response.claims().end() ? "no answer for the claim" : it->second.error();
}

bool Blocks(const model::DeviceTaint& taint) {
  return taint.effect == "NoSchedule" || taint.effect == "NoExecute";
}

}  // namespace

absl::string_view ToString(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kFullGpu:
      return "gpu";
    case WorkloadKind::kMig1g:
      return "mig-1g";
    case WorkloadKind::kMig2g:
      return "mig-2g";
    case WorkloadKind::kMig3g:
      return "mig-3g";
    case WorkloadKind::kTimeSliced:
      return "time-sliced";
    case WorkloadKind::kMps:
      return "mps";
    case WorkloadKind::kShared:
      return "shared";
    case WorkloadKind::kUnsatisfiable:
      return "huge";
    case WorkloadKind::kNoPod:
      return "early";
    case WorkloadKind::kMemoryShare:
      return "share";
    case WorkloadKind::kTwoGpu:
      return "two-gpu";
  }
  return "gpu";
}

std::vector<json> WorkloadDeviceClasses(const std::string& driver) {
  auto device_class = [](const std::string& name, const std::string& expression) {
    return json{{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "DeviceClass"},
                {"metadata", {{"name", name}}},
                {"spec", {{"selectors", json::array({Selector(expression)})}}}};
  };
  json shared = device_class(SharedClass(driver), TypeIs(driver, "gpu"));
  shared["spec"]["config"] = json::array(
      {{{"opaque", Opaque(driver, {{"strategy", "TimeSlicing"},
                                   {"timeSlicingConfig", {{"interval", "Medium"}}}})}}});
  return {device_class(GpuClass(driver), TypeIs(driver, "gpu")),
          device_class(MigClass(driver), TypeIs(driver, "mig")), shared};
}

Workload::Workload(WorkloadOptions options, k8s::KubeClient& client, common::Clock& clock)
    : options_(std::move(options)),
      client_(client),
      clock_(clock),
      kind_rng_(options_.seed),
      run_rng_(options_.seed ^ 0x9e3779b97f4a7c15ULL),
      load_rng_(options_.seed ^ 0xc2b2ae3d27d4eb4fULL) {}

Workload::~Workload() { Stop(); }

absl::Status Workload::Setup() {
  std::vector<std::string> namespaces = options_.team_namespaces;
  if (namespaces.empty()) {
    namespaces.push_back(options_.namespace_name);
  }
  for (const std::string& ns : namespaces) {
    auto created =
        client_.Create(k8s::kNamespaces, "",
                       {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
    if (!created.ok() && !k8s::IsAlreadyExists(created.status())) {
      return common::Annotate(created.status(), absl::StrCat("create the namespace ", ns));
    }
  }
  for (const json& device_class : WorkloadDeviceClasses(options_.driver_name)) {
    auto made = client_.Create(k8s::kDeviceClasses, "", device_class);
    if (!made.ok() && !k8s::IsAlreadyExists(made.status())) {
      return common::Annotate(
          made.status(),
          absl::StrCat("create DeviceClass ", device_class["metadata"]["name"].get<std::string>()));
    }
  }
  return absl::OkStatus();
}

void Workload::Start() {
  if (thread_ != nullptr) {
    return;
  }
  thread_ = std::make_unique<std::thread>([this] {
    while (!stop_.WaitForNotificationWithTimeout(options_.claim_interval)) {
      absl::Status s = Step();
      if (!s.ok()) {
        DLOG(kWarn, kComponent, "workload step failed", {{"error", s.message()}});
      }
    }
  });
}

void Workload::Stop() {
  if (!stop_.HasBeenNotified()) {
    stop_.Notify();
  }
  if (thread_ != nullptr && thread_->joinable()) {
    thread_->join();
  }
}

Workload::Stats Workload::stats() const {
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

WorkloadKind Workload::PickKind() {
  int total = 0;
  for (const KindWeight& k : kMix) {
    total += k.weight;
  }
  if (options_.memory_shares) {
    total += kMemoryShareWeight;
  }
  if (options_.two_gpu_claims) {
    total += kTwoGpuWeight;
  }
  int pick = std::uniform_int_distribution<int>(0, total - 1)(kind_rng_);
  for (const KindWeight& k : kMix) {
    if (pick < k.weight) {
      return k.kind;
    }
    pick -= k.weight;
  }
  if (options_.memory_shares) {
    if (pick < kMemoryShareWeight) {
      return WorkloadKind::kMemoryShare;
    }
    pick -= kMemoryShareWeight;
  }
  return options_.two_gpu_claims ? WorkloadKind::kTwoGpu : WorkloadKind::kFullGpu;
}

absl::Status Workload::CreateClaim(absl::Time now) {
  const std::string& driver = options_.driver_name;
  Tracked t;
  // With two_gpu_claims the first claim is a two-GPU job, placed while GPUs are still free.
  t.kind = options_.two_gpu_claims && serial_ == 0 ? WorkloadKind::kTwoGpu : PickKind();
  t.name = absl::StrCat(ToString(t.kind), "-", ++serial_);
  t.ns = options_.team_namespaces.empty()
             ? options_.namespace_name
             : options_
                   .team_namespaces[static_cast<size_t>(serial_) % options_.team_namespaces.size()];
  t.created = now;
  json request = {{"name", "gpu"}, {"exactly", {{"deviceClassName", GpuClass(driver)}}}};
  json config = json::array();
  auto profile = [&](const char* name) {
    request["exactly"]["deviceClassName"] = MigClass(driver);
    request["exactly"]["selectors"] = json::array(
        {Selector(absl::StrCat("device.attributes['", driver, "'].profile == '", name, "'"))});
  };
  switch (t.kind) {
    case WorkloadKind::kFullGpu:
    case WorkloadKind::kNoPod:
      break;
    case WorkloadKind::kTwoGpu:
      request["exactly"]["count"] = 2;
      break;
    case WorkloadKind::kMig1g:
      profile("1g.10gb");
      break;
    case WorkloadKind::kMig2g:
      profile("2g.20gb");
      break;
    case WorkloadKind::kMig3g:
      profile("3g.40gb");
      break;
    case WorkloadKind::kTimeSliced:
      request["exactly"]["deviceClassName"] = SharedClass(driver);
      break;
    case WorkloadKind::kMps:
      config.push_back(
          {{"requests", json::array({"gpu"})},
           {"opaque", Opaque(driver, {{"strategy", "MPS"},
                                      {"mpsConfig",
                                       {{"defaultActiveThreadPercentage", 50},
                                        {"defaultPinnedDeviceMemoryLimit", "10Gi"}}}})}});
      break;
    case WorkloadKind::kShared:
      config.push_back(
          {{"requests", json::array({"gpu"})},
           {"opaque", Opaque(driver, {{"strategy", "TimeSlicing"},
                                      {"timeSlicingConfig", {{"interval", "Short"}}}})}});
      break;
    case WorkloadKind::kMemoryShare:
      request["exactly"]["capacity"] = {{"requests", {{"memory", kShareMemory}}}};
      break;
    case WorkloadKind::kUnsatisfiable:
      request["exactly"]["selectors"] = json::array({Selector(absl::StrCat(
          "device.capacity['", driver, "'].memory.compareTo(quantity('640Gi')) >= 0"))});
      break;
  }
  json claim = {{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceClaim"},
                {"metadata",
                 {{"name", t.name},
                  {"namespace", t.ns},
                  {"labels", {{"dralens.dev/workload", std::string(ToString(t.kind))}}}}},
                {"spec", {{"devices", {{"requests", json::array({request})}}}}}};
  if (!config.empty()) {
    claim["spec"]["devices"]["config"] = config;
  }
  ASSIGN_OR_RETURN(json created, common::Annotate(client_.Create(k8s::kResourceClaims, t.ns, claim),
                                                  absl::StrCat("create claim ", t.name)));
  t.uid = created["metadata"]["uid"].get<std::string>();

  const int pods = t.kind == WorkloadKind::kNoPod ? 0 : t.kind == WorkloadKind::kShared ? 2 : 1;
  for (int i = 0; i < pods; ++i) {
    const std::string pod = absl::StrCat(t.name, "-", i);
    json object = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", pod}, {"namespace", t.ns}}},
        {"spec",
         {{"containers",
           json::array({{{"name", "main"},
                         {"image", "registry.example/cuda-job:1"},
                         {"resources", {{"claims", json::array({{{"name", "gpu"}}})}}}}})},
          {"resourceClaims", json::array({{{"name", "gpu"}, {"resourceClaimName", t.name}}})}}},
        {"status", {{"phase", "Pending"}}}};
    RETURN_IF_ERROR_CTX(client_.Create(k8s::kPods, t.ns, object).status(),
                        absl::StrCat("create pod ", pod));
    t.pods.push_back(pod);
  }
  // A claim nothing can use is given up after a while, as a user would.
  t.until = now + 5 * options_.mean_pod_duration;
  claims_.push_back(std::move(t));
  absl::MutexLock lock(&stats_mu_);
  ++stats_.created;
  return absl::OkStatus();
}

absl::StatusOr<Workload::View> Workload::Observe() {
  View view;
  ASSIGN_OR_RETURN(k8s::ListResult slices, client_.List(k8s::kResourceSlices, "", {}));
  for (const json& item : slices.items) {
    absl::StatusOr<model::ResourceSlice> slice = model::Decode<model::ResourceSlice>(item);
    if (!slice.ok() || slice->spec.driver != options_.driver_name) {
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

bool Workload::Matches(const std::string& expression, const model::SliceDevice& device,
                       const std::string& driver) {
  std::unique_ptr<cel::Program>& program = programs_[expression];
  if (program == nullptr) {
    absl::StatusOr<cel::Program> compiled = cel::Program::Compile(expression);
    if (!compiled.ok()) {
      DLOG(kWarn, kComponent, "selector does not compile",
           {{"expression", expression}, {"error", compiled.status().message()}});
      programs_.erase(expression);
      return false;
    }
    program = std::make_unique<cel::Program>(*std::move(compiled));
  }
  const cel::DeviceView view{driver, &device.attributes, &device.capacity};
  return program->Evaluate(view).verdict == cel::Verdict::kTrue;
}

std::vector<Workload::Held> Workload::Fit(const json& request, const View& view) {
  std::vector<Held> out;
  const json& exactly = request["exactly"];
  auto device_class = view.classes.find(exactly["deviceClassName"].get<std::string>());
  if (device_class == view.classes.end()) {
    return out;
  }
  std::vector<std::string> expressions;
  for (const model::DeviceSelector& s : device_class->second.spec.selectors) {
    if (s.cel.has_value()) {
      expressions.push_back(s.cel->expression);
    }
  }
  for (const json& s : exactly.value("selectors", json::array())) {
    expressions.push_back(s["cel"]["expression"].get<std::string>());
  }
  // A share of consumable capacity goes only to devices that allow several allocations, and
  // nothing else goes there.
  std::optional<common::Quantity> share;
  if (const json wanted = exactly.value("capacity", json::object())
                              .value("requests", json::object())
                              .value("memory", json());
      wanted.is_string()) {
    absl::StatusOr<common::Quantity> q = common::Quantity::Parse(wanted.get<std::string>());
    if (!q.ok()) {
      return out;
    }
    share = *q;
  }
  for (const model::ResourceSlice& slice : view.slices) {
    const std::string& pool = slice.spec.pool.name;
    for (const model::SliceDevice& device : slice.spec.devices) {
      if (allocated_.count(absl::StrCat(pool, "/", device.name)) > 0 ||
          std::any_of(device.taints.begin(), device.taints.end(), Blocks) ||
          device.allow_multiple_allocations.value_or(false) != share.has_value()) {
        continue;
      }
      if (share.has_value()) {
        auto capacity = device.capacity.find("memory");
        auto used = memory_used_.find(absl::StrCat(pool, "/", device.name));
        common::Quantity total = used == memory_used_.end() ? common::Quantity() : used->second;
        if (capacity == device.capacity.end() || !total.Add(*share).ok() ||
            total > capacity->second.value) {
          continue;
        }
      }
      bool fits = true;
      for (const model::DeviceCounterConsumption& c : device.consumes_counters) {
        for (const auto& [name, counter] : c.counters) {
          const std::string key = absl::StrCat(pool, "/", c.counter_set, "/", name);
          auto capacity = view.counter_capacity.find(key);
          common::Quantity used =
              counters_used_.count(key) ? counters_used_[key] : common::Quantity();
          fits = fits && capacity != view.counter_capacity.end() && used.Add(counter.value).ok() &&
                 !(used > capacity->second);
        }
      }
      for (const std::string& e : expressions) {
        fits = fits && Matches(e, device, slice.spec.driver);
      }
      if (fits) {
        out.push_back(Held{pool, device.name, device.consumes_counters, share});
      }
    }
  }
  return out;
}

absl::Status Workload::Allocate(Tracked& claim, const View& view, absl::Time now) {
  ASSIGN_OR_RETURN(json object, client_.Get(k8s::kResourceClaims, claim.ns, claim.name));
  const json& request = object["spec"]["devices"]["requests"][0];
  const std::vector<Held> fits = Fit(request, view);
  if (fits.empty()) {
    return absl::OkStatus();  // stays pending; the cluster role says why
  }
  // A stand-in that knows nothing of topology: a multi-device request goes to the first node
  // with enough free devices, and takes that node's first one and the rest from the far end
  // of its list, as an unconstrained request may get them from a real scheduler (on a
  // two-socket node, across NUMA nodes).
  const size_t count = request["exactly"].value("count", 1);
  std::vector<Held> picks;
  for (const Held& candidate : fits) {
    std::vector<const Held*> same_pool;
    for (const Held& h : fits) {
      if (h.pool == candidate.pool) {
        same_pool.push_back(&h);
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
    return absl::OkStatus();  // no node has enough: stays pending
  }
  // The node of the pool (node-local pools are named after their node).
  claim.node = picks.front().pool;
  json config = json::array();
  auto device_class = view.classes.find(request["exactly"]["deviceClassName"].get<std::string>());
  if (device_class != view.classes.end()) {
    for (const model::DeviceClassConfiguration& c : device_class->second.spec.config) {
      if (c.opaque.has_value()) {
        config.push_back(
            {{"source", "FromClass"},
             {"requests", json::array({"gpu"})},
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
  for (const Held& held : picks) {
    json result = {{"request", "gpu"},
                   {"driver", options_.driver_name},
                   {"pool", held.pool},
                   {"device", held.device}};
    if (held.memory.has_value()) {
      // The scheduler's share ID: a UID unique among the device's allocations.
      result["shareID"] = absl::StrFormat("00000000-0000-4000-8000-%012d", ++shares_);
      result["consumedCapacity"] = {{"memory", held.memory->String()}};
    }
    results.push_back(std::move(result));
  }
  json allocation = {
      {"devices", {{"results", results}}},
      {"nodeSelector",
       {{"nodeSelectorTerms",
         json::array(
             {{{"matchFields", json::array({{{"key", "metadata.name"},
                                             {"operator", "In"},
                                             {"values", json::array({claim.node})}}})}}})}}}};
  if (!config.empty()) {
    allocation["devices"]["config"] = config;
  }
  // As kube-scheduler does with DRADeviceBindingConditions: when the allocation was made, which
  // `dralens explain` prices a claim from.
  allocation["allocationTimestamp"] =
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", clock_.Now(), absl::UTCTimeZone());
  object["status"]["allocation"] = allocation;
  json reserved = json::array();
  for (const std::string& pod : claim.pods) {
    auto p = client_.Get(k8s::kPods, claim.ns, pod);
    RETURN_IF_ERROR(p.status());
    reserved.push_back({{"resource", "pods"}, {"name", pod}, {"uid", (*p)["metadata"]["uid"]}});
  }
  object["status"]["reservedFor"] = reserved;
  RETURN_IF_ERROR_CTX(client_.Update(k8s::kResourceClaims, claim.ns, object, "status").status(),
                      absl::StrCat("allocate claim ", claim.name));
  for (Held& held : picks) {
    if (held.memory.has_value()) {
      (void)memory_used_[absl::StrCat(held.pool, "/", held.device)].Add(*held.memory);
    } else {
      allocated_.insert(absl::StrCat(held.pool, "/", held.device));
    }
    for (const model::DeviceCounterConsumption& c : held.counters) {
      for (const auto& [name, counter] : c.counters) {
        common::Quantity& used =
            counters_used_[absl::StrCat(held.pool, "/", c.counter_set, "/", name)];
        (void)used.Add(counter.value);
      }
    }
    claim.held.push_back(std::move(held));
  }
  claim.state = State::kAllocated;
  {
    absl::MutexLock lock(&stats_mu_);
    ++stats_.allocated;
  }
  for (const std::string& pod : claim.pods) {
    RETURN_IF_ERROR(SetPodPhase(claim.ns, pod, "Pending", claim.node));  // bound to the node
  }
  return Prepare(claim, now);
}

absl::Status Workload::Prepare(Tracked& claim, absl::Time now) {
  auto socket = options_.plugin_sockets.find(claim.node);
  if (socket == options_.plugin_sockets.end()) {
    return absl::NotFoundError(absl::StrCat("no kubelet plugin for node ", claim.node));
  }
  // The kubelet prepares a claim for every pod that starts with it; the second pod of a shared
  // claim gets the prepared answer again.
  for (const std::string& pod : claim.pods) {
    const auto request =
        OneClaim<dra::NodePrepareResourcesRequest>(claim.ns, claim.name, claim.uid);
    dra::NodePrepareResourcesResponse response;
    grpc::Status s =
        Stub(socket->second)->NodePrepareResources(Deadline().get(), request, &response);
    const std::string error = ClaimError(s, response, claim.uid);
    absl::MutexLock lock(&stats_mu_);
    if (!error.empty()) {
      ++stats_.prepare_errors;
      DLOG(kWarn, kComponent, "prepare failed; retrying next step",
           {{"claim", claim.name}, {"pod", pod}, {"error", error}});
      return absl::OkStatus();
    }
    ++stats_.prepared;
    const bool mig = claim.kind == WorkloadKind::kMig1g || claim.kind == WorkloadKind::kMig2g ||
                     claim.kind == WorkloadKind::kMig3g;
    stats_.prepared_mig += mig ? 1 : 0;
    stats_.prepared_share += claim.kind == WorkloadKind::kMemoryShare ? 1 : 0;
  }
  for (const std::string& pod : claim.pods) {
    RETURN_IF_ERROR(SetPodPhase(claim.ns, pod, "Running", claim.node));
  }
  claim.state = State::kRunning;
  if (options_.pod_load) {
    std::uniform_real_distribution<double> unit(0, 1);
    const bool idle = unit(load_rng_) < 0.25;
    const double load = idle ? 0.03 * unit(load_rng_) : 0.35 + 0.6 * unit(load_rng_);
    options_.pod_load(claim.node, claim.uid, load);
  }
  const double mean = absl::ToDoubleSeconds(options_.mean_pod_duration);
  claim.until = now + absl::Seconds(std::exponential_distribution<double>(1.0 / mean)(run_rng_));
  return absl::OkStatus();
}

absl::Status Workload::Finish(Tracked& claim, absl::Time now) {
  if (options_.pod_load && claim.state == State::kRunning) {
    options_.pod_load(claim.node, claim.uid, std::nullopt);  // the pods stop first
  }
  auto socket = options_.plugin_sockets.find(claim.node);
  if (socket != options_.plugin_sockets.end()) {
    const auto request =
        OneClaim<dra::NodeUnprepareResourcesRequest>(claim.ns, claim.name, claim.uid);
    dra::NodeUnprepareResourcesResponse response;
    grpc::Status s =
        Stub(socket->second)->NodeUnprepareResources(Deadline().get(), request, &response);
    if (const std::string error = ClaimError(s, response, claim.uid); !error.empty()) {
      {
        absl::MutexLock lock(&stats_mu_);
        ++stats_.unprepare_errors;
      }
      return absl::UnavailableError(absl::StrCat("unprepare ", claim.name, ": ", error));
    }
    absl::MutexLock lock(&stats_mu_);
    ++stats_.unprepared;
  }
  for (const std::string& pod : claim.pods) {
    absl::Status deleted = client_.Delete(k8s::kPods, claim.ns, pod, {});
    if (!deleted.ok() && !k8s::IsNotFound(deleted)) {
      return deleted;
    }
  }
  claim.pods.clear();
  // Some jobs leave their claim allocated after the pod is gone: stranded capacity until
  // someone deletes it.
  if (std::uniform_real_distribution<double>(0, 1)(run_rng_) < 0.2) {
    ASSIGN_OR_RETURN(json object, client_.Get(k8s::kResourceClaims, claim.ns, claim.name));
    object["status"].erase("reservedFor");
    RETURN_IF_ERROR(client_.Update(k8s::kResourceClaims, claim.ns, object, "status").status());
    claim.state = State::kLingering;
    claim.until = now + 2 * options_.mean_pod_duration;
    return absl::OkStatus();
  }
  return DeleteClaim(claim);
}

void Workload::Release(const Tracked& claim) {
  for (const Held& h : claim.held) {
    if (h.memory.has_value()) {
      (void)memory_used_[absl::StrCat(h.pool, "/", h.device)].Sub(*h.memory);
    } else {
      allocated_.erase(absl::StrCat(h.pool, "/", h.device));
    }
    for (const model::DeviceCounterConsumption& c : h.counters) {
      for (const auto& [name, counter] : c.counters) {
        common::Quantity& used =
            counters_used_[absl::StrCat(h.pool, "/", c.counter_set, "/", name)];
        (void)used.Sub(counter.value);
      }
    }
  }
}

absl::Status Workload::DeleteClaim(const Tracked& claim) {
  absl::Status deleted = client_.Delete(k8s::kResourceClaims, claim.ns, claim.name, {});
  if (!deleted.ok() && !k8s::IsNotFound(deleted)) {
    return deleted;
  }
  absl::MutexLock lock(&stats_mu_);
  ++stats_.deleted;
  return absl::OkStatus();
}

absl::Status Workload::SetPodPhase(const std::string& ns, const std::string& pod,
                                   const std::string& phase, const std::string& node) {
  ASSIGN_OR_RETURN(json object, client_.Get(k8s::kPods, ns, pod));
  // Binding: the scheduler stand-in sets spec.nodeName directly (the embedded API server has
  // no binding subresource).
  if (!node.empty() && object["spec"].value("nodeName", "") != node) {
    object["spec"]["nodeName"] = node;
    ASSIGN_OR_RETURN(object, client_.Update(k8s::kPods, ns, object, ""));
  }
  object["status"]["phase"] = phase;
  return client_.Update(k8s::kPods, ns, object, "status").status();
}

absl::Status Workload::Step() {
  const absl::Time now = clock_.Now();
  // 1. Runs that are over, lingering claims that are given up, hopeless waits.
  std::vector<Tracked> alive;
  for (Tracked& claim : claims_) {
    absl::Status s;
    bool keep = true;
    if (claim.state == State::kRunning && claim.until <= now) {
      s = Finish(claim, now);
      if (s.ok() && claim.state == State::kRunning) {
        Release(claim);
        keep = false;
      }
    } else if ((claim.state == State::kLingering || claim.state == State::kPending) &&
               claim.until <= now) {
      for (const std::string& pod : claim.pods) {
        (void)client_.Delete(k8s::kPods, claim.ns, pod, {});
      }
      s = DeleteClaim(claim);
      if (s.ok()) {
        Release(claim);
        keep = false;
      }
    }
    if (!s.ok()) {
      DLOG(kWarn, kComponent, "finishing a claim failed; retrying next step",
           {{"claim", claim.name}, {"error", s.message()}});
    }
    if (keep) {
      alive.push_back(std::move(claim));
    }
  }
  claims_ = std::move(alive);

  // 2. A new claim.
  if (static_cast<int>(claims_.size()) < options_.max_claims) {
    absl::Status s = CreateClaim(now);
    if (!s.ok()) {
      DLOG(kWarn, kComponent, "creating a claim failed", {{"error", s.message()}});
    }
  }

  // 3. Schedule and start what can run.
  ASSIGN_OR_RETURN(View view, Observe());
  for (Tracked& claim : claims_) {
    absl::Status s;
    if (claim.state == State::kPending && !claim.pods.empty()) {
      s = Allocate(claim, view, now);
    } else if (claim.state == State::kAllocated) {
      s = Prepare(claim, now);
    }
    if (!s.ok()) {
      DLOG(kWarn, kComponent, "scheduling a claim failed",
           {{"claim", claim.name}, {"error", s.message()}});
    }
  }

  Stats counts;
  for (const Tracked& claim : claims_) {
    counts.pending += claim.state == State::kPending ? 1 : 0;
    counts.running += claim.state == State::kRunning ? 1 : 0;
    counts.lingering += claim.state == State::kLingering ? 1 : 0;
  }
  absl::MutexLock lock(&stats_mu_);
  stats_.pending = counts.pending;
  stats_.running = counts.running;
  stats_.lingering = counts.lingering;
  return absl::OkStatus();
}

}  // namespace dralens::sim
