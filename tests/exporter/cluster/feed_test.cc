// The feed from informer events to the analyzer: each kind reaches its Upsert/Delete, an object
// that does not decode is skipped and the analyzer keeps what it had, and a Node's readiness is
// read from its Ready condition.
#include "exporter/cluster/feed.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/telemetry/tracing/tracer_impl.h"

namespace dralens::exporter::cluster {
namespace {

using nlohmann::json;

json Claim(const std::string& name) {
  return {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata",
       {{"namespace", "team"},
        {"name", name},
        {"uid", "uid-" + name},
        {"creationTimestamp", "2026-11-25T10:00:00Z"}}},
      {"spec",
       {{"devices",
         {{"requests", json::array({{{"name", "gpu"},
                                     {"exactly", {{"deviceClassName", "gpu.dralens.dev"}}}}})}}}}}};
}

json Node(const std::string& name, const json& conditions) {
  json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}};
  if (!conditions.is_null()) {
    node["status"]["conditions"] = conditions;
  }
  return node;
}

TEST(NodeInfoOfTest, ReadyFollowsTheReadyCondition) {
  EXPECT_TRUE(NodeInfoOf(Node("a", nullptr)).ready);
  EXPECT_TRUE(NodeInfoOf(Node("b", json::array({{{"type", "Ready"}, {"status", "True"}}}))).ready);
  EXPECT_FALSE(
      NodeInfoOf(Node("c", json::array({{{"type", "Ready"}, {"status", "False"}}}))).ready);
  EXPECT_FALSE(NodeInfoOf(Node("d", json::array({{{"type", "MemoryPressure"}, {"status", "False"}},
                                                 {{"type", "Ready"}, {"status", "Unknown"}}})))
                   .ready);
  EXPECT_EQ(NodeInfoOf(Node("e", nullptr)).name, "e");
}

class FeedTest : public ::testing::Test {
 protected:
  prometheus::Registry registry_;
  telemetry::NoopTracer tracer_;
  common::FakeClock clock_;
  Analyzer analyzer_{registry_, tracer_, AnalyzerOptions{{}, &clock_}};
};

TEST_F(FeedTest, ClaimsReachTheAnalyzerAndABadOneIsSkipped) {
  k8s::InformerHandlers h = HandlersFor(k8s::kResourceClaims, analyzer_);
  ASSERT_TRUE(h.on_add && h.on_update && h.on_delete);
  h.on_add(Claim("train"));
  EXPECT_EQ(analyzer_.StateOf("team/train"), ClaimState::kPending);

  // An update that does not decode (requests is not a list): skipped, the state stays.
  json bad = Claim("train");
  bad["spec"]["devices"]["requests"] = "all of them";
  h.on_update(Claim("train"), bad);
  EXPECT_EQ(analyzer_.StateOf("team/train"), ClaimState::kPending);

  // An allocation reaches it through on_update.
  json allocated = Claim("train");
  allocated["status"]["allocation"]["devices"]["results"] =
      json::array({{{"request", "gpu"},
                    {"driver", "gpu.dralens.dev"},
                    {"pool", "node-a"},
                    {"device", "gpu-0"}}});
  h.on_update(Claim("train"), allocated);
  EXPECT_EQ(analyzer_.StateOf("team/train"), ClaimState::kAllocated);

  h.on_delete(allocated);
  EXPECT_EQ(analyzer_.StateOf("team/train"), std::nullopt);
}

TEST_F(FeedTest, EveryWatchedKindHasHandlersAndOthersNone) {
  for (const k8s::ResourceType* type : {&k8s::kResourceClaims, &k8s::kResourceSlices,
                                        &k8s::kDeviceClasses, &k8s::kPods, &k8s::kNodes}) {
    k8s::InformerHandlers h = HandlersFor(*type, analyzer_);
    EXPECT_TRUE(h.on_add && h.on_update && h.on_delete) << type->plural;
  }
  k8s::InformerHandlers none = HandlersFor(k8s::kLeases, analyzer_);
  EXPECT_FALSE(none.on_add || none.on_update || none.on_delete);
}

}  // namespace
}  // namespace dralens::exporter::cluster
