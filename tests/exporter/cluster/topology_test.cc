// Where a multi-device claim landed: one case per rule of ClassifySpread and ClassifyNvlink,
// then the series the analyzer keeps for such claims as their allocations and slices change,
// and the NVLink verdict on the slices simulated nodes publish.
#include <map>
#include <string>
#include <vector>

#include "driver/discovery/device_source.h"
#include "driver/slices/slice_builder.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/feed.h"
#include "exporter/cluster/findings.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/model/codec.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "tests/exporter/cluster/scenario_util.h"

namespace dralens::exporter::cluster {
namespace {

DevicePlace At(std::string node, std::string root, std::optional<int64_t> numa) {
  return DevicePlace{.node = std::move(node), .pcie_root = std::move(root), .numa_node = numa};
}

TEST(ClassifySpreadTest, OneCasePerRule) {
  struct Case {
    const char* what;
    std::vector<DevicePlace> places;
    TopologySpread want;
  };
  const std::vector<Case> cases = {
      {"one PCIe root",
       {At("a", "pci0000:3a", 0), At("a", "pci0000:3a", 0)},
       TopologySpread::kSamePcieRoot},
      {"one PCIe root, no NUMA published",
       {At("a", "r", std::nullopt), At("a", "r", std::nullopt)},
       TopologySpread::kSamePcieRoot},
      {"two roots, one NUMA node", {At("a", "r1", 0), At("a", "r2", 0)}, TopologySpread::kSameNuma},
      {"no roots, one NUMA node", {At("a", "", 1), At("a", "", 1)}, TopologySpread::kSameNuma},
      {"two NUMA nodes",
       {At("a", "r1", 0), At("a", "r2", 1), At("a", "r2", 1)},
       TopologySpread::kCrossNuma},
      {"two nodes", {At("a", "r", 0), At("b", "r", 0)}, TopologySpread::kCrossNode},
      {"two nodes, one device's NUMA unknown",
       {At("a", "", std::nullopt), At("b", "", 0)},
       TopologySpread::kCrossNode},
      {"a device not published",
       {At("a", "r", 0), At("", "", std::nullopt)},
       TopologySpread::kUnknown},
      {"two nodes around a device not published",
       {At("a", "r", 0), At("", "", std::nullopt), At("b", "r", 0)},
       TopologySpread::kCrossNode},
      {"two roots, a NUMA node missing",
       {At("a", "r1", 0), At("a", "r2", std::nullopt)},
       TopologySpread::kUnknown},
      {"nothing", {}, TopologySpread::kUnknown},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ToString(ClassifySpread(c.places)), ToString(c.want)) << c.what;
  }
}

DevicePlace Linked(std::string node, std::string domain) {
  return DevicePlace{.node = std::move(node),
                     .pcie_root = "",
                     .numa_node = std::nullopt,
                     .nvlink_domain = std::move(domain)};
}

TEST(ClassifyNvlinkTest, OneCasePerRule) {
  struct Case {
    const char* what;
    std::vector<DevicePlace> places;
    NvlinkReach want;
  };
  const std::vector<Case> cases = {
      {"one node-local domain",
       {Linked("a", "GPU-1"), Linked("a", "GPU-1")},
       NvlinkReach::kConnected},
      {"one fabric clique across nodes",
       {Linked("a", "3f2a.7"), Linked("b", "3f2a.7"), Linked("c", "3f2a.7")},
       NvlinkReach::kConnected},
      {"two domains of one node",
       {Linked("a", "GPU-1"), Linked("a", "GPU-5")},
       NvlinkReach::kNotConnected},
      {"two nodes, each its own domain",
       {Linked("a", "GPU-1"), Linked("b", "GPU-9")},
       NvlinkReach::kNotConnected},
      {"one with NVLink, one without",
       {Linked("a", "GPU-1"), Linked("a", "")},
       NvlinkReach::kNotConnected},
      {"none has NVLink", {Linked("a", ""), Linked("a", "")}, NvlinkReach::kNotConnected},
      {"a device not published", {Linked("a", "GPU-1"), Linked("", "")}, NvlinkReach::kUnknown},
      {"two domains around a device not published",
       {Linked("a", "GPU-1"), Linked("", ""), Linked("a", "GPU-5")},
       NvlinkReach::kNotConnected},
      {"nothing", {}, NvlinkReach::kUnknown},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ToString(ClassifyNvlink(c.places)), ToString(c.want)) << c.what;
  }
}

