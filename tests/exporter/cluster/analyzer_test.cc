// The analyzer on a scripted scenario in the embedded API server: every pending reason and
// every stranded kind, with the values worked out by hand below.
#include "exporter/cluster/analyzer.h"

#include <functional>
#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "driver/prepare/prepare_telemetry.h"
#include "exporter/cluster/feed.h"
#include "exporter/cluster/pricing.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "src/k8s/informer.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "src/telemetry/exemplar.h"
#include "src/telemetry/tracing/in_memory_span_exporter.h"
#include "src/telemetry/tracing/simple_span_processor.h"
#include "src/telemetry/tracing/tracer_provider.h"
#include "tests/exporter/cluster/scenario_util.h"

namespace dralens::exporter::cluster {
namespace {

using testing::Claim;
using testing::Class;
using testing::DeviceSpec;
using testing::Node;
using testing::Slice;
using testing::Value;

// Waits (real time, generous) until `done` holds; the informers deliver asynchronously.
bool Eventually(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    if (done()) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return done();
}

class ScenarioTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sim::ApiServerOptions options;
    options.clock = &clock_;
    server_ = std::make_unique<sim::ApiServer>(options);
    ASSERT_TRUE(server_->Start().ok());
    k8s::RestConfig config;
    config.server = server_->url();
    auto client = k8s::RestClient::FromConfig(config);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);

    auto exporter = std::make_unique<telemetry::InMemorySpanExporter>();
    spans_ = exporter->storage();
    telemetry::SamplerConfig sampler;
    tracing_ =
        telemetry::TracerProvider::CreateWithExporter(std::move(exporter), sampler, {}, clock_);
    auto prices = PriceTable::Parse(
        R"({"default": 1.0, "deviceClasses": {"gpu": 3.6}, "products": {"A100": 7.2}})", 0);
    ASSERT_TRUE(prices.ok()) << prices.status();
    AnalyzerOptions analyzer_options;
    analyzer_options.prices = *prices;
    analyzer_options.clock = &clock_;
    analyzer_ = std::make_unique<Analyzer>(registry_, tracing_->tracer(), analyzer_options);
  }

  void TearDown() override {
    for (auto& informer : informers_) {
      informer->Stop();
    }
    analyzer_.reset();
    if (tracing_ != nullptr) {
      tracing_->Shutdown(absl::Now() + absl::Seconds(5));
    }
  }

  void StartInformers() {
    for (const k8s::ResourceType* type : {&k8s::kDeviceClasses, &k8s::kNodes, &k8s::kResourceSlices,
                                          &k8s::kPods, &k8s::kResourceClaims}) {
      informers_.push_back(std::make_unique<k8s::Informer>(*client_, *type));
      informers_.back()->SetHandlers(HandlersFor(*type, *analyzer_));
      informers_.back()->Start();
      ASSERT_TRUE(informers_.back()->WaitForSync(absl::Seconds(20)));
    }
    analyzer_->SetNodesSynced();
  }

  nlohmann::json Create(const k8s::ResourceType& type, const std::string& ns,
                        const nlohmann::json& object) {
    auto created = client_->Create(type, ns, object);
    EXPECT_TRUE(created.ok()) << created.status() << " " << object.dump();
    return created.ok() ? *created : nlohmann::json();
  }

  // Allocates `device` of `pool` to the claim and reserves it for `pod` (unless empty).
  void Allocate(nlohmann::json claim, const std::string& pool, const std::string& device,
                const std::string& pod = "", const std::string& pod_uid = "") {
    claim["status"]["allocation"]["devices"]["results"] = nlohmann::json::array(
        {{{"request", "req"}, {"driver", testing::kDriver}, {"pool", pool}, {"device", device}}});
    if (!pod.empty()) {
      claim["status"]["reservedFor"] =
          nlohmann::json::array({{{"resource", "pods"}, {"name", pod}, {"uid", pod_uid}}});
    }
    auto updated = client_->Update(k8s::kResourceClaims, "team", claim, "status");
    ASSERT_TRUE(updated.ok()) << updated.status();
  }

  std::string Pod(const std::string& name, const std::string& phase) {
    nlohmann::json pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"namespace", "team"}, {"name", name}}},
        {"spec", {{"containers", nlohmann::json::array({{{"name", "c"}, {"image", "x"}}})}}}};
    nlohmann::json created = Create(k8s::kPods, "team", pod);
    auto patched =
        client_->MergePatch(k8s::kPods, "team", name, {{"status", {{"phase", phase}}}}, "status");
    EXPECT_TRUE(patched.ok()) << patched.status();
    return created["metadata"].value("uid", std::string());
  }

  double Get(const std::string& family, const std::map<std::string, std::string>& labels) {
    if (family == "dralens_cluster_pending_claim_age_seconds") {
      return Value(*analyzer_->ObjectSeriesCollectable(), family, labels);
    }
    return Value(testing::Exported(registry_, *analyzer_), family, labels);
  }

  common::FakeClock clock_;
  std::unique_ptr<sim::ApiServer> server_;
  std::unique_ptr<k8s::RestClient> client_;
  std::shared_ptr<telemetry::InMemorySpanExporter::Storage> spans_;
  std::unique_ptr<telemetry::TracerProvider> tracing_;
  prometheus::Registry registry_;
  std::unique_ptr<Analyzer> analyzer_;
  std::vector<std::unique_ptr<k8s::Informer>> informers_;
};

