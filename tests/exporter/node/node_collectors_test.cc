// The node collectors render a node view: identities follow the layout, states and counts follow
// the claims, the claim join follows the prepared claims, and what goes away loses its series.
#include "exporter/node/node_collectors.h"

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "prometheus/registry.h"

namespace dralens::exporter {
namespace {

using Labels = std::map<std::string, std::string>;

std::optional<double> Value(prometheus::Registry& registry, const std::string& family,
                            const Labels& want) {
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    if (f.name != family) {
      continue;
    }
    for (const prometheus::ClientMetric& m : f.metric) {
      Labels have;
      for (const auto& l : m.label) {
        have[l.name] = l.value;
      }
      bool match = true;
      for (const auto& [k, v] : want) {
        match = match && have.count(k) > 0 && have[k] == v;
      }
      if (match) {
        return f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
      }
    }
  }
  return std::nullopt;
}

int Count(prometheus::Registry& registry, const std::string& family) {
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    if (f.name == family) {
      return static_cast<int>(f.metric.size());
    }
  }
  return 0;
}

model::NodeDevice Gpu(const std::string& name, const std::string& uuid) {
  model::NodeDevice d;
  d.name = name;
  d.uuid = uuid;
  d.product = "NVIDIA H100 80GB HBM3";
  d.type = model::DeviceType::kGpu;
  d.numa_node = 0;
  d.pci_bus_id = "0000:3b:00.0";
  d.memory_bytes = 80ull << 30;
  return d;
}

model::NodeDevice Mig(const std::string& name, const std::string& parent) {
  model::NodeDevice d;
  d.name = name;
  d.uuid = "MIG-" + name;
  d.type = model::DeviceType::kMig;
  d.parent = parent;
  d.profile = "1g.10gb";
  d.memory_bytes = 10ull << 30;
  return d;
}

model::PreparedClaim Claim(const std::string& uid, const std::string& device,
                           model::DeviceType type = model::DeviceType::kGpu) {
  model::PreparedClaim c;
  c.uid = uid;
  c.namespace_name = "ml";
  c.name = "claim-" + uid;
  c.devices.push_back(model::ClaimDevice{.device = device,
                                         .pool = "node-a",
                                         .type = type,
                                         .uuid = "GPU-" + device,
                                         .gpu_uuid = "GPU-" + device,
                                         .gpu_instance_id = std::nullopt,
                                         .device_class = "gpu.dralens.dev",
                                         .product = "H100",
                                         .gpus = 1});
  return c;
}

class NodeCollectorsTest : public ::testing::Test {
 protected:
  model::NodeView View(std::vector<model::PreparedClaim> claims = {},
                       std::set<std::string> unhealthy = {}) {
    return model::NodeView{.driver = "gpu.dralens.dev",
                           .pool = "node-a",
                           .layout = layout_,
                           .claims = std::move(claims),
                           .unhealthy = std::move(unhealthy)};
  }

  prometheus::Registry registry_;
  NodeCollectors collectors_{registry_};
  std::shared_ptr<const model::NodeLayout> layout_ = std::make_shared<const model::NodeLayout>(
      model::NodeLayout{.devices = {Gpu("gpu-0", "GPU-0"), Gpu("gpu-1", "GPU-1"),
                                    Mig("gpu-2-mig-a", "gpu-2"), Mig("gpu-2-mig-b", "gpu-2")},
                        .placeable = {{.parent = "gpu-2", .profile = "1g.10gb", .count = 5}}});
};