// A slice of four GPUs: two per NUMA node, each pair behind one PCIe root.
nlohmann::json FourGpus(const std::string& node) {
  std::vector<testing::DeviceSpec> gpus;
  for (int i = 0; i < 4; ++i) {
    gpus.push_back({.name = "gpu-" + std::to_string(i),
                    .type = "gpu",
                    .product = "H100",
                    .uuid = node + "-GPU-" + std::to_string(i),
                    .profile = "",
                    .counter_set = "",
                    .counters = 0,
                    .tainted = false});
  }
  nlohmann::json slice = testing::Slice(node, gpus);
  for (int i = 0; i < 4; ++i) {
    nlohmann::json& attrs = slice["spec"]["devices"][i]["attributes"];
    attrs["resource.kubernetes.io/numaNode"] = {{"int", i / 2}};
    attrs["resource.kubernetes.io/pcieRoot"] = {{"string", "pci0000:" + std::to_string(i / 2)}};
  }
  return slice;
}

nlohmann::json Allocated(const std::string& name,
                         const std::vector<std::pair<std::string, std::string>>& devices) {
  nlohmann::json claim = testing::Claim("team", name, "gpu", "", static_cast<int>(devices.size()));
  claim["metadata"]["uid"] = "uid-" + name;
  nlohmann::json results = nlohmann::json::array();
  for (const auto& [node, device] : devices) {
    results.push_back(
        {{"request", "req"}, {"driver", testing::kDriver}, {"pool", node}, {"device", device}});
  }
  claim["status"]["allocation"]["devices"]["results"] = results;
  return claim;
}

TEST(ClaimTopologyTest, MultiDeviceClaimsBySpreadWhileAllocated) {
  prometheus::Registry registry;
  telemetry::NoopTracer tracer;
  common::FakeClock clock;
  AnalyzerOptions options{PriceTable{}, &clock};
  options.topology_sensitive_classes = {"gpu"};
  Analyzer analyzer(registry, tracer, options);
  k8s::InformerHandlers claims = HandlersFor(k8s::kResourceClaims, analyzer);
  k8s::InformerHandlers slices = HandlersFor(k8s::kResourceSlices, analyzer);
  HandlersFor(k8s::kDeviceClasses, analyzer).on_add(testing::Class("gpu", "true"));
  // A claim allocated before its devices' slices are seen: unknown, then placed.
  claims.on_add(Allocated("pair", {{"a", "gpu-0"}, {"a", "gpu-1"}}));
  const testing::Exported exported(registry, analyzer);
  auto topology = [&](const std::string& spread) {
    // These GPUs publish no nvlinkDomain: not_connected once published.
    return testing::Value(exported, "dralens_cluster_claim_topology",
                          {{"device_class", "gpu"},
                           {"namespace", "team"},
                           {"spread", spread},
                           {"nvlink", spread == "unknown" ? "unknown" : "not_connected"}});
  };
  EXPECT_EQ(topology("unknown"), 1);
  slices.on_add(FourGpus("a"));
  slices.on_add(FourGpus("b"));
  EXPECT_EQ(topology("unknown"), 0);
  EXPECT_EQ(topology("same_pcie_root"), 1);

  claims.on_add(Allocated("wide", {{"a", "gpu-2"}, {"a", "gpu-0"}}));
  claims.on_add(Allocated("apart", {{"a", "gpu-3"}, {"b", "gpu-3"}}));
  claims.on_add(Allocated("single", {{"b", "gpu-0"}}));  // one device: no spread
  EXPECT_EQ(topology("cross_numa"), 1);
  EXPECT_EQ(topology("cross_node"), 1);
  EXPECT_EQ(
      testing::Value(exported, "dralens_cluster_claim_spread",
                     {{"claim", "wide"}, {"spread", "cross_numa"}, {"topology_sensitive", "true"}}),
      2);
  EXPECT_EQ(testing::Value(exported, "dralens_cluster_claim_spread", {{"claim", "single"}}), -1);

  // The slice is withdrawn and republished (a kubelet restart): the spread stays as it was.
  HandlersFor(k8s::kResourceSlices, analyzer).on_delete(FourGpus("a"));
  EXPECT_EQ(topology("cross_numa"), 1);
  slices.on_add(FourGpus("a"));
  EXPECT_EQ(topology("cross_numa"), 1);
  EXPECT_EQ(topology("unknown"), 0);

  // Allocated anew to other devices, one of them not published: what was known of the old
  // devices says nothing of the new ones.
  const nlohmann::json moved = Allocated("pair", {{"a", "gpu-0"}, {"c", "gpu-0"}});
  claims.on_update(moved, moved);
  EXPECT_EQ(topology("same_pcie_root"), 0);
  EXPECT_EQ(topology("unknown"), 1);

  // Deleted: its series and count go.
  claims.on_delete(Allocated("wide", {{"a", "gpu-2"}, {"a", "gpu-0"}}));
  EXPECT_EQ(topology("cross_numa"), 0);
  EXPECT_EQ(testing::Value(exported, "dralens_cluster_claim_spread", {{"claim", "wide"}}), -1);
}