// The cluster of the scenario:
//   node-a (Ready):    gpu-0 H100 (allocated to `running`, its pod Running), gpu-1 H100 tainted
//                      NoSchedule, gpu-2 H100 free;
//   node-b (Ready):    one partitionable A100 with 7 memory slices: gpu-0 (7 slices), mig-3g-0
//                      and mig-3g-1 (3 each, profile 3g), mig-1g-0 (1, profile 1g); mig-3g-0 is
//                      allocated to `idle`, whose pod is not running;
//   node-c (NotReady): gpu-0 A100, free.
// Classes: gpu (type gpu), mig (type mig), odd (uses `matches`, outside the CEL subset).
// Two publishers of one pool (a second node process started with the same NODE_NAME): the
// other one's slice takes over a device name that consumes a counter set, then goes. The
// counter set must not keep the device that went as a consumer (the cluster role aborted on
// it, in RecomputePlaceable, when the node had only one of them).
TEST_F(ScenarioTest, ADeviceNameTakenOverByAnotherSliceLeavesNoConsumerBehind) {
  Create(k8s::kDeviceClasses, "",
         Class("mig", "device.attributes['gpu.dralens.dev'].type == 'mig'"));
  Create(k8s::kNodes, "", Node("node-b", true));
  Create(k8s::kResourceSlices, "",
         Slice("node-b",
               {{"gpu-0", "gpu", "A100", "GPU-b0", "", "gpu-0-slices", 7, false},
                {"mig-1g-0", "mig", "A100", "MIG-b0", "1g", "gpu-0-slices", 1, false}},
               {{"gpu-0-slices", 7}}));
  StartInformers();
  const std::map<std::string, std::string> one_g = {
      {"node", "node-b"}, {"gpu", "gpu-0-slices"}, {"profile", "1g"}};
  ASSERT_TRUE(Eventually([&] { return Get("dralens_cluster_mig_placeable", one_g) > 0; }));
  const double placeable = Get("dralens_cluster_mig_placeable", one_g);

  nlohmann::json intruder = Slice("node-b", {{"gpu-0", "gpu", "A100", "GPU-x0", "", "", 0, false}});
  intruder["metadata"]["name"] = "node-b-intruder";
  Create(k8s::kResourceSlices, "", intruder);
  ASSERT_TRUE(client_->Delete(k8s::kResourceSlices, "", "node-b-intruder", {}).ok());
  // The analyzer survived it, and the MIG placement is still placeable as before.
  ASSERT_TRUE(Eventually([&] {
    return Get("dralens_cluster_gpus", {{"node", "node-b"}, {"state", "free"}}) == 1 &&
           Get("dralens_cluster_mig_placeable", one_g) == placeable;
  })) << Get("dralens_cluster_gpus", {{"node", "node-b"}, {"state", "free"}})
      << " " << Get("dralens_cluster_mig_placeable", one_g) << " (was " << placeable << ")";
}