TEST_F(NodeCollectorsTest, StatesCountsAndTheJoinFollowTheClaims) {
  collectors_.Apply(View());
  EXPECT_EQ(Value(registry_, "dralens_device_state", {{"device", "gpu-0"}, {"state", "free"}}), 1);
  EXPECT_EQ(Value(registry_, "dralens_node_prepared_claims", {}), 0);
  EXPECT_EQ(Count(registry_, "dralens_node_claim_info"), 0);
  EXPECT_EQ(Value(registry_, "dralens_mig_devices",
                  {{"parent", "gpu-2"}, {"profile", "1g.10gb"}, {"state", "free"}}),
            2);
  EXPECT_EQ(Value(registry_, "dralens_mig_placeable", {{"parent", "gpu-2"}}), 5);

  collectors_.Apply(View({Claim("a", "gpu-0"), Claim("b", "gpu-0"),
                          Claim("c", "gpu-2-mig-a", model::DeviceType::kMig)}));
  EXPECT_EQ(Value(registry_, "dralens_device_state", {{"device", "gpu-0"}, {"state", "prepared"}}),
            1);
  EXPECT_EQ(Value(registry_, "dralens_device_consumers", {{"device", "gpu-0"}}), 2);
  EXPECT_EQ(Value(registry_, "dralens_node_prepared_claims", {}), 3);
  EXPECT_EQ(Value(registry_, "dralens_node_prepared_devices", {{"type", "gpu"}}), 1);
  EXPECT_EQ(Value(registry_, "dralens_node_prepared_devices", {{"type", "mig"}}), 1);
  EXPECT_EQ(Value(registry_, "dralens_mig_devices",
                  {{"parent", "gpu-2"}, {"profile", "1g.10gb"}, {"state", "prepared"}}),
            1);
  EXPECT_EQ(Count(registry_, "dralens_node_claim_info"), 3);
  EXPECT_EQ(Value(registry_, "dralens_node_claim_info",
                  {{"uid", "a"},
                   {"claim", "claim-a"},
                   {"namespace", "ml"},
                   {"dra_claim_name", "claim-a"},
                   {"dra_claim_namespace", "ml"},
                   {"dra_driver_name", "gpu.dralens.dev"},
                   {"dra_pool_name", "node-a"},
                   {"dra_device_name", "gpu-0"},
                   {"UUID", "GPU-gpu-0"},
                   {"GPU_I_ID", ""}}),
            1);

  // One claim goes: its series goes; the device stays prepared for the other.
  collectors_.Apply(
      View({Claim("b", "gpu-0"), Claim("c", "gpu-2-mig-a", model::DeviceType::kMig)}));
  EXPECT_EQ(Count(registry_, "dralens_node_claim_info"), 2);
  EXPECT_EQ(Value(registry_, "dralens_node_claim_info", {{"uid", "a"}}), std::nullopt);
  EXPECT_EQ(Value(registry_, "dralens_device_consumers", {{"device", "gpu-0"}}), 1);
}

TEST_F(NodeCollectorsTest, UnhealthyWinsOverPrepared) {
  collectors_.Apply(View({Claim("a", "gpu-1")}, {"gpu-1"}));
  EXPECT_EQ(Value(registry_, "dralens_device_state", {{"device", "gpu-1"}, {"state", "unhealthy"}}),
            1);
  EXPECT_EQ(Value(registry_, "dralens_device_state", {{"device", "gpu-1"}, {"state", "prepared"}}),
            0);
  EXPECT_EQ(Value(registry_, "dralens_device_consumers", {{"device", "gpu-1"}}), 1);
}

TEST_F(NodeCollectorsTest, DevicesAndGroupsThatLeaveTheLayoutLoseTheirSeries) {
  collectors_.Apply(View());
  layout_ = std::make_shared<const model::NodeLayout>(
      model::NodeLayout{.devices = {Gpu("gpu-0", "GPU-0")}, .placeable = {}});
  collectors_.Apply(View());
  EXPECT_EQ(Value(registry_, "dralens_device_info", {{"device", "gpu-1"}}), std::nullopt);
  EXPECT_EQ(Value(registry_, "dralens_device_state", {{"device", "gpu-2-mig-a"}}), std::nullopt);
  EXPECT_EQ(Count(registry_, "dralens_mig_devices"), 0);
  EXPECT_EQ(Count(registry_, "dralens_mig_placeable"), 0);
  EXPECT_EQ(Count(registry_, "dralens_device_info"), 1);
  // A device whose identity changed gets a new info series, not a second one.
  model::NodeDevice renamed = Gpu("gpu-0", "GPU-0-replaced");
  layout_ = std::make_shared<const model::NodeLayout>(
      model::NodeLayout{.devices = {renamed}, .placeable = {}});
  collectors_.Apply(View());
  EXPECT_EQ(Count(registry_, "dralens_device_info"), 1);
  EXPECT_EQ(Value(registry_, "dralens_device_info", {{"uuid", "GPU-0-replaced"}}), 1);
}

