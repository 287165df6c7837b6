// The NVLink layouts of simulated profiles: the built-ins, the JSON keys and their errors, and
// the domains a simulated node reports.
#include <set>
#include <string>

#include "driver/discovery/simulated/simulated_device_source.h"
#include "driver/discovery/simulated/simulated_profile.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::driver::discovery {
namespace {

using ::testing::HasSubstr;

// nvlink_domain of each GPU of `profile` on `node`, by minor.
std::vector<std::string> Domains(const SimulatedProfile& profile, const char* node = "node-a") {
  auto source = SimulatedDeviceSource::Create(profile, node);
  EXPECT_TRUE(source.ok()) << source.status();
  if (!source.ok()) {
    return {};
  }
  auto inventory = (*source)->Discover();
  EXPECT_TRUE(inventory.ok()) << inventory.status();
  std::vector<std::string> out;
  for (const model::GpuInfo& gpu : inventory->gpus()) {
    out.push_back(gpu.nvlink_domain);
  }
  return out;
}

std::vector<std::string> BuiltinDomains(const char* name, const char* node = "node-a") {
  auto profile = BuiltinSimulatedProfile(name);
  EXPECT_TRUE(profile.ok()) << name;
  return profile.ok() ? Domains(*profile, node) : std::vector<std::string>{};
}

TEST(SimulatedNvLink, DgxH100IsOneNvSwitchDomainAcrossItsTwoNumaNodes) {
  auto source = SimulatedDeviceSource::Create(*BuiltinSimulatedProfile("dgx-h100"), "node-a");
  ASSERT_TRUE(source.ok());
  auto inventory = (*source)->Discover();
  ASSERT_TRUE(inventory.ok());
  std::set<std::string> domains, roots;
  std::set<int> numa;
  for (const model::GpuInfo& gpu : inventory->gpus()) {
    domains.insert(gpu.nvlink_domain);
    roots.insert(gpu.pcie_root);
    numa.insert(gpu.numa_node.value_or(-1));
  }
  // Named after GPU 0, which has the lowest bus ID.
  EXPECT_THAT(domains, ::testing::ElementsAre(inventory->gpus()[0].uuid));
  EXPECT_EQ(numa, (std::set<int>{0, 1}));
  EXPECT_EQ(roots.size(), 8u);
}

TEST(SimulatedNvLink, BuiltinLayouts) {
  const std::vector<std::string> h100x2 = BuiltinDomains("h100x2");
  ASSERT_EQ(h100x2.size(), 2u);
  EXPECT_FALSE(h100x2[0].empty());
  EXPECT_EQ(h100x2[0], h100x2[1]);

  for (const std::string& domain : BuiltinDomains("a100-40gb")) {
    EXPECT_EQ(domain, "") << "a100-40gb is a PCIe-only server";
  }
  const std::vector<std::string> mixed = BuiltinDomains("mixed");
  EXPECT_EQ(std::set<std::string>(mixed.begin(), mixed.end()).size(), 1u);
  EXPECT_FALSE(mixed[0].empty());
}

TEST(SimulatedNvLink, LocalDomainsDifferBetweenNodes) {
  // Two nodes of one profile: each its own domain, or the cluster would call two GPUs on
  // different nodes NVLink-connected.
  EXPECT_NE(BuiltinDomains("dgx-h100", "node-a")[0], BuiltinDomains("dgx-h100", "node-b")[0]);
}

TEST(SimulatedNvLink, PairsFromJsonLeaveAnOddGpuOut) {
  auto profile =
      ParseSimulatedProfileJson(R"({"name":"n","nvlink":"pairs","gpus":[{"board":"a100-80gb",
                                  "count":3}]})");
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->nvlink, SimulatedNvLink::kPairs);
  const std::vector<std::string> domains = Domains(*profile);
  ASSERT_EQ(domains.size(), 3u);
  EXPECT_FALSE(domains[0].empty());
  EXPECT_EQ(domains[0], domains[1]);
  EXPECT_EQ(domains[2], "");
}