// The fleet-wide pool series of a (class, product) live while some node publishes such a device:
// a second node's H100s add to the first's, and when the last H100 slice goes, so do the series.
TEST_F(ScenarioTest, PoolDevicesAddUpAcrossNodesAndGoWithTheLastDevice) {
  Create(k8s::kDeviceClasses, "",
         Class("gpu", "device.attributes['gpu.dralens.dev'].type == 'gpu'"));
  Create(k8s::kNodes, "", Node("node-a", true));
  Create(k8s::kNodes, "", Node("node-b", true));
  Create(k8s::kResourceSlices, "",
         Slice("node-a", {{"gpu-0", "gpu", "H100", "GPU-a0", "", "", 0, false},
                          {"gpu-1", "gpu", "H100", "GPU-a1", "", "", 0, /*tainted=*/true}}));
  Create(k8s::kResourceSlices, "",
         Slice("node-b", {{"gpu-0", "gpu", "H100", "GPU-b0", "", "", 0, false},
                          {"gpu-1", "gpu", "A100", "GPU-b1", "", "", 0, false}}));
  StartInformers();
  auto pool = [&](const std::string& product, const std::string& state) {
    return Get("dralens_cluster_pool_devices", {{"driver", testing::kDriver},
                                                {"device_class", "gpu"},
                                                {"product", product},
                                                {"state", state}});
  };
  auto price = [&](const std::string& product) {
    return Get("dralens_cluster_price_per_gpu_hour",
               {{"device_class", "gpu"}, {"product", product}});
  };
  ASSERT_TRUE(Eventually([&] { return pool("H100", "free") == 2 && pool("A100", "free") == 1; }));
  EXPECT_EQ(pool("H100", "tainted"), 1);
  EXPECT_EQ(pool("H100", "allocated"), 0);
  // Priced as the stranded cost is: the class's price wins over the product's.
  EXPECT_EQ(price("H100"), 3.6);
  EXPECT_EQ(price("A100"), 3.6);

  ASSERT_TRUE(client_->Delete(k8s::kResourceSlices, "", "node-a-gpus", k8s::DeleteOptions()).ok());
  ASSERT_TRUE(Eventually([&] { return pool("H100", "free") == 1; }));
  EXPECT_EQ(pool("H100", "tainted"), 0);  // still published by node-b: a zero, not a gap
  ASSERT_TRUE(client_->Delete(k8s::kResourceSlices, "", "node-b-gpus", k8s::DeleteOptions()).ok());
  ASSERT_TRUE(Eventually([&] { return pool("H100", "free") == -1; }));
  EXPECT_EQ(pool("H100", "tainted"), -1);
  EXPECT_EQ(pool("A100", "free"), -1);
  EXPECT_EQ(price("H100"), -1) << "no price series for what no node publishes";
  EXPECT_EQ(price("A100"), -1);
}

