// Write validation: each rule with one passing and one failing case, checked over HTTP against a
// 1.34 and a 1.35 server (the ResourceSlice limits differ).
#include <functional>

#include "gtest/gtest.h"
#include "src/sim/names.h"
#include "tests/src/sim/sim_test_util.h"

namespace dralens::sim::testing {
namespace {

using Mutator = std::function<void(json&)>;

struct Expect {
  int code = 201;
  std::string field;  // the first cause's field for failures
};

struct Case {
  std::string label;
  Mutator mutate;
  Expect v134;
  Expect v135;
};

Expect Pass() { return {201, ""}; }
Expect Fail(const std::string& field, int code = 422) { return {code, field}; }
Case Both(std::string label, Mutator m, Expect e) { return {std::move(label), std::move(m), e, e}; }

json Device(const std::string& name) {
  return {{"name", name}, {"attributes", {{"type", {{"string", "gpu"}}}}}};
}

json& Dev0(json& s) { return s["spec"]["devices"][0]; }
json& Req0(json& c) { return c["spec"]["devices"]["requests"][0]; }

class ValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ApiServerOptions o34;
    o34.git_version = "v1.34.1";
    ApiServerOptions o35;
    o35.git_version = "v1.35.0";
    s34_ = std::make_unique<ApiServer>(o34);
    s35_ = std::make_unique<ApiServer>(o35);
    ASSERT_TRUE(s34_->Start().ok());
    ASSERT_TRUE(s35_->Start().ok());
    h34_ = std::make_unique<Http>(s34_->port());
    h35_ = std::make_unique<Http>(s35_->port());
  }

  void Run(const std::string& collection, const json& base, const std::vector<Case>& cases) {
    int n = 0;
    for (const Case& c : cases) {
      json obj = base;
      // Unique names so passing cases do not collide.
      std::string suffix = "-" + std::to_string(n++);
      if (obj["metadata"].contains("name") && !obj["metadata"]["name"].get<std::string>().empty()) {
        obj["metadata"]["name"] = obj["metadata"]["name"].get<std::string>() + suffix;
      }
      c.mutate(obj);
      for (auto [http, want, version] :
           {std::tuple{h34_.get(), c.v134, "1.34"}, std::tuple{h35_.get(), c.v135, "1.35"}}) {
        SCOPED_TRACE(c.label + " on " + version);
        Reply r = http->Post(collection, obj);
        EXPECT_EQ(r.status, want.code) << r.raw;
        if (want.code != 201 && r.status == want.code) {
          ASSERT_TRUE(r.body["details"]["causes"].is_array()) << r.raw;
          std::vector<std::string> fields;
          for (const json& cause : r.body["details"]["causes"]) {
            fields.push_back(cause["field"]);
          }
          EXPECT_EQ(fields.front(), want.field) << r.raw;
          EXPECT_EQ(r.Reason(), want.code == 422 ? "Invalid" : "BadRequest");
        }
      }
    }
  }

  std::unique_ptr<ApiServer> s34_;
  std::unique_ptr<ApiServer> s35_;
  std::unique_ptr<Http> h34_;
  std::unique_ptr<Http> h35_;
};

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