model::DeviceUsageSample Used(const std::string& uuid, std::optional<double> utilization,
                              uint64_t memory_used = 1ull << 30) {
  return model::DeviceUsageSample{.uuid = uuid,
                                  .utilization = utilization,
                                  .memory_used_bytes = memory_used,
                                  .method = utilization ? "device_utilization" : "memory_only"};
}

// A claim on the given layout devices, with their UUIDs.
model::PreparedClaim ClaimOn(const std::string& uid, const std::vector<model::NodeDevice>& on) {
  model::PreparedClaim c{.uid = uid, .namespace_name = "ml", .name = "claim-" + uid, .devices = {}};
  for (const model::NodeDevice& d : on) {
    c.devices.push_back(model::ClaimDevice{.device = d.name,
                                           .pool = "node-a",
                                           .type = d.type,
                                           .uuid = d.uuid,
                                           .gpu_uuid = d.uuid,
                                           .gpu_instance_id = std::nullopt,
                                           .device_class = "gpu.dralens.dev",
                                           .product = d.product,
                                           .gpus = d.type == model::DeviceType::kMig ? 0.125 : 1});
  }
  return c;
}

TEST_F(NodeCollectorsTest, UsageSeriesFollowTheRoundsAndTheLayout) {
  collectors_.Apply(View());
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  collectors_.ApplyUsage({.at = t0,
                          .devices = {Used("GPU-0", 0.42, 5ull << 30), Used("GPU-1", 0.0),
                                      Used("MIG-gpu-2-mig-a", std::nullopt, 2ull << 30),
                                      Used("GPU-unpublished", 0.9)}});
  EXPECT_EQ(Value(registry_, "dralens_device_utilization_ratio", {{"device", "gpu-0"}}), 0.42);
  EXPECT_EQ(Value(registry_, "dralens_device_memory_used_bytes", {{"device", "gpu-0"}}),
            5.0 * (1ull << 30));
  EXPECT_EQ(Value(registry_, "dralens_device_utilization_ratio", {{"device", "gpu-2-mig-a"}}),
            std::nullopt)
      << "a device without a utilisation figure has no utilisation series";
  EXPECT_EQ(Value(registry_, "dralens_device_memory_used_bytes", {{"device", "gpu-2-mig-a"}}),
            2.0 * (1ull << 30));
  EXPECT_EQ(Count(registry_, "dralens_device_utilization_ratio"), 2);

  // GPU-1 is not in the next round (lost): its series go; so do those of a device that leaves
  // the layout.
  collectors_.ApplyUsage({.at = t0 + absl::Seconds(10), .devices = {Used("GPU-0", 0.5)}});
  EXPECT_EQ(Value(registry_, "dralens_device_utilization_ratio", {{"device", "gpu-1"}}),
            std::nullopt);
  EXPECT_EQ(Count(registry_, "dralens_device_memory_used_bytes"), 1);
  layout_ = std::make_shared<const model::NodeLayout>(
      model::NodeLayout{.devices = {Gpu("gpu-1", "GPU-1")}, .placeable = {}});
  collectors_.Apply(View());
  EXPECT_EQ(Count(registry_, "dralens_device_utilization_ratio"), 0);
  EXPECT_EQ(Count(registry_, "dralens_device_memory_used_bytes"), 0);
}

