// The feed from informer events to the analyzer: each kind reaches its Upsert/Delete, an object
// that does not decode is skipped and the analyzer keeps what it had, a republished slice
// decodes only the devices whose text changed, and a Node's readiness is read from its Ready
// condition.
#include "exporter/cluster/feed.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/k8s/projection.h"
#include "src/model/codec.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "tests/exporter/cluster/scenario_util.h"

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

// The slice as the cluster role's informer hands it over: through ProjectionFor.
json Projected(const json& slice) {
  absl::StatusOr<json> parsed =
      k8s::ParseProjected(slice.dump(), *ProjectionFor(k8s::kResourceSlices));
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : json();
}

double Gpus(const prometheus::Registry& registry, const Analyzer& analyzer,
            const std::string& state) {
  return testing::Value(testing::Exported(registry, analyzer), "dralens_cluster_gpus",
                        {{"node", "node-a"}, {"state", state}});
}

TEST_F(FeedTest, ARepublishedSliceDecodesOnlyTheDevicesWhoseDigestChanged) {
  const json whole = testing::Slice("node-a", testing::WholeGpus("node-a", 3));
  absl::StatusOr<model::ResourceSlice> full = model::Decode<model::ResourceSlice>(whole);
  ASSERT_TRUE(full.ok()) << full.status();
  model::ResourceSlice head = *full;
  head.spec.devices.clear();
  std::vector<size_t> decoded;
  auto decode = [&](size_t i) -> absl::StatusOr<model::SliceDevice> {
    decoded.push_back(i);
    return full->spec.devices.at(i);
  };
  ASSERT_TRUE(analyzer_.UpsertSlice(head, {11, 12, 13}, decode).ok());
  EXPECT_EQ(decoded, (std::vector<size_t>{0, 1, 2}));

  // gpu-1 republished tainted, under another digest: only it is decoded.
  decoded.clear();
  full->spec.devices[1].taints.push_back(
      {.key = "dralens.dev/xid", .value = "", .effect = "NoSchedule", .time_added = {}});
  ASSERT_TRUE(analyzer_.UpsertSlice(head, {11, 22, 13}, decode).ok());
  EXPECT_EQ(decoded, (std::vector<size_t>{1}));
  EXPECT_EQ(Gpus(registry_, analyzer_, "unavailable"), 1);
  EXPECT_EQ(Gpus(registry_, analyzer_, "free"), 2);

  // A digest of 0 (unknown) is always decoded; a device that does not decode leaves the slice
  // as it was, and returns the codec's error.
  decoded.clear();
  absl::Status bad = analyzer_.UpsertSlice(head, {11, 0, 33}, [&](size_t i) {
    decoded.push_back(i);
    return i == 2 ? absl::StatusOr<model::SliceDevice>(absl::InvalidArgumentError("bad device"))
                  : absl::StatusOr<model::SliceDevice>(full->spec.devices.at(i));
  });
  EXPECT_EQ(bad, absl::InvalidArgumentError("bad device"));
  EXPECT_EQ(decoded, (std::vector<size_t>{1, 2}));
  decoded.clear();
  ASSERT_TRUE(analyzer_.UpsertSlice(head, {11, 22, 13}, decode).ok());
  EXPECT_TRUE(decoded.empty()) << "the failed republish replaced the slice";
  EXPECT_EQ(Gpus(registry_, analyzer_, "unavailable"), 1);

  // The same text on another node is another digest (the feed hashes the slice's node name,
  // driver and pool name with it); with digests all new, every device is decoded again.
  ASSERT_TRUE(analyzer_.UpsertSlice(head, {41, 42, 43}, decode).ok());
  EXPECT_EQ(decoded, (std::vector<size_t>{0, 1, 2}));
}

// A device held by its digest keeps its key from one republish to the next: a slice republished
// twice, with one device changed each time, still takes all of its devices when it goes.
TEST_F(FeedTest, DevicesHeldByTheirDigestsLeaveWithTheirSlice) {
  const json whole = testing::Slice("node-a", testing::WholeGpus("node-a", 3));
  absl::StatusOr<model::ResourceSlice> full = model::Decode<model::ResourceSlice>(whole);
  ASSERT_TRUE(full.ok()) << full.status();
  model::ResourceSlice head = *full;
  head.spec.devices.clear();
  auto decode = [&](size_t i) -> absl::StatusOr<model::SliceDevice> {
    return full->spec.devices.at(i);
  };
  ASSERT_TRUE(analyzer_.UpsertSlice(head, {11, 12, 13}, decode).ok());
  // gpu-1 tainted, then untainted: gpu-0 and gpu-2 are held by their digests both times.
  full->spec.devices[1].taints.push_back(
      {.key = "dralens.dev/xid", .value = "", .effect = "NoSchedule", .time_added = {}});
  ASSERT_TRUE(analyzer_.UpsertSlice(head, {11, 22, 13}, decode).ok());
  full->spec.devices[1].taints.clear();
  ASSERT_TRUE(analyzer_.UpsertSlice(head, {11, 12, 13}, decode).ok());
  EXPECT_EQ(Gpus(registry_, analyzer_, "free"), 3);
  EXPECT_EQ(Gpus(registry_, analyzer_, "unavailable"), 0);

  analyzer_.DeleteSlice(head.metadata.name);
  // The node's series go with its last device (testing::Value: -1 for no series).
  EXPECT_EQ(Gpus(registry_, analyzer_, "free"), -1) << "a held device outlived its slice";
  EXPECT_EQ(Gpus(registry_, analyzer_, "unavailable"), -1);
}