TEST_F(ValidationTest, ResourceClaimRules) {
  auto requests = [](int n) {
    json list = json::array();
    for (int i = 0; i < n; ++i) {
      list.push_back({{"name", "r" + std::to_string(i)},
                      {"exactly", {{"deviceClassName", "gpu.dralens.dev"}}}});
    }
    return list;
  };
  auto subrequests = [](int n) {
    json list = json::array();
    for (int i = 0; i < n; ++i) {
      list.push_back({{"name", "s" + std::to_string(i)}, {"deviceClassName", "gpu.dralens.dev"}});
    }
    return list;
  };
  auto selectors = [](int n) {
    json list = json::array();
    for (int i = 0; i < n; ++i) {
      list.push_back({{"cel", {{"expression", "true"}}}});
    }
    return list;
  };
  auto config = [](int n) {
    json list = json::array();
    for (int i = 0; i < n; ++i) {
      list.push_back({{"opaque", {{"driver", "gpu.dralens.dev"}, {"parameters", json::object()}}}});
    }
    return list;
  };
  auto constraints = [](int n) {
    json list = json::array();
    for (int i = 0; i < n; ++i) {
      list.push_back({{"matchAttribute", "gpu.dralens.dev/productName"}});
    }
    return list;
  };
  std::vector<Case> cases = {
      Both(
          "valid", [](json&) {}, Pass()),
      Both(
          "32 requests", [&](json& c) { c["spec"]["devices"]["requests"] = requests(32); }, Pass()),
      Both(
          "33 requests", [&](json& c) { c["spec"]["devices"]["requests"] = requests(33); },
          Fail("spec.devices.requests")),
      Both(
          "request name not a DNS label", [](json& c) { Req0(c)["name"] = "GPU"; },
          Fail("spec.devices.requests[0].name")),
      Both(
          "duplicate request names",
          [](json& c) { c["spec"]["devices"]["requests"].push_back(Req0(c)); },
          Fail("spec.devices.requests[1].name")),
      Both(
          "neither exactly nor firstAvailable", [](json& c) { Req0(c).erase("exactly"); },
          Fail("spec.devices.requests[0]")),
      Both(
          "both exactly and firstAvailable",
          [&](json& c) { Req0(c)["firstAvailable"] = subrequests(1); },
          Fail("spec.devices.requests[0]")),
      Both(
          "8 subrequests",
          [&](json& c) {
            Req0(c).erase("exactly");
            Req0(c)["firstAvailable"] = subrequests(8);
          },
          Pass()),
      Both(
          "9 subrequests",
          [&](json& c) {
            Req0(c).erase("exactly");
            Req0(c)["firstAvailable"] = subrequests(9);
          },
          Fail("spec.devices.requests[0].firstAvailable")),
      Both(
          "deviceClassName missing", [](json& c) { Req0(c)["exactly"].erase("deviceClassName"); },
          Fail("spec.devices.requests[0].exactly.deviceClassName")),
      Both(
          "allocationMode All", [](json& c) { Req0(c)["exactly"]["allocationMode"] = "All"; },
          Pass()),
      Both(
          "allocationMode unknown", [](json& c) { Req0(c)["exactly"]["allocationMode"] = "Some"; },
          Fail("spec.devices.requests[0].exactly.allocationMode")),
      Both(
          "count 0", [](json& c) { Req0(c)["exactly"]["count"] = 0; },
          Fail("spec.devices.requests[0].exactly.count")),
      Both(
          "count 2", [](json& c) { Req0(c)["exactly"]["count"] = 2; }, Pass()),
      Both(
          "32 selectors", [&](json& c) { Req0(c)["exactly"]["selectors"] = selectors(32); },
          Pass()),
      Both(
          "33 selectors", [&](json& c) { Req0(c)["exactly"]["selectors"] = selectors(33); },
          Fail("spec.devices.requests[0].exactly.selectors")),
      Both(
          "empty CEL expression",
          [](json& c) {
            Req0(c)["exactly"]["selectors"] = {{{"cel", {{"expression", ""}}}}};
          },
          Fail("spec.devices.requests[0].exactly.selectors[0].cel.expression")),
      Both(
          "CEL expression of 10 KiB",
          [](json& c) {
            Req0(c)["exactly"]["selectors"] = {
                {{"cel", {{"expression", std::string(10 * 1024, 't')}}}}};
          },
          Pass()),
      Both(
          "CEL expression over 10 KiB",
          [](json& c) {
            Req0(c)["exactly"]["selectors"] = {
                {{"cel", {{"expression", std::string(10 * 1024 + 1, 't')}}}}};
          },
          Fail("spec.devices.requests[0].exactly.selectors[0].cel.expression")),
      Both(
          "32 configs", [&](json& c) { c["spec"]["devices"]["config"] = config(32); }, Pass()),
      Both(
          "33 configs", [&](json& c) { c["spec"]["devices"]["config"] = config(33); },
          Fail("spec.devices.config")),
      Both(
          "config without driver",
          [&](json& c) {
            c["spec"]["devices"]["config"] = config(1);
            c["spec"]["devices"]["config"][0]["opaque"].erase("driver");
          },
          Fail("spec.devices.config[0].opaque.driver")),
      Both(
          "config parameters not an object",
          [&](json& c) {
            c["spec"]["devices"]["config"] = config(1);
            c["spec"]["devices"]["config"][0]["opaque"]["parameters"] = json::array();
          },
          Fail("spec.devices.config[0].opaque.parameters")),
      Both(
          "config parameters over 10 KiB",
          [&](json& c) {
            c["spec"]["devices"]["config"] = config(1);
            c["spec"]["devices"]["config"][0]["opaque"]["parameters"] = {
                {"blob", std::string(10 * 1024, 'x')}};
          },
          Fail("spec.devices.config[0].opaque.parameters")),
      Both(
          "config naming an unknown request",
          [&](json& c) {
            c["spec"]["devices"]["config"] = config(1);
            c["spec"]["devices"]["config"][0]["requests"] = {"nope"};
          },
          Fail("spec.devices.config[0].requests[0]")),
      Both(
          "32 constraints", [&](json& c) { c["spec"]["devices"]["constraints"] = constraints(32); },
          Pass()),
      Both(
          "33 constraints", [&](json& c) { c["spec"]["devices"]["constraints"] = constraints(33); },
          Fail("spec.devices.constraints")),
      Both(
          "constraint with unqualified attribute",
          [&](json& c) {
            c["spec"]["devices"]["constraints"] = constraints(1);
            c["spec"]["devices"]["constraints"][0]["matchAttribute"] = "productName";
          },
          Fail("spec.devices.constraints[0].matchAttribute")),
      Both(
          "label value invalid",
          [](json& c) {
            c["metadata"]["labels"] = {{"a", "-bad-"}};
          },
          Fail("metadata.labels")),
      Both(
          "finalizer not qualified", [](json& c) { c["metadata"]["finalizers"] = {"mine"}; },
          Fail("metadata.finalizers[0]")),
      Both(
          "qualified finalizer",
          [](json& c) {
            c["metadata"]["finalizers"] = {"resource.kubernetes.io/delete-protection"};
          },
          Pass()),
  };
  Run(Claims(), Claim("c"), cases);
  Reply bad_ns = h34_->Post(Claims("Bad_NS"), Claim("c"));
  EXPECT_EQ(bad_ns.status, 422);
  EXPECT_EQ(bad_ns.body["details"]["causes"][0]["field"], "metadata.namespace");
}

