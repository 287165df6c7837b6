#include "src/sim/workload.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "driver/proto/dra/v1/api.grpc.pb.h"
#include "src/common/log.h"
#include "src/common/status.h"

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
      scheduler_(options_.driver_name, client, clock),
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

absl::Status Workload::Allocate(Tracked& claim, const Scheduler::View& view, absl::Time now) {
  ASSIGN_OR_RETURN(std::optional<Scheduler::Allocation> allocation,
                   scheduler_.Allocate(claim.ns, claim.name, claim.pods, view));
  if (!allocation.has_value()) {
    return absl::OkStatus();  // stays pending; the cluster role says why
  }
  claim.node = allocation->node;
  claim.held = std::move(allocation->held);
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
    // The node plugin clears its status.devices entries after the unprepare above, from its
    // own thread: a conflict with that write reads the claim again instead of failing the step.
    RETURN_IF_ERROR(k8s::UpdateWithRetry(
                        client_, k8s::kResourceClaims, claim.ns, claim.name,
                        [](json& object) {
                          if (auto status = object.find("status");
                              status != object.end() && status->is_object()) {
                            status->erase("reservedFor");
                          }
                          return absl::OkStatus();
                        },
                        /*max_attempts=*/5, "status")
                        .status());
    claim.state = State::kLingering;
    claim.until = now + 2 * options_.mean_pod_duration;
    return absl::OkStatus();
  }
  return DeleteClaim(claim);
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
        scheduler_.Release(claim.held);
        keep = false;
      }
    } else if ((claim.state == State::kLingering || claim.state == State::kPending) &&
               claim.until <= now) {
      for (const std::string& pod : claim.pods) {
        (void)client_.Delete(k8s::kPods, claim.ns, pod, {});
      }
      s = DeleteClaim(claim);
      if (s.ok()) {
        scheduler_.Release(claim.held);
        keep = false;
      }
    }
    if (!s.ok()) {
      {
        absl::MutexLock lock(&stats_mu_);
        ++stats_.finish_errors;
      }
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
  ASSIGN_OR_RETURN(Scheduler::View view, scheduler_.Observe());
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