TEST_F(NodeCollectorsTest, AClaimIsIdleWhileEveryDeviceIsBelowTheThreshold) {
  const model::NodeDevice gpu0 = Gpu("gpu-0", "GPU-0");
  const model::NodeDevice gpu1 = Gpu("gpu-1", "GPU-1");
  collectors_.Apply(View({ClaimOn("one", {gpu0}), ClaimOn("two", {gpu0, gpu1})}));
  const Labels one = {{"namespace", "ml"}, {"claim", "claim-one"}, {"uid", "one"}};
  const Labels two = {{"namespace", "ml"}, {"claim", "claim-two"}, {"uid", "two"}};
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  auto round = [&](int seconds, double u0, double u1) {
    collectors_.ApplyUsage(
        {.at = t0 + absl::Seconds(seconds), .devices = {Used("GPU-0", u0), Used("GPU-1", u1)}});
  };

  round(0, 0.01, 0.90);
  EXPECT_EQ(Value(registry_, "dralens_node_claim_idle_seconds", one), 0) << "idle from now on";
  EXPECT_EQ(Value(registry_, "dralens_node_claim_idle_seconds", two), 0) << "gpu-1 is busy";
  round(10, 0.04, 0.90);
  EXPECT_EQ(Value(registry_, "dralens_node_claim_idle_seconds", one), 10);
  EXPECT_EQ(Value(registry_, "dralens_node_claim_idle_seconds", two), 0);
  round(20, 0.00, 0.01);
  EXPECT_EQ(Value(registry_, "dralens_node_claim_idle_seconds", one), 20);
  EXPECT_EQ(Value(registry_, "dralens_node_claim_idle_seconds", two), 0) << "idle from 20 s";
  round(50, 0.00, 0.02);
  EXPECT_EQ(Value(registry_, "dralens_node_claim_idle_seconds", two), 30);
  round(60, 0.05, 0.02);  // at the threshold is busy
  EXPECT_EQ(Value(registry_, "dralens_node_claim_idle_seconds", one), 0);
  EXPECT_EQ(Value(registry_, "dralens_node_claim_idle_seconds", two), 0);

  // Idle GPU-seconds: `one` (1 GPU) idled 0-50 s, `two` (2 GPUs) 20-50 s; the 50-60 s before
  // the busy round counts for neither, as their idle time starts again at 0.
  const Labels ns = {{"namespace", "ml"},
                     {"device_class", "gpu.dralens.dev"},
                     {"product", "NVIDIA H100 80GB HBM3"}};
  EXPECT_EQ(Value(registry_, "dralens_node_idle_gpu_seconds_total", ns), 50 + 2 * 30);
  // What each claim holds, the figure rules price the idle time with.
  EXPECT_EQ(Value(registry_, "dralens_node_claim_gpus",
                  {{"uid", "two"}, {"device_class", "gpu.dralens.dev"}}),
            2);

  // Unprepared: the series goes; the namespace's counter stays.
  collectors_.Apply(View({ClaimOn("two", {gpu0, gpu1})}));
  EXPECT_EQ(Value(registry_, "dralens_node_claim_idle_seconds", one), std::nullopt);
  EXPECT_EQ(Count(registry_, "dralens_node_claim_idle_seconds"), 1);
  EXPECT_EQ(Value(registry_, "dralens_node_claim_gpus", {{"uid", "one"}}), std::nullopt);
  EXPECT_EQ(Value(registry_, "dralens_node_idle_gpu_seconds_total", ns), 110);
}