TEST_F(ValidationTest, ResourceClaimStatusRules) {
  ASSERT_EQ(h34_->Post(Claims(), Claim("c")).status, 201);
  json c = h34_->Get(Claims() + "/c").body;
  // reservedFor needs an allocation.
  json reserved = c;
  reserved["status"]["reservedFor"] = {{{"resource", "pods"}, {"name", "p"}, {"uid", "u"}}};
  Reply r = h34_->Put(Claims() + "/c/status", reserved);
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(r.body["details"]["causes"][0]["field"], "status.reservedFor");
  // With an allocation it passes; 257 consumers do not.
  json allocation = json::object();
  allocation["devices"]["results"] = json::array({{{"request", "gpu"},
                                                   {"driver", "gpu.dralens.dev"},
                                                   {"pool", "node-a"},
                                                   {"device", "gpu-0"}}});
  reserved["status"]["allocation"] = allocation;
  Reply ok = h34_->Put(Claims() + "/c/status", reserved);
  ASSERT_EQ(ok.status, 200) << ok.raw;
  json many = ok.body;
  many["status"]["reservedFor"] = json::array();
  for (int i = 0; i < 257; ++i) {
    many["status"]["reservedFor"].push_back(
        {{"resource", "pods"}, {"name", "p"}, {"uid", "u" + std::to_string(i)}});
  }
  Reply too_many = h34_->Put(Claims() + "/c/status", many);
  EXPECT_EQ(too_many.status, 422);
  EXPECT_EQ(too_many.body["details"]["causes"][0]["field"], "status.reservedFor");
  many["status"]["reservedFor"].erase(256);
  EXPECT_EQ(h34_->Put(Claims() + "/c/status", many).status, 200);
  // An allocation cannot be changed in place.
  json realloc = h34_->Get(Claims() + "/c").body;
  realloc["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-1";
  Reply imm = h34_->Put(Claims() + "/c/status", realloc);
  EXPECT_EQ(imm.status, 422);
  EXPECT_EQ(imm.body["details"]["causes"][0]["field"], "status.allocation");
  EXPECT_NE(
      imm.body["message"].get<std::string>().find("ResourceClaim.resource.k8s.io \"c\" is invalid"),
      std::string::npos);
}

TEST_F(ValidationTest, DeviceClassAndOtherKinds) {
  std::vector<Case> cases = {
      Both(
          "valid", [](json&) {}, Pass()),
      Both(
          "empty selector expression",
          [](json& d) {
            d["spec"]["selectors"] = {{{"cel", {{"expression", ""}}}}};
          },
          Fail("spec.selectors[0].cel.expression")),
      Both(
          "selector without cel", [](json& d) { d["spec"]["selectors"] = {json::object()}; },
          Fail("spec.selectors[0].cel")),
      Both(
          "33 selectors",
          [](json& d) {
            d["spec"]["selectors"] = json::array();
            for (int i = 0; i < 33; ++i) {
              d["spec"]["selectors"].push_back({{"cel", {{"expression", "true"}}}});
            }
          },
          Fail("spec.selectors")),
      Both(
          "config with opaque parameters",
          [](json& d) {
            d["spec"]["config"] = {
                {{"opaque", {{"driver", "gpu.dralens.dev"}, {"parameters", {{"a", 1}}}}}}};
          },
          Pass()),
      Both(
          "config without opaque", [](json& d) { d["spec"]["config"] = {json::object()}; },
          Fail("spec.config[0].opaque")),
  };
  Run(kClasses, DeviceClass("gpu.dralens.dev"), cases);

  // Namespaces use DNS labels; other names DNS subdomains.
  EXPECT_EQ(h34_->Post("/api/v1/namespaces", {{"metadata", {{"name", "a.b"}}}}).status, 422);
  EXPECT_EQ(h34_->Post("/api/v1/namespaces", {{"metadata", {{"name", "ab"}}}}).status, 201);
  EXPECT_EQ(h34_->Post(kNodes, Node("node.example.com")).status, 201);
  Reply bad_node = h34_->Post(kNodes, Node("Node_A"));
  EXPECT_EQ(bad_node.status, 422);
  EXPECT_EQ(bad_node.body["message"].get<std::string>().rfind("Node \"Node_A\" is invalid", 0), 0u);
  json lease = Lease("l");
  lease["spec"]["leaseDurationSeconds"] = 0;
  Reply bad_lease = h34_->Post(Leases(), lease);
  EXPECT_EQ(bad_lease.status, 422);
  EXPECT_EQ(bad_lease.body["details"]["causes"][0]["field"], "spec.leaseDurationSeconds");
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
