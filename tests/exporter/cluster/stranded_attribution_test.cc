// Where stranded capacity is attributed: free MIG capacity that no pending request fits is an
// unplaceable fragment of no class, and free_while_pending follows the longest-pending claim the
// free GPUs could serve, across request shapes and classes.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/feed.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "tests/exporter/cluster/scenario_util.h"

namespace dralens::exporter::cluster {
namespace {

using nlohmann::json;
using testing::Attr;
using testing::Collect;
using testing::kDriver;
using testing::Sample;

// Free MIG capacity that no pending request fits is an unplaceable fragment, of no class; once
// a pending request fits a free device, the same capacity is free_while_pending instead.
TEST(GpuTruthFragmentTest, FreeMigCapacityNoPendingRequestFits) {
  prometheus::Registry registry;
  telemetry::NoopTracer tracer;
  common::FakeClock clock;
  Analyzer analyzer(registry, tracer, AnalyzerOptions{{}, &clock});
  auto mig = [](const std::string& name, int start, int size) {
    json d = {{"name", name},
              {"attributes",
               {{"type", {{"string", "mig"}}},
                {"productName", {{"string", "A100"}}},
                {"parentUUID", {{"string", "GPU-0"}}},
                {"profile", {{"string", absl::StrCat(size, "g")}}}}},
              {"capacity", json::object()}};
    for (int s = start; s < start + size; ++s) {
      d["capacity"][absl::StrCat("memorySlice", s)] = {{"value", "1"}};
    }
    return d;
  };
  json slice = {{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceSlice"},
                {"metadata", {{"name", "n-gpus"}}},
                {"spec",
                 {{"driver", kDriver},
                  {"nodeName", "n"},
                  {"pool", {{"name", "n"}, {"generation", 1}, {"resourceSliceCount", 1}}},
                  {"devices", json::array({mig("mig-4g-0", 0, 4), mig("mig-2g-4", 4, 2),
                                           mig("mig-2g-6", 6, 2)})}}}};
  auto claim = [](const std::string& name, const std::string& profile, int minute) {
    return json{
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceClaim"},
        {"metadata",
         {{"namespace", "team"},
          {"name", name},
          {"uid", "uid-" + name},
          {"creationTimestamp", absl::StrCat("2026-11-25T10:", 10 + minute, ":00Z")}}},
        {"spec",
         {{"devices",
           {{"requests",
             json::array({{{"name", "req"},
                           {"exactly",
                            {{"deviceClassName", "mig"},
                             {"selectors",
                              json::array({{{"cel",
                                             {{"expression", Attr("profile") + " == '" + profile +
                                                                 "'"}}}}})}}}}})}}}}}};
  };
  json held = claim("held", "4g", 0);
  held["status"]["allocation"]["devices"]["results"] = json::array(
      {{{"request", "req"}, {"driver", kDriver}, {"pool", "n"}, {"device", "mig-4g-0"}}});
  HandlersFor(k8s::kDeviceClasses, analyzer)
      .on_add({{"apiVersion", "resource.k8s.io/v1"},
               {"kind", "DeviceClass"},
               {"metadata", {{"name", "mig"}}},
               {"spec",
                {{"selectors",
                  json::array({{{"cel", {{"expression", Attr("type") + " == 'mig'"}}}}})}}}});
  HandlersFor(k8s::kNodes, analyzer)
      .on_add(
          {{"apiVersion", "v1"},
           {"kind", "Node"},
           {"metadata", {{"name", "n"}}},
           {"status", {{"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}});
  HandlersFor(k8s::kResourceSlices, analyzer).on_add(slice);
  k8s::InformerHandlers claims = HandlersFor(k8s::kResourceClaims, analyzer);
  claims.on_add(held);
  claims.on_add(claim("big", "3g", 1));  // no 3g instance exists
  analyzer.SetNodesSynced();

  auto stranded = [&](const std::string& kind, const std::string& cls) {
    double sum = -1;
    for (const Sample& s :
         Collect(testing::Exported(registry, analyzer), "dralens_cluster_stranded_gpus")) {
      if (s.labels.at("kind") == kind && s.labels.at("device_class") == cls) {
        sum = std::max(sum, 0.0) + s.value;
      }
    }
    return sum;
  };
  // Half the GPU (the two free 2g instances) fits nothing that pends.
  EXPECT_DOUBLE_EQ(stranded("unplaceable_fragment", ""), 0.5);
  EXPECT_DOUBLE_EQ(stranded("allocated_not_running", "mig"), 0.5);
  EXPECT_LE(stranded("free_while_pending", "mig"), 0);

  // A 2g claim pends too: the free half could serve it.
  claims.on_add(claim("small", "2g", 2));
  EXPECT_DOUBLE_EQ(stranded("free_while_pending", "mig"), 0.5);
  EXPECT_LE(stranded("unplaceable_fragment", ""), 0);
}

// An analyzer on a fake clock, fed through the handlers its informers would call.
class FedAnalyzerTest : public ::testing::Test {
 protected:
  void Add(const k8s::ResourceType& type, const json& object) {
    HandlersFor(type, analyzer_).on_add(object);
  }
  // A class, a Ready node and its slice of whole GPUs.
  void AddClass(const std::string& name, const std::string& cel) {
    Add(k8s::kDeviceClasses, testing::Class(name, cel));
  }
  void AddNode(const std::string& node, const std::vector<testing::DeviceSpec>& gpus) {
    Add(k8s::kNodes, testing::Node(node, true));
    Add(k8s::kResourceSlices, testing::Slice(node, gpus));
  }
  // GPUs stranded free_while_pending for `cls` (on `node`, or on every node).
  double FreeWhilePending(const std::string& cls, const std::string& node = "") {
    double sum = 0;
    for (const Sample& s :
         Collect(testing::Exported(registry_, analyzer_), "dralens_cluster_stranded_gpus")) {
      if (s.labels.at("kind") == "free_while_pending" && s.labels.at("device_class") == cls &&
          (node.empty() || s.labels.at("node") == node)) {
        sum += s.value;
      }
    }
    return sum;
  }

  prometheus::Registry registry_;
  telemetry::NoopTracer tracer_;
  common::FakeClock clock_;
  Analyzer analyzer_{registry_, tracer_, AnalyzerOptions{{}, &clock_}};
  k8s::InformerHandlers claims_ = HandlersFor(k8s::kResourceClaims, analyzer_);
};

// free_while_pending goes to the class of the longest-pending claim the free GPUs could serve.
// When a shape's longest-pending claim changes, a node's class moves only if another class
// pends between the old and the new one (or the two differ); the analyzer recomputes the
// shape's nodes only then, and must not miss that case.
TEST_F(FedAnalyzerTest, FreeWhilePendingFollowsTheLongestPendingClaimAcrossShapes) {
  AddClass("gpu", Attr("type") + " == 'gpu'");
  AddClass("big", Attr("type") + " == 'gpu'");
  AddNode("a", testing::WholeGpus("a", 2));
  auto claim = [](const std::string& name, const std::string& cls, int minute) {
    json c = testing::Claim("team", name, cls);
    c["metadata"]["uid"] = "uid-" + name;
    c["metadata"]["creationTimestamp"] = absl::StrCat("2026-11-25T10:", 20 + minute, ":00Z");
    return c;
  };
  claims_.on_add(claim("x1", "gpu", 1));
  claims_.on_add(claim("y1", "big", 2));
  claims_.on_add(claim("x2", "gpu", 3));
  analyzer_.SetNodesSynced();
  EXPECT_DOUBLE_EQ(FreeWhilePending("gpu"), 2);  // x1 pends longest
  EXPECT_DOUBLE_EQ(FreeWhilePending("big"), 0);

  // x1 is allocated gpu-0: its shape's longest-pending claim is now x2, of the same class, but
  // y1 (big) pends longer than x2. The free gpu-1 moves to big.
  json x1 = claim("x1", "gpu", 1);
  x1["status"]["allocation"]["devices"]["results"] =
      json::array({{{"request", "req"}, {"driver", kDriver}, {"pool", "a"}, {"device", "gpu-0"}}});
  claims_.on_update(claim("x1", "gpu", 1), x1);
  EXPECT_DOUBLE_EQ(FreeWhilePending("big"), 1);
  EXPECT_DOUBLE_EQ(FreeWhilePending("gpu"), 0);

  // y1 goes: x2 is the longest-pending claim.
  claims_.on_delete(claim("y1", "big", 2));
  EXPECT_DOUBLE_EQ(FreeWhilePending("gpu"), 1);
  EXPECT_DOUBLE_EQ(FreeWhilePending("big"), 0);

  // y0 (big) pends longer than x2: the class moves back to big.
  claims_.on_add(claim("y0", "big", -1));
  EXPECT_DOUBLE_EQ(FreeWhilePending("big"), 1);
  EXPECT_DOUBLE_EQ(FreeWhilePending("gpu"), 0);

  // x0 (gpu) pends longer than y0: gpu again, though x2 (gpu) was its shape's first already.
  claims_.on_add(claim("x0", "gpu", -2));
  EXPECT_DOUBLE_EQ(FreeWhilePending("gpu"), 1);
  EXPECT_DOUBLE_EQ(FreeWhilePending("big"), 0);

  // y0 goes, then x4 (gpu) becomes its shape's first with nothing in between: still gpu.
  claims_.on_delete(claim("y0", "big", -1));
  claims_.on_add(claim("x4", "gpu", -3));
  EXPECT_DOUBLE_EQ(FreeWhilePending("gpu"), 1);
  EXPECT_DOUBLE_EQ(FreeWhilePending("big"), 0);
}

// A request shape orders its pending claims by creation time, then by key: claims created in
// the same instant are each kept, and each gets its reason when the counts move.
TEST_F(FedAnalyzerTest, ClaimsCreatedInTheSameInstantEachFollowTheirShape) {
  AddClass("gpu", Attr("type") + " == 'gpu'");
  AddNode("a", testing::WholeGpus("a", 1));
  auto claim = [](const std::string& name) {
    json c = testing::Claim("team", name, "gpu");
    c["metadata"]["uid"] = "uid-" + name;
    c["metadata"]["creationTimestamp"] = "2026-11-25T10:20:00Z";
    return c;
  };
  analyzer_.SetNodesSynced();
  for (const char* name : {"x3", "x1", "x2"}) {
    claims_.on_add(claim(name));
  }
  for (const char* key : {"team/x1", "team/x2", "team/x3"}) {
    EXPECT_EQ(analyzer_.PendingReasonOf(key), PendingReason::kWaitingForPod) << key;
  }
  // The only GPU is taken: every one of them now lacks capacity.
  claims_.on_add(testing::Holding("holder", {"gpu-0"}));
  for (const char* key : {"team/x1", "team/x2", "team/x3"}) {
    EXPECT_EQ(analyzer_.PendingReasonOf(key), PendingReason::kNoCapacity) << key;
  }
  // One of them goes; the others stay in their shape and follow the GPU when it is free again.
  claims_.on_delete(claim("x2"));
  claims_.on_delete(testing::Holding("holder", {"gpu-0"}));
  EXPECT_FALSE(analyzer_.PendingReasonOf("team/x2").has_value());
  for (const char* key : {"team/x1", "team/x3"}) {
    EXPECT_EQ(analyzer_.PendingReasonOf(key), PendingReason::kWaitingForPod) << key;
  }
}

// A claim is attributed its first request's class, so one shape can hold claims of two classes
// (a claim whose second request is of the shape's class). When such a claim leaves, its shape's
// longest-pending claim changes class and the free GPUs of the shape's nodes change class with
// it, even though no other shape pends in between.
TEST_F(FedAnalyzerTest, FreeWhilePendingFollowsAClassChangeWithinOneShape) {
  AddClass("gpu", Attr("type") + " == 'gpu'");
  // "big" only fits node b's GPU, which node a does not have.
  AddClass("big", Attr("productName") + " == 'B200'");
  AddNode("a", testing::WholeGpus("a", 1));
  std::vector<testing::DeviceSpec> big = testing::WholeGpus("b", 1);
  big[0].product = "B200";
  AddNode("b", big);
  // m: a "big" request, then a "gpu" one: class big, and pending in the gpu shape too.
  json m = testing::Claim("team", "m", "big");
  m["metadata"]["uid"] = "uid-m";
  m["metadata"]["creationTimestamp"] = "2026-11-25T10:20:00Z";
  m["spec"]["devices"]["requests"].push_back(
      {{"name", "second"}, {"exactly", {{"deviceClassName", "gpu"}, {"count", 1}}}});
  json x = testing::Claim("team", "x", "gpu");
  x["metadata"]["uid"] = "uid-x";
  x["metadata"]["creationTimestamp"] = "2026-11-25T10:21:00Z";
  claims_.on_add(m);
  claims_.on_add(x);
  analyzer_.SetNodesSynced();
  // m pends longest, and node a's GPU fits its request.
  EXPECT_DOUBLE_EQ(FreeWhilePending("big", "a"), 1);
  EXPECT_DOUBLE_EQ(FreeWhilePending("gpu", "a"), 0);
  claims_.on_delete(m);
  EXPECT_DOUBLE_EQ(FreeWhilePending("gpu", "a"), 1);  // x now
  EXPECT_DOUBLE_EQ(FreeWhilePending("big", "a"), 0);
}

}  // namespace
}  // namespace dralens::exporter::cluster
