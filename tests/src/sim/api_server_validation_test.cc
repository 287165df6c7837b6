// Write validation of ResourceSlices, and the name and quantity syntax: each rule with one
// passing and one failing case, checked over HTTP against a 1.34 and a 1.35 server (the
// ResourceSlice limits differ).
#include "gtest/gtest.h"
#include "src/sim/names.h"
#include "tests/src/sim/validation_fixture.h"

namespace dralens::sim::testing {
namespace {

TEST_F(ValidationTest, ResourceSliceRules) {
  auto devices = [](int n, bool taint) {
    json list = json::array();
    for (int i = 0; i < n; ++i) {
      json d = Device("gpu-" + std::to_string(i));
      if (taint) {
        d["taints"] = {{{"key", "example.com/t"}, {"effect", "NoSchedule"}}};
      }
      list.push_back(d);
    }
    return list;
  };
  auto taints = [](int n) {
    json list = json::array();
    for (int i = 0; i < n; ++i) {
      list.push_back({{"key", "example.com/t" + std::to_string(i)}, {"effect", "NoExecute"}});
    }
    return list;
  };
  auto attrs = [](int n) {
    json m = json::object();
    for (int i = 0; i < n; ++i) {
      m["a" + std::to_string(i)] = {{"int", i}};
    }
    return m;
  };
  json counters = {{{"name", "gpu-0-counters"}, {"counters", {{"memory", {{"value", "40Gi"}}}}}}};
  std::vector<Case> cases = {
      Both(
          "valid", [](json&) {}, Pass()),
      Both(
          "name not a DNS subdomain", [](json& s) { s["metadata"]["name"] = "Bad_Name"; },
          Fail("metadata.name")),
      Both(
          "name of 253 chars", [](json& s) { s["metadata"]["name"] = std::string(253, 'a'); },
          Pass()),
      Both(
          "name of 254 chars", [](json& s) { s["metadata"]["name"] = std::string(254, 'a'); },
          Fail("metadata.name")),
      Both(
          "driver missing", [](json& s) { s["spec"].erase("driver"); }, Fail("spec.driver")),
      Both(
          "driver not a DNS subdomain", [](json& s) { s["spec"]["driver"] = "GPU"; },
          Fail("spec.driver")),
      Both(
          "driver of 63 chars",
          [](json& s) { s["spec"]["driver"] = std::string(59, 'a') + ".dev"; }, Pass()),
      Both(
          "driver of 64 chars",
          [](json& s) { s["spec"]["driver"] = std::string(60, 'a') + ".dev"; },
          Fail("spec.driver")),
      Both(
          "pool name with slash", [](json& s) { s["spec"]["pool"]["name"] = "rack-1/node-a"; },
          Pass()),
      Both(
          "pool name with empty part", [](json& s) { s["spec"]["pool"]["name"] = "a//b"; },
          Fail("spec.pool.name")),
      Both(
          "pool name of 254 chars",
          [](json& s) { s["spec"]["pool"]["name"] = std::string(254, 'a'); },
          Fail("spec.pool.name")),
      Both(
          "pool generation 0", [](json& s) { s["spec"]["pool"]["generation"] = 0; }, Pass()),
      Both(
          "pool generation negative", [](json& s) { s["spec"]["pool"]["generation"] = -1; },
          Fail("spec.pool.generation")),
      Both(
          "resourceSliceCount 0", [](json& s) { s["spec"]["pool"]["resourceSliceCount"] = 0; },
          Fail("spec.pool.resourceSliceCount")),
      Both(
          "no node selection", [](json& s) { s["spec"].erase("nodeName"); }, Fail("spec")),
      Both(
          "allNodes only",
          [](json& s) {
            s["spec"].erase("nodeName");
            s["spec"]["allNodes"] = true;
          },
          Pass()),
      Both(
          "nodeName and allNodes", [](json& s) { s["spec"]["allNodes"] = true; }, Fail("spec")),
      Both(
          "nodeSelector with one term",
          [](json& s) {
            s["spec"].erase("nodeName");
            s["spec"]["nodeSelector"] = {
                {"nodeSelectorTerms",
                 {{{"matchExpressions", {{{"key", "gpu"}, {"operator", "Exists"}}}}}}}};
          },
          Pass()),
      Both(
          "nodeSelector with two terms",
          [](json& s) {
            s["spec"].erase("nodeName");
            s["spec"]["nodeSelector"] = {{"nodeSelectorTerms", {json::object(), json::object()}}};
          },
          Fail("spec.nodeSelector.nodeSelectorTerms")),
      Both(
          "perDeviceNodeSelection with per-device nodeName",
          [](json& s) {
            s["spec"].erase("nodeName");
            s["spec"]["perDeviceNodeSelection"] = true;
            Dev0(s)["nodeName"] = "node-a";
          },
          Pass()),
      Both(
          "perDeviceNodeSelection without per-device node",
          [](json& s) {
            s["spec"].erase("nodeName");
            s["spec"]["perDeviceNodeSelection"] = true;
          },
          Fail("spec.devices[0]")),
      Both(
          "device nodeName without perDeviceNodeSelection",
          [](json& s) { Dev0(s)["nodeName"] = "node-a"; }, Fail("spec.devices[0]")),
      Both(
          "128 devices", [&](json& s) { s["spec"]["devices"] = devices(128, false); }, Pass()),
      Both(
          "129 devices", [&](json& s) { s["spec"]["devices"] = devices(129, false); },
          Fail("spec.devices")),
      {"65 tainted devices (64 max from 1.35)",
       [&](json& s) { s["spec"]["devices"] = devices(65, true); }, Pass(), Fail("spec.devices")},
      Both(
          "64 tainted devices", [&](json& s) { s["spec"]["devices"] = devices(64, true); }, Pass()),
      Both(
          "device name not a DNS label", [](json& s) { Dev0(s)["name"] = "GPU_0"; },
          Fail("spec.devices[0].name")),
      Both(
          "duplicate device names",
          [](json& s) { s["spec"]["devices"].push_back(Device("gpu-0")); },
          Fail("spec.devices[1].name")),
      Both(
          "32 attributes and capacities",
          [&](json& s) {
            Dev0(s)["attributes"] = attrs(31);
            Dev0(s)["capacity"] = {{"memory", {{"value", "1Gi"}}}};
          },
          Pass()),
      Both(
          "33 attributes and capacities",
          [&](json& s) {
            Dev0(s)["attributes"] = attrs(32);
            Dev0(s)["capacity"] = {{"memory", {{"value", "1Gi"}}}};
          },
          Fail("spec.devices[0]")),
      Both(
          "attribute name not a C identifier",
          [](json& s) {
            Dev0(s)["attributes"]["9lives"] = {{"int", 1}};
          },
          Fail("spec.devices[0].attributes[9lives]")),
      Both(
          "attribute name of 33 chars",
          [](json& s) {
            Dev0(s)["attributes"][std::string(33, 'a')] = {{"int", 1}};
          },
          Fail("spec.devices[0].attributes[" + std::string(33, 'a') + "]")),
      Both(
          "qualified attribute name",
          [](json& s) {
            Dev0(s)["attributes"]["example.com/numa_node"] = {{"int", 1}};
          },
          Pass()),
      Both(
          "attribute domain not a DNS subdomain",
          [](json& s) {
            Dev0(s)["attributes"]["Example.com/x"] = {{"int", 1}};
          },
          Fail("spec.devices[0].attributes[Example.com/x]")),
      Both(
          "attribute with two values",
          [](json& s) {
            Dev0(s)["attributes"]["type"] = {{"string", "gpu"}, {"int", 1}};
          },
          Fail("spec.devices[0].attributes[type]")),
      Both(
          "attribute without value",
          [](json& s) { Dev0(s)["attributes"]["type"] = json::object(); },
          Fail("spec.devices[0].attributes[type]")),
      Both(
          "string of 64 chars",
          [](json& s) {
            Dev0(s)["attributes"]["type"] = {{"string", std::string(64, 'x')}};
          },
          Pass()),
      Both(
          "string of 65 chars",
          [](json& s) {
            Dev0(s)["attributes"]["type"] = {{"string", std::string(65, 'x')}};
          },
          Fail("spec.devices[0].attributes[type].string")),
      Both(
          "semver version",
          [](json& s) {
            Dev0(s)["attributes"]["v"] = {{"version", "1.2.3-rc.1+build.5"}};
          },
          Pass()),
      Both(
          "non-semver version",
          [](json& s) {
            Dev0(s)["attributes"]["v"] = {{"version", "1.2"}};
          },
          Fail("spec.devices[0].attributes[v].version")),
      Both(
          "bool attribute",
          [](json& s) {
            Dev0(s)["attributes"]["b"] = {{"bool", true}};
          },
          Pass()),
      Both(
          "decimal quantity",
          [](json& s) {
            Dev0(s)["capacity"] = {{"memory", {{"value", "1.5Gi"}}}};
          },
          Pass()),
      Both(
          "exponent quantity",
          [](json& s) {
            Dev0(s)["capacity"] = {{"memory", {{"value", "1e3"}}}};
          },
          Pass()),
      Both(
          "bad quantity",
          [](json& s) {
            Dev0(s)["capacity"] = {{"memory", {{"value", "40GB"}}}};
          },
          Fail("spec.devices[0].capacity[memory].value", 400)),
      Both(
          "capacity without value",
          [](json& s) {
            Dev0(s)["capacity"] = {{"memory", json::object()}};
          },
          Fail("spec.devices[0].capacity[memory].value")),
      Both(
          "taint effect None",
          [](json& s) {
            Dev0(s)["taints"] = {{{"key", "k"}, {"effect", "None"}}};
          },
          Pass()),
      Both(
          "taint effect unknown",
          [](json& s) {
            Dev0(s)["taints"] = {{{"key", "k"}, {"effect", "PreferNoSchedule"}}};
          },
          Fail("spec.devices[0].taints[0].effect")),
      Both(
          "taint without key",
          [](json& s) {
            Dev0(s)["taints"] = {{{"effect", "NoSchedule"}}};
          },
          Fail("spec.devices[0].taints[0].key")),
      Both(
          "4 taints", [&](json& s) { Dev0(s)["taints"] = taints(4); }, Pass()),
      {"5 taints (4 max in 1.34, 16 from 1.35)", [&](json& s) { Dev0(s)["taints"] = taints(5); },
       Fail("spec.devices[0].taints"), Pass()},
      Both(
          "17 taints", [&](json& s) { Dev0(s)["taints"] = taints(17); },
          Fail("spec.devices[0].taints")),
      {"devices and sharedCounters together (split from 1.35)",
       [&](json& s) {
         s["spec"]["sharedCounters"] = counters;
         Dev0(s)["consumesCounters"] = {
             {{"counterSet", "gpu-0-counters"}, {"counters", {{"memory", {{"value", "10Gi"}}}}}}};
       },
       Pass(), Fail("spec")},
      Both(
          "counters-only slice",
          [&](json& s) {
            s["spec"].erase("devices");
            s["spec"]["sharedCounters"] = counters;
          },
          Pass()),
      Both(
          "counter set name not a DNS label",
          [&](json& s) {
            s["spec"].erase("devices");
            s["spec"]["sharedCounters"] = counters;
            s["spec"]["sharedCounters"][0]["name"] = "Bad_Set";
          },
          Fail("spec.sharedCounters[0].name")),
      {"consumesCounters naming an unknown set (checked in-slice in 1.34)",
       [](json& s) {
         Dev0(s)["consumesCounters"] = {
             {{"counterSet", "missing"}, {"counters", {{"memory", {{"value", "1Gi"}}}}}}};
       },
       Fail("spec.devices[0].consumesCounters[0].counterSet"), Pass()},
      Both(
          "wrong JSON type", [](json& s) { s["spec"]["pool"]["generation"] = "one"; },
          Fail("spec.pool.generation", 400)),
  };
  Run(kSlices, Slice("s"), cases);
}

TEST_F(ValidationTest, ResourceSliceDriverIsImmutable) {
  Reply created = h34_->Post(kSlices, Slice("s"));
  ASSERT_EQ(created.status, 201);
  json changed = created.body;
  changed["spec"]["driver"] = "other.example.com";
  Reply r = h34_->Put(std::string(kSlices) + "/s", changed);
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(r.body["details"]["causes"][0]["field"], "spec.driver");
  EXPECT_EQ(r.body["details"]["kind"], "ResourceSlice");
  EXPECT_EQ(r.body["details"]["causes"][0]["reason"], "FieldValueInvalid");
}

TEST(NamesTest, QuantitySyntax) {
  for (const char* ok : {"1", "0", "+1", "-1", "1.5", ".5", "1.", "40Gi", "100m", "1e3", "1E-3",
                         "2Ki", "3k", "7Ei", "1.5Mi"}) {
    EXPECT_TRUE(IsQuantity(ok)) << ok;
  }
  for (const char* bad : {"", "Gi", "1GB", "1.2.3", "1 Gi", "1e", "1ki", "--1", "0x10", "1Gi "}) {
    EXPECT_FALSE(IsQuantity(bad)) << bad;
  }
}

TEST(NamesTest, SemverAndNames) {
  for (const char* ok :
       {"1.0.0", "10.20.30", "1.0.0-alpha.1", "1.0.0+20130313144700", "1.0.0-rc.1+build.1"}) {
    EXPECT_TRUE(IsSemver(ok)) << ok;
  }
  for (const char* bad : {"1.0", "v1.0.0", "01.0.0", "1.0.0-", "1.0.0-01", "1.0.0+"}) {
    EXPECT_FALSE(IsSemver(bad)) << bad;
  }
  EXPECT_TRUE(CheckDnsLabel("gpu-0").empty());
  EXPECT_FALSE(CheckDnsLabel("gpu.0").empty());
  EXPECT_FALSE(CheckDnsLabel(std::string(64, 'a')).empty());
  EXPECT_TRUE(CheckDnsSubdomain("gpu.dralens.dev").empty());
  EXPECT_FALSE(CheckDnsSubdomain("-gpu").empty());
  EXPECT_TRUE(CheckCIdentifier("_my_name1").empty());
  EXPECT_FALSE(CheckCIdentifier("1abc").empty());
  EXPECT_TRUE(CheckQualifiedName("example.com/My.Name").empty());
  EXPECT_FALSE(CheckQualifiedName("a/b/c").empty());
  EXPECT_TRUE(CheckLabelValue("").empty());
  EXPECT_FALSE(CheckLabelValue("-x").empty());
  EXPECT_TRUE(CheckNamePrefix("node-a-", false).empty());
}

}  // namespace
}  // namespace dralens::sim::testing