TEST_F(ScenarioTest, EveryReasonAndStrandedKindIsExported) {
  Create(k8s::kDeviceClasses, "",
         Class("gpu", "device.attributes['gpu.dralens.dev'].type == 'gpu'"));
  Create(k8s::kDeviceClasses, "",
         Class("mig", "device.attributes['gpu.dralens.dev'].type == 'mig'"));
  Create(k8s::kDeviceClasses, "",
         Class("odd", "device.attributes['gpu.dralens.dev'].productName.matches('^H1')"));
  Create(k8s::kNodes, "", Node("node-a", true));
  Create(k8s::kNodes, "", Node("node-b", true));
  Create(k8s::kNodes, "", Node("node-c", false));
  Create(k8s::kResourceSlices, "",
         Slice("node-a", {{"gpu-0", "gpu", "H100", "GPU-a0", "", "", 0, false},
                          {"gpu-1", "gpu", "H100", "GPU-a1", "", "", 0, /*tainted=*/true},
                          {"gpu-2", "gpu", "H100", "GPU-a2", "", "", 0, false}}));
  Create(k8s::kResourceSlices, "",
         Slice("node-b",
               {{"gpu-0", "gpu", "A100", "GPU-b0", "", "gpu-0-slices", 7, false},
                {"mig-3g-0", "mig", "A100", "MIG-b0", "3g", "gpu-0-slices", 3, false},
                {"mig-3g-1", "mig", "A100", "MIG-b1", "3g", "gpu-0-slices", 3, false},
                {"mig-1g-0", "mig", "A100", "MIG-b2", "1g", "gpu-0-slices", 1, false}},
               {{"gpu-0-slices", 7}}));
  Create(k8s::kResourceSlices, "",
         Slice("node-c", {{"gpu-0", "gpu", "A100", "GPU-c0", "", "", 0, false}}));

  const std::string h100 = "device.attributes['gpu.dralens.dev'].productName == 'H100'";
  nlohmann::json running = Create(k8s::kResourceClaims, "team", Claim("team", "running", "gpu"));
  nlohmann::json idle = Create(k8s::kResourceClaims, "team", Claim("team", "idle", "mig"));
  // Two H100s wanted: three match, one is tainted, one allocated: only one is free.
  Create(k8s::kResourceClaims, "team", Claim("team", "nocap", "gpu", h100, 2));
  // Only gpu-1 has this uuid, and it is tainted.
  Create(k8s::kResourceClaims, "team",
         Claim("team", "tainted", "gpu", "device.attributes['gpu.dralens.dev'].uuid == 'GPU-a1'"));
  // No device has this product.
  Create(
      k8s::kResourceClaims, "team",
      Claim("team", "unsat", "gpu", "device.attributes['gpu.dralens.dev'].productName == 'B200'"));
  // The class selector cannot be judged.
  Create(k8s::kResourceClaims, "team", Claim("team", "unknown", "odd"));
  // gpu-2 on node-a is free for it.
  nlohmann::json waiting =
      Create(k8s::kResourceClaims, "team", Claim("team", "waiting", "gpu", h100));
  // mig-1g-0 is free for it.
  Create(k8s::kResourceClaims, "team",
         Claim("team", "mig-small", "mig", "device.attributes['gpu.dralens.dev'].profile == '1g'"));
  const std::string run_uid = Pod("p-run", "Running");
  const std::string idle_uid = Pod("p-idle", "Pending");
  Allocate(running, "node-a", "gpu-0", "p-run", run_uid);
  Allocate(idle, "node-b", "mig-3g-0", "p-idle", idle_uid);

  StartInformers();
  ASSERT_TRUE(Eventually([&] {
    return analyzer_->StateOf("team/running") == ClaimState::kInUse &&
           analyzer_->StateOf("team/idle") == ClaimState::kReserved &&
           analyzer_->PendingReasonOf("team/mig-small").has_value();
  }));

  // Claims by state.
  EXPECT_EQ(Get("dralens_cluster_claims",
                {{"state", "in_use"}, {"device_class", "gpu"}, {"namespace", "team"}}),
            1);
  EXPECT_EQ(Get("dralens_cluster_claims",
                {{"state", "reserved"}, {"device_class", "mig"}, {"namespace", "team"}}),
            1);
  EXPECT_EQ(Get("dralens_cluster_claims",
                {{"state", "pending"}, {"device_class", "gpu"}, {"namespace", "team"}}),
            4);

  // Every reason, per claim and per class.
  EXPECT_EQ(analyzer_->PendingReasonOf("team/nocap"), PendingReason::kNoCapacity);
  EXPECT_EQ(analyzer_->PendingReasonOf("team/tainted"), PendingReason::kTainted);
  EXPECT_EQ(analyzer_->PendingReasonOf("team/unsat"), PendingReason::kUnsatisfiable);
  EXPECT_EQ(analyzer_->PendingReasonOf("team/unknown"), PendingReason::kUnknown);
  EXPECT_EQ(analyzer_->PendingReasonOf("team/waiting"), PendingReason::kWaitingForPod);
  EXPECT_EQ(analyzer_->PendingReasonOf("team/mig-small"), PendingReason::kWaitingForPod);
  for (const auto& [reason, count] : std::map<std::string, double>{
           {"no_capacity", 1}, {"tainted", 1}, {"unsatisfiable", 1}, {"waiting_for_pod", 1}}) {
    EXPECT_EQ(Get("dralens_cluster_pending_claims", {{"device_class", "gpu"}, {"reason", reason}}),
              count)
        << reason;
  }
  EXPECT_EQ(Get("dralens_cluster_pending_claims", {{"device_class", "odd"}, {"reason", "unknown"}}),
            1);
  EXPECT_EQ(Get("dralens_cluster_pending_claim_age_seconds",
                {{"namespace", "team"}, {"claim", "nocap"}, {"reason", "no_capacity"}}),
            0);

  // Pool capacity, fleet-wide: published devices per class, product and state. Every state of a
  // published (class, product) has a series, zeros included; node-c being NotReady does not
  // change what it publishes.
  auto pool = [&](const std::string& cls, const std::string& product, const std::string& state) {
    return Get("dralens_cluster_pool_devices", {{"driver", testing::kDriver},
                                                {"device_class", cls},
                                                {"product", product},
                                                {"state", state}});
  };
  EXPECT_EQ(pool("gpu", "H100", "free"), 1);
  EXPECT_EQ(pool("gpu", "H100", "allocated"), 1);
  EXPECT_EQ(pool("gpu", "H100", "tainted"), 1);
  // The full GPU needs 7 slices; mig-3g-0 holds 3 of them. node-c's A100 is free.
  EXPECT_EQ(pool("gpu", "A100", "allocated"), 1);
  EXPECT_EQ(pool("gpu", "A100", "free"), 1);
  EXPECT_EQ(pool("gpu", "A100", "tainted"), 0);
  EXPECT_EQ(pool("mig", "A100", "allocated"), 1);
  EXPECT_EQ(pool("mig", "A100", "free"), 2);
  EXPECT_EQ(pool("mig", "A100", "tainted"), 0);
  EXPECT_EQ(pool("mig", "H100", "free"), -1);  // no such device: no series
  // No series per node: the family grows with classes and products, not with the fleet.
  EXPECT_EQ(Get("dralens_cluster_pool_devices", {{"node", "node-a"}}), -1);

  // MIG placeable with 4 of 7 slices left: no full GPU, one more 3g, and (alone) one 1g.
  auto placeable = [&](const std::string& profile) {
    return Get("dralens_cluster_mig_placeable",
               {{"node", "node-b"}, {"gpu", "gpu-0-slices"}, {"profile", profile}});
  };
  EXPECT_EQ(placeable("gpu"), 0);
  EXPECT_EQ(placeable("3g"), 1);
  EXPECT_EQ(placeable("1g"), 1);

  // Physical GPUs: each counts once, whatever the classes it matches or its placements; the
  // partitionable A100 is split by the memory slices its allocations consume (3 of 7).
  auto gpus = [&](const std::string& node, const std::string& product, const std::string& state) {
    return Get(
        "dralens_cluster_gpus",
        {{"node", node}, {"driver", testing::kDriver}, {"product", product}, {"state", state}});
  };
  EXPECT_EQ(gpus("node-a", "H100", "allocated"), 1);
  EXPECT_EQ(gpus("node-a", "H100", "unavailable"), 1);
  EXPECT_EQ(gpus("node-a", "H100", "free"), 1);
  EXPECT_DOUBLE_EQ(gpus("node-b", "A100", "allocated"), 3.0 / 7);
  EXPECT_DOUBLE_EQ(gpus("node-b", "A100", "free"), 4.0 / 7);
  EXPECT_EQ(gpus("node-b", "A100", "unavailable"), -1);
  EXPECT_EQ(gpus("node-c", "A100", "unavailable"), 1);

  // Stranded GPUs, each part under one kind and one class:
  auto stranded = [&](const std::string& family, const std::string& kind, const std::string& node,
                      const std::string& product, const std::string& cls) {
    return Get(family,
               {{"kind", kind}, {"node", node}, {"product", product}, {"device_class", cls}});
  };
  const std::string gauge = "dralens_cluster_stranded_gpus";
  // mig-3g-0 (3 of 7 slices): held by `idle`, whose pod is not running; its request's class.
  EXPECT_DOUBLE_EQ(stranded(gauge, "allocated_not_running", "node-b", "A100", "mig"), 3.0 / 7);
  // The rest of that GPU is free while mig-small (1g) could use mig-1g-0; gpu-2 is free while
  // the gpu claims nocap and waiting could use it (same age: nocap first by name, class gpu).
  EXPECT_DOUBLE_EQ(stranded(gauge, "free_while_pending", "node-b", "A100", "mig"), 4.0 / 7);
  EXPECT_EQ(stranded(gauge, "free_while_pending", "node-a", "H100", "gpu"), 1);
  // gpu-1 is tainted; node-c is NotReady. Nobody holds them: no class.
  EXPECT_EQ(stranded(gauge, "advertised_unhealthy", "node-a", "H100", ""), 1);
  EXPECT_EQ(stranded(gauge, "advertised_unhealthy", "node-c", "A100", ""), 1);
  double all = 0;
  for (const prometheus::MetricFamily& f : testing::Exported(registry_, *analyzer_).Collect()) {
    if (f.name == gauge) {
      for (const prometheus::ClientMetric& m : f.metric) {
        all += m.gauge.value;
      }
    }
  }
  EXPECT_DOUBLE_EQ(all, 4);

  // A minute later: GPU-seconds and cost per GPU-hour (class gpu 3.6, else product A100 7.2).
  clock_.Advance(absl::Seconds(60));
  analyzer_->Tick();
  const std::string seconds = "dralens_cluster_stranded_gpu_seconds_total";
  const std::string cost = "dralens_cluster_stranded_cost_total";
  EXPECT_DOUBLE_EQ(stranded(seconds, "advertised_unhealthy", "node-c", "A100", ""), 60);
  EXPECT_DOUBLE_EQ(stranded(cost, "advertised_unhealthy", "node-c", "A100", ""), 60 * 7.2 / 3600);
  EXPECT_DOUBLE_EQ(stranded(seconds, "free_while_pending", "node-a", "H100", "gpu"), 60);
  EXPECT_DOUBLE_EQ(stranded(cost, "free_while_pending", "node-a", "H100", "gpu"), 60 * 3.6 / 3600);
  EXPECT_DOUBLE_EQ(stranded(seconds, "free_while_pending", "node-b", "A100", "mig"), 60 * 4.0 / 7);
  EXPECT_DOUBLE_EQ(stranded(cost, "free_while_pending", "node-b", "A100", "mig"),
                   60 * 4.0 / 7 * 7.2 / 3600);
  EXPECT_DOUBLE_EQ(stranded(seconds, "allocated_not_running", "node-b", "A100", "mig"),
                   60 * 3.0 / 7);
  EXPECT_EQ(Get("dralens_cluster_pending_claim_age_seconds",
                {{"namespace", "team"}, {"claim", "nocap"}, {"reason", "no_capacity"}}),
            60);
  // Showback: what each namespace's claims held, by the class of their request and by state.
  auto held = [&](const std::string& family, const std::string& cls, const std::string& state) {
    return Get(family, {{"namespace", "team"}, {"device_class", cls}, {"state", state}});
  };
  const std::string held_seconds = "dralens_cluster_gpu_seconds_total";
  const std::string held_cost = "dralens_cluster_cost_total";
  EXPECT_DOUBLE_EQ(held(held_seconds, "gpu", "in_use"), 60);
  EXPECT_DOUBLE_EQ(held(held_cost, "gpu", "in_use"), 60 * 3.6 / 3600);
  EXPECT_DOUBLE_EQ(held(held_seconds, "mig", "allocated_not_running"), 60 * 3.0 / 7);
  EXPECT_DOUBLE_EQ(held(held_cost, "mig", "allocated_not_running"), 60 * 3.0 / 7 * 7.2 / 3600);
  EXPECT_EQ(held(held_seconds, "mig", "in_use"), -1);

  // The idle pod starts: allocated_not_running ends, and stops accruing.
  auto patched = client_->MergePatch(k8s::kPods, "team", "p-idle",
                                     {{"status", {{"phase", "Running"}}}}, "status");
  ASSERT_TRUE(patched.ok()) << patched.status();
  ASSERT_TRUE(Eventually([&] { return analyzer_->StateOf("team/idle") == ClaimState::kInUse; }));
  EXPECT_EQ(stranded(gauge, "allocated_not_running", "node-b", "A100", "mig"), 0);
  clock_.Advance(absl::Seconds(30));
  analyzer_->Tick();
  EXPECT_DOUBLE_EQ(stranded(seconds, "allocated_not_running", "node-b", "A100", "mig"),
                   60 * 3.0 / 7);
  // Its team's showback moves from allocated_not_running to in_use.
  EXPECT_DOUBLE_EQ(held(held_seconds, "mig", "allocated_not_running"), 60 * 3.0 / 7);
  EXPECT_DOUBLE_EQ(held(held_seconds, "mig", "in_use"), 30 * 3.0 / 7);
  EXPECT_DOUBLE_EQ(held(held_cost, "mig", "in_use"), 30 * 3.0 / 7 * 7.2 / 3600);
  EXPECT_DOUBLE_EQ(held(held_seconds, "gpu", "in_use"), 90);

  // `waiting` is allocated 90 s after it was created: one latency observation.
  nlohmann::json fresh = *client_->Get(k8s::kResourceClaims, "team", "waiting");
  Allocate(fresh, "node-a", "gpu-2");
  ASSERT_TRUE(
      Eventually([&] { return analyzer_->StateOf("team/waiting") == ClaimState::kAllocated; }));
  EXPECT_EQ(Get("dralens_cluster_allocation_latency_seconds", {{"device_class", "gpu"}}), 1);
  for (const prometheus::MetricFamily& f : registry_.Collect()) {
    if (f.name == "dralens_cluster_allocation_latency_seconds") {
      EXPECT_DOUBLE_EQ(f.metric.at(0).histogram.sample_sum, 90);
    }
  }
  // gpu-2 is taken now: the H100 claims have no free device left.
  EXPECT_EQ(stranded(gauge, "free_while_pending", "node-a", "H100", "gpu"), 0);
  EXPECT_EQ(gpus("node-a", "H100", "allocated"), 2);
  EXPECT_EQ(Get("dralens_cluster_pending_claim_age_seconds",
                {{"namespace", "team"}, {"claim", "waiting"}}),
            -1);

  // A stranded series at 0 stays for the retention (15 minutes by default) with its counters at
  // their last values, so that a scrape reads them; then its three series go.
  clock_.Advance(absl::Minutes(14));
  analyzer_->Tick();
  EXPECT_EQ(stranded(gauge, "free_while_pending", "node-a", "H100", "gpu"), 0);
  EXPECT_DOUBLE_EQ(stranded(seconds, "free_while_pending", "node-a", "H100", "gpu"), 90);
  EXPECT_DOUBLE_EQ(stranded(seconds, "allocated_not_running", "node-b", "A100", "mig"),
                   60 * 3.0 / 7);
  clock_.Advance(absl::Minutes(1));
  analyzer_->Tick();
  for (const std::string& family : {gauge, seconds, cost}) {
    EXPECT_EQ(stranded(family, "free_while_pending", "node-a", "H100", "gpu"), -1) << family;
    // At 0 since the pod started, 30 s earlier than the one above.
    EXPECT_EQ(stranded(family, "allocated_not_running", "node-b", "A100", "mig"), -1) << family;
  }
  // What is still stranded keeps its series and counts on.
  EXPECT_EQ(stranded(gauge, "advertised_unhealthy", "node-c", "A100", ""), 1);
  EXPECT_DOUBLE_EQ(stranded(seconds, "advertised_unhealthy", "node-c", "A100", ""), 60 + 30 + 900);

  // When the node strands that kind for that class again, its series come back from 0 (a
  // counter reset, which rate() and increase() account for).
  ASSERT_TRUE(client_->Delete(k8s::kResourceClaims, "team", "waiting", {}).ok());
  ASSERT_TRUE(Eventually([&] { return !analyzer_->StateOf("team/waiting").has_value(); }));
  EXPECT_EQ(stranded(gauge, "free_while_pending", "node-a", "H100", "gpu"), 1);
  EXPECT_EQ(stranded(seconds, "free_while_pending", "node-a", "H100", "gpu"), 0);
  clock_.Advance(absl::Seconds(20));
  analyzer_->Tick();
  EXPECT_DOUBLE_EQ(stranded(seconds, "free_while_pending", "node-a", "H100", "gpu"), 20);

  // A node that goes away for good (its slice withdrawn): its GPU series go with its last
  // device, its stranded series after the retention; nothing of it stays in the exposition.
  ASSERT_TRUE(client_->Delete(k8s::kResourceSlices, "", "node-c-gpus", {}).ok());
  ASSERT_TRUE(Eventually(
      [&] { return stranded(gauge, "advertised_unhealthy", "node-c", "A100", "") == 0; }));
  EXPECT_EQ(gpus("node-c", "A100", "unavailable"), -1);
  clock_.Advance(absl::Minutes(1));
  analyzer_->Tick();
  EXPECT_EQ(stranded(gauge, "advertised_unhealthy", "node-c", "A100", ""), 0);
  clock_.Advance(absl::Minutes(14));
  analyzer_->Tick();
  for (const std::string& family : {gauge, seconds, cost}) {
    EXPECT_EQ(Get(family, {{"node", "node-c"}}), -1) << family;
  }
  EXPECT_EQ(stranded(gauge, "advertised_unhealthy", "node-a", "H100", ""), 1);
}