// The slices a node of a built-in simulated profile publishes, named for the analyzer.
std::vector<nlohmann::json> ProfileSlices(const std::string& profile, const std::string& node) {
  auto source = driver::discovery::MakeDeviceSource("simulated", profile, node);
  EXPECT_TRUE(source.ok()) << source.status();
  auto inventory = (*source)->Discover();
  EXPECT_TRUE(inventory.ok()) << inventory.status();
  auto slices = driver::slices::SliceBuilder({node, "", testing::kDriver}, {}).Build(*inventory);
  EXPECT_TRUE(slices.ok()) << slices.status();
  std::vector<nlohmann::json> out;
  for (model::ResourceSlice& slice : *slices) {
    slice.metadata.name = node + "-" + std::to_string(out.size());
    out.push_back(model::Encode(slice));
  }
  return out;
}

TEST(ClaimTopologyTest, NvLinkFromThePublishedDomains) {
  prometheus::Registry registry;
  telemetry::NoopTracer tracer;
  common::FakeClock clock;
  AnalyzerOptions options{PriceTable{}, &clock};
  options.topology_sensitive_classes = {"gpu"};
  Analyzer analyzer(registry, tracer, options);
  k8s::InformerHandlers claims = HandlersFor(k8s::kResourceClaims, analyzer);
  k8s::InformerHandlers slices = HandlersFor(k8s::kResourceSlices, analyzer);
  HandlersFor(k8s::kDeviceClasses, analyzer).on_add(testing::Class("gpu", "true"));
  for (const char* node : {"dgx-a", "dgx-b"}) {
    for (const nlohmann::json& slice : ProfileSlices("dgx-h100", node)) {
      slices.on_add(slice);
    }
  }
  for (const nlohmann::json& slice : ProfileSlices("a100-40gb", "pcie-a")) {
    slices.on_add(slice);
  }
  // The first and the last GPU of a node are under different sockets: cross_numa either way,
  // but on the DGX they talk over NVSwitch, on the PCIe server over the inter-socket link.
  claims.on_add(Allocated("dgx-pair", {{"dgx-a", "gpu-0"}, {"dgx-a", "gpu-7"}}));
  claims.on_add(Allocated("pcie-pair", {{"pcie-a", "gpu-0"}, {"pcie-a", "gpu-7"}}));
  // Two DGX nodes: each its own NVLink domain, however alike they are.
  claims.on_add(Allocated("two-dgx", {{"dgx-a", "gpu-1"}, {"dgx-b", "gpu-1"}}));

  const testing::Exported exported(registry, analyzer);
  auto spread = [&](const std::string& claim) {
    std::map<std::string, std::string> labels;
    for (const char* spread : {"same_pcie_root", "same_numa", "cross_numa", "cross_node"}) {
      for (const char* nvlink : {"connected", "not_connected", "unknown"}) {
        if (testing::Value(exported, "dralens_cluster_claim_spread",
                           {{"claim", claim}, {"spread", spread}, {"nvlink", nvlink}}) == 2) {
          labels[spread] = nvlink;
        }
      }
    }
    return labels;
  };
  EXPECT_EQ(spread("dgx-pair"), (std::map<std::string, std::string>{{"cross_numa", "connected"}}));
  EXPECT_EQ(spread("pcie-pair"),
            (std::map<std::string, std::string>{{"cross_numa", "not_connected"}}));
  EXPECT_EQ(spread("two-dgx"),
            (std::map<std::string, std::string>{{"cross_node", "not_connected"}}));
  auto topology = [&](const std::string& spread, const std::string& nvlink) {
    return testing::Value(
        exported, "dralens_cluster_claim_topology",
        {{"device_class", "gpu"}, {"namespace", "team"}, {"spread", spread}, {"nvlink", nvlink}});
  };
  EXPECT_EQ(topology("cross_numa", "connected"), 1);
  EXPECT_EQ(topology("cross_numa", "not_connected"), 1);
  EXPECT_EQ(topology("cross_node", "not_connected"), 1);

  // The DGX's slices are republished without NVLink (links down after a reboot): the claim is
  // judged again from what the devices now say.
  for (nlohmann::json slice : ProfileSlices("dgx-h100", "dgx-a")) {
    for (nlohmann::json& device : slice["spec"]["devices"]) {
      device["attributes"].erase("nvlinkDomain");
    }
    slices.on_update(slice, slice);
  }
  EXPECT_EQ(topology("cross_numa", "connected"), 0);
  EXPECT_EQ(topology("cross_numa", "not_connected"), 2);
}

}  // namespace
}  // namespace dralens::exporter::cluster