TEST(SimulatedNvLink, AFabricIsOneDomainOnEveryNode) {
  auto profile = ParseSimulatedProfileJson(
      R"({"name":"nvl72-tray","nvlink":"nvswitch",
          "nvlinkFabric":{"clusterUuid":"3F2A0001-ABCD-4000-8000-123456789ABC","cliqueId":7},
          "gpus":[{"board":"h100-80gb","count":4}]})");
  ASSERT_TRUE(profile.ok()) << profile.status();
  ASSERT_TRUE(profile->fabric.has_value());
  EXPECT_EQ(profile->fabric->clique_id, 7u);
  const std::string clique = "3f2a0001-abcd-4000-8000-123456789abc.7";
  for (const char* node : {"tray-1", "tray-2"}) {
    for (const std::string& domain : Domains(*profile, node)) {
      EXPECT_EQ(domain, clique) << node;
    }
  }
}

TEST(SimulatedNvLink, DefaultIsNone) {
  auto profile = ParseSimulatedProfileJson(R"({"name":"n","gpus":[{"board":"a30","count":2}]})");
  ASSERT_TRUE(profile.ok());
  EXPECT_EQ(profile->nvlink, SimulatedNvLink::kNone);
  EXPECT_FALSE(profile->fabric.has_value());
  for (const std::string& domain : Domains(*profile)) {
    EXPECT_EQ(domain, "");
  }
  auto none = ParseSimulatedProfileJson(R"({"name":"n","nvlink":"none","gpus":[{"board":"a30"}]})");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->nvlink, SimulatedNvLink::kNone);
}

TEST(SimulatedNvLink, BadKeysNameTheProblem) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"name":"n","nvlink":"mesh","gpus":[{"board":"a30"}]})",
       "nvlink: unknown value \"mesh\" (known: none, nvswitch, pairs)"},
      {R"({"name":"n","nvlink":true,"gpus":[{"board":"a30"}]})",
       "nvlink: expected a non-empty string"},
      {R"({"name":"n","nvlink":"nvswitch","nvlinkFabric":{"cliqueId":1},"gpus":[{"board":"a30"}]})",
       "nvlinkFabric.clusterUuid: required field missing"},
      {R"({"name":"n","nvlink":"nvswitch","nvlinkFabric":{"clusterUuid":"not-a-uuid",
           "cliqueId":1},"gpus":[{"board":"a30"}]})",
       "nvlinkFabric.clusterUuid: \"not-a-uuid\" is not a UUID"},
      {R"({"name":"n","nvlink":"nvswitch","nvlinkFabric":{"clusterUuid":
           "3f2a0001-abcd-4000-8000-123456789abg","cliqueId":1},"gpus":[{"board":"a30"}]})",
       "is not a UUID"},
      {R"({"name":"n","nvlink":"nvswitch","nvlinkFabric":{"clusterUuid":
           "3f2a0001-abcd-4000-8000-123456789abc","cliqueId":-1},"gpus":[{"board":"a30"}]})",
       "nvlinkFabric.cliqueId: -1 is out of range"},
      {R"({"name":"n","nvlink":"nvswitch","nvlinkFabric":{"clusterUuid":
           "3f2a0001-abcd-4000-8000-123456789abc","cliqueId":1,"id":2},"gpus":[{"board":"a30"}]})",
       "nvlinkFabric.id: unknown field"},
  };
  for (const Case& c : cases) {
    auto profile = ParseSimulatedProfileJson(c.json);
    EXPECT_EQ(profile.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(profile.status().message(), HasSubstr(c.message)) << c.json;
  }
  // A fabric without NVSwitch is a semantic error.
  auto pairs = ParseSimulatedProfileJson(
      R"({"name":"n","nvlink":"pairs","nvlinkFabric":{"clusterUuid":
          "3f2a0001-abcd-4000-8000-123456789abc","cliqueId":1},"gpus":[{"board":"a30"}]})");
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  EXPECT_THAT(ValidateSimulatedProfile(*pairs).message(),
              HasSubstr("nvlinkFabric needs nvlink \"nvswitch\""));
  EXPECT_FALSE(SimulatedDeviceSource::Create(*pairs, "node-a").ok());
}

}  // namespace
}  // namespace dralens::driver::discovery