// A device that another slice of its pool took over is no longer held by its first slice's
// digest: when that slice publishes it again, unchanged, it is decoded and counts as published
// there again (the last publisher wins, as for any device).
TEST_F(FeedTest, ADeviceTakenOverByAnotherSliceIsDecodedWhenItsFirstSliceRepublishes) {
  const json whole = testing::Slice("node-a", testing::WholeGpus("node-a", 2));
  absl::StatusOr<model::ResourceSlice> full = model::Decode<model::ResourceSlice>(whole);
  ASSERT_TRUE(full.ok()) << full.status();
  model::ResourceSlice first = *full;
  first.spec.devices.clear();
  model::ResourceSlice second = first;
  second.metadata.name += "-second";
  std::vector<size_t> decoded;
  auto decode = [&](size_t i) -> absl::StatusOr<model::SliceDevice> {
    decoded.push_back(i);
    return full->spec.devices.at(i);
  };
  ASSERT_TRUE(analyzer_.UpsertSlice(first, {11, 12}, decode).ok());
  EXPECT_EQ(Gpus(registry_, analyzer_, "free"), 2);

  // The second slice publishes gpu-0 under its name, tainted.
  model::SliceDevice tainted = full->spec.devices[0];
  tainted.taints.push_back(
      {.key = "dralens.dev/xid", .value = "", .effect = "NoSchedule", .time_added = {}});
  ASSERT_TRUE(analyzer_.UpsertSlice(second, {51}, [&](size_t) { return tainted; }).ok());
  EXPECT_EQ(Gpus(registry_, analyzer_, "unavailable"), 1);
  EXPECT_EQ(Gpus(registry_, analyzer_, "free"), 1);

  // The first slice again, the same text: gpu-0 is decoded, and is its untainted one again.
  decoded.clear();
  ASSERT_TRUE(analyzer_.UpsertSlice(first, {11, 12}, decode).ok());
  EXPECT_EQ(decoded, (std::vector<size_t>{0}));
  EXPECT_EQ(Gpus(registry_, analyzer_, "unavailable"), 0);
  EXPECT_EQ(Gpus(registry_, analyzer_, "free"), 2);
}

TEST_F(FeedTest, AProjectedSliceFeedsWhatTheWholeOneFeeds) {
  k8s::InformerHandlers h = HandlersFor(k8s::kResourceSlices, analyzer_);
  json slice = testing::Slice("node-a", testing::WholeGpus("node-a", 4));
  h.on_add(Projected(slice));
  EXPECT_EQ(Gpus(registry_, analyzer_, "free"), 4);

  // One device tainted, republished: the projected devices are each a JSON text.
  const json old = slice;
  slice["spec"]["devices"][2]["taints"] =
      json::array({{{"key", "dralens.dev/xid"}, {"effect", "NoExecute"}}});
  const json projected = Projected(slice);
  ASSERT_TRUE(projected["spec"]["devices"][2].is_string());
  h.on_update(Projected(old), projected);
  EXPECT_EQ(Gpus(registry_, analyzer_, "free"), 3);
  EXPECT_EQ(Gpus(registry_, analyzer_, "unavailable"), 1);

  // A device that no longer decodes: the republish is skipped, the analyzer keeps the slice.
  json bad = slice;
  bad["spec"]["devices"][2]["taints"] = json::array();
  bad["spec"]["devices"][0]["attributes"]["uuid"] = 5;
  h.on_update(projected, Projected(bad));
  EXPECT_EQ(Gpus(registry_, analyzer_, "free"), 3);
  EXPECT_EQ(Gpus(registry_, analyzer_, "unavailable"), 1);

  // The untaint, whole (not projected): the same handler reads it.
  slice["spec"]["devices"][2].erase("taints");
  h.on_update(projected, slice);
  EXPECT_EQ(Gpus(registry_, analyzer_, "free"), 4);
  h.on_delete(Projected(slice));
  EXPECT_EQ(Gpus(registry_, analyzer_, "free"), -1);
}

TEST(DecodeSliceTest, AProjectedSliceDecodesAsTheWholeOneWithTheSameErrors) {
  const json whole = testing::Slice("node-a", testing::WholeGpus("node-a", 2, true), {});
  absl::StatusOr<model::ResourceSlice> want = model::Decode<model::ResourceSlice>(whole);
  ASSERT_TRUE(want.ok()) << want.status();
  for (const json& input : {whole, Projected(whole)}) {
    absl::StatusOr<model::ResourceSlice> got = DecodeSlice(input);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, *want);
  }
  // The errors the codec reports for the whole slice, for its projection too.
  for (const auto& [pointer, value] : std::vector<std::pair<std::string, json>>{
           {"/spec/devices/1/attributes/uuid", 5},
           {"/spec/devices/0/name", json::array()},
           {"/spec/devices/1", "a string"},
           {"/spec/devices", json::object({{"name", "gpu-0"}})},
           {"/spec/driver", 7},
           {"/metadata", json::array()}}) {
    json bad = whole;
    bad[json::json_pointer(pointer)] = value;
    absl::StatusOr<model::ResourceSlice> expected = model::Decode<model::ResourceSlice>(bad);
    ASSERT_FALSE(expected.ok()) << pointer;
    absl::StatusOr<model::ResourceSlice> got = DecodeSlice(Projected(bad));
    EXPECT_EQ(got.status(), expected.status()) << pointer;
  }
}

}  // namespace
}  // namespace dralens::exporter::cluster
