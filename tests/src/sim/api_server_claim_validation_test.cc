// Write validation of ResourceClaims, their status, DeviceClasses and the other kinds: each
// rule with one passing and one failing case, checked over HTTP against a 1.34 and a 1.35
// server.
#include "gtest/gtest.h"
#include "tests/src/sim/validation_fixture.h"

namespace dralens::sim::testing {
namespace {

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

}  // namespace
}  // namespace dralens::sim::testing