// The lifecycle trace of a claim and the node's prepare span share one trace id.
TEST_F(ScenarioTest, LifecycleTraceHoldsTheNodePrepareSpan) {
  StartInformers();
  nlohmann::json claim = Create(k8s::kResourceClaims, "team", Claim("team", "traced", "gpu"));
  const std::string uid = claim["metadata"]["uid"];
  ASSERT_TRUE(Eventually([&] { return analyzer_->StateOf("team/traced").has_value(); }));
  Allocate(claim, "node-a", "gpu-0");
  ASSERT_TRUE(
      Eventually([&] { return analyzer_->StateOf("team/traced") == ClaimState::kAllocated; }));

  // The node prepares it, with the node's own per-claim telemetry.
  {
    driver::ClaimRef ref{"team", uid, "traced"};
    prometheus::Registry node_registry;
    telemetry::ExemplarStore node_exemplars;
    driver::prepare::PrepareMetrics node_metrics =
        driver::prepare::PrepareMetrics::Create(node_registry, node_exemplars);
    driver::prepare::DecisionLog node_log;
    driver::prepare::ClaimTelemetry node_span(node_metrics, tracing_->tracer(), clock_, node_log,
                                              driver::prepare::Operation::kPrepare, ref, "node-a",
                                              telemetry::SpanContext());
  }
  ASSERT_TRUE(client_->Delete(k8s::kResourceClaims, "team", "traced", {}).ok());
  ASSERT_TRUE(Eventually([&] { return !analyzer_->StateOf("team/traced").has_value(); }));
  ASSERT_TRUE(tracing_->ForceFlush(absl::Now() + absl::Seconds(5)));

  const std::string trace_id = telemetry::TraceIdFromClaimUid(uid).ToHex();
  const telemetry::SpanData* lifecycle = nullptr;
  const telemetry::SpanData* prepare = nullptr;
  std::vector<telemetry::SpanData> spans = spans_->spans();
  for (const telemetry::SpanData& s : spans) {
    if (s.name == "ResourceClaim") {
      lifecycle = &s;
    } else if (s.name == "PrepareClaim") {
      prepare = &s;
    }
  }
  ASSERT_NE(lifecycle, nullptr);
  ASSERT_NE(prepare, nullptr);
  EXPECT_EQ(lifecycle->context.trace_id.ToHex(), trace_id);
  EXPECT_EQ(prepare->context.trace_id.ToHex(), trace_id);
  std::vector<std::string> events;
  for (const auto& e : lifecycle->events) {
    events.push_back(e.name);
  }
  EXPECT_EQ(events, (std::vector<std::string>{"created", "pending", "allocated", "deleted"}));
  EXPECT_EQ(Get("dralens_cluster_claim_transitions_total", {{"to", "deleted"}}), 1);
  EXPECT_EQ(Get("dralens_cluster_claim_transitions_total", {{"to", "allocated"}}), 1);
}

TEST(PriceTableTest, UnknownFieldsAndBadPricesAreNamed) {
  auto bad = PriceTable::Parse(R"({"default": 1, "clases": {}})", 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"clases\""), std::string::npos) << bad.status();
  auto negative = PriceTable::Parse(R"({"products": {"H100": -1}})", 0);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("products[\"H100\"]"), std::string::npos);
  auto ok = PriceTable::Parse(R"({"deviceClasses": {"gpu": 2}, "products": {"H100": 4}})", 1.5);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->PriceOf("gpu", "H100"), 2);
  EXPECT_EQ(ok->PriceOf("mig", "H100"), 4);
  EXPECT_EQ(ok->PriceOf("mig", "A100"), 1.5);
}

}  // namespace
}  // namespace dralens::exporter::cluster
