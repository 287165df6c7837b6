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
        return m.gauge.value;
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
                                         .gpu_instance_id = std::nullopt});
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

}  // namespace
}  // namespace dralens::exporter