TEST_F(NodeCollectorsTest, AnUndecidedRoundNeitherStartsNorEndsIdleness) {
  const model::NodeDevice gpu0 = Gpu("gpu-0", "GPU-0");
  const model::NodeDevice mig = Mig("gpu-2-mig-a", "gpu-2");
  collectors_.Apply(View({ClaimOn("mig", {mig}), ClaimOn("gpu", {gpu0})}));
  const Labels on_mig = {{"namespace", "ml"}, {"claim", "claim-mig"}, {"uid", "mig"}};
  const Labels on_gpu = {{"namespace", "ml"}, {"claim", "claim-gpu"}, {"uid", "gpu"}};
  const absl::Time t0 = absl::FromUnixSeconds(1000);

  // A MIG device without a utilisation figure (no GPM, or its first GPM round): no idle series.
  collectors_.ApplyUsage(
      {.at = t0, .devices = {Used("MIG-gpu-2-mig-a", std::nullopt), Used("GPU-0", 0.0)}});
  EXPECT_EQ(Value(registry_, "dralens_node_claim_idle_seconds", on_mig), std::nullopt);
  collectors_.ApplyUsage(
      {.at = t0 + absl::Seconds(10), .devices = {Used("MIG-gpu-2-mig-a", 0.0), Used("GPU-0", 0)}});
  EXPECT_EQ(Value(registry_, "dralens_node_claim_idle_seconds", on_mig), 0);
  EXPECT_EQ(Value(registry_, "dralens_node_claim_idle_seconds", on_gpu), 10);
  // gpu-0 missing from a round (not readable) keeps the idleness counting from where it began.
  collectors_.ApplyUsage({.at = t0 + absl::Seconds(20), .devices = {Used("MIG-gpu-2-mig-a", 0)}});
  EXPECT_EQ(Value(registry_, "dralens_node_claim_idle_seconds", on_gpu), 20);
  collectors_.ApplyUsage(
      {.at = t0 + absl::Seconds(30), .devices = {Used("MIG-gpu-2-mig-a", 0), Used("GPU-0", 0.01)}});
  EXPECT_EQ(Value(registry_, "dralens_node_claim_idle_seconds", on_gpu), 30);
  EXPECT_EQ(Value(registry_, "dralens_node_claim_idle_seconds", on_mig), 20);
  // GPU-seconds follow the same time: the GPU 30 s, the MIG device (1/8) 20 s.
  EXPECT_EQ(Value(registry_, "dralens_node_idle_gpu_seconds_total",
                  {{"product", "NVIDIA H100 80GB HBM3"}}),
            30);
  EXPECT_EQ(Value(registry_, "dralens_node_idle_gpu_seconds_total", {{"product", ""}}), 20 * 0.125);
}

TEST_F(NodeCollectorsTest, AClockThatStepsBackCountsNoIdleTimeTwice) {
  const model::NodeDevice gpu0 = Gpu("gpu-0", "GPU-0");
  collectors_.Apply(View({ClaimOn("one", {gpu0})}));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const Labels ns = {{"namespace", "ml"}};
  collectors_.ApplyUsage({.at = t0, .devices = {Used("GPU-0", 0.0)}});
  collectors_.ApplyUsage({.at = t0 + absl::Seconds(30), .devices = {Used("GPU-0", 0.0)}});
  EXPECT_EQ(Value(registry_, "dralens_node_idle_gpu_seconds_total", ns), 30);
  // The wall clock is set back 20 s: the 10-30 s stretch is not counted again.
  collectors_.ApplyUsage({.at = t0 + absl::Seconds(10), .devices = {Used("GPU-0", 0.0)}});
  collectors_.ApplyUsage({.at = t0 + absl::Seconds(40), .devices = {Used("GPU-0", 0.0)}});
  EXPECT_EQ(Value(registry_, "dralens_node_idle_gpu_seconds_total", ns), 40);
}

TEST(NodeCollectorsThresholdTest, TheIdleThresholdIsTheOperators) {
  prometheus::Registry registry;
  NodeCollectors collectors(registry, NodeCollectorsOptions{.idle_threshold = 0.5});
  auto layout = std::make_shared<const model::NodeLayout>(
      model::NodeLayout{.devices = {Gpu("gpu-0", "GPU-0")}, .placeable = {}});
  collectors.Apply(model::NodeView{.driver = "gpu.dralens.dev",
                                   .pool = "node-a",
                                   .layout = layout,
                                   .claims = {ClaimOn("a", {Gpu("gpu-0", "GPU-0")})},
                                   .unhealthy = {}});
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  collectors.ApplyUsage({.at = t0, .devices = {Used("GPU-0", 0.3)}});
  collectors.ApplyUsage({.at = t0 + absl::Seconds(5), .devices = {Used("GPU-0", 0.3)}});
  EXPECT_EQ(Value(registry, "dralens_node_claim_idle_seconds", {{"uid", "a"}}), 5);
}

}  // namespace
}  // namespace dralens::exporter
