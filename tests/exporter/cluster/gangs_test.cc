// Gangs: the claims of a gang's pods evaluated together, and the pending-gang series.
#include "exporter/cluster/gangs.h"

#include <string>
#include <vector>

#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/feed.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "tests/exporter/cluster/scenario_util.h"

namespace dralens::exporter::cluster {
namespace {

using nlohmann::json;

json Workload(const std::string& name, const std::string& group, int min_count) {
  json policy = min_count > 0 ? json{{"gang", {{"minCount", min_count}}}} : json{{"basic", {}}};
  return {{"apiVersion", "scheduling.k8s.io/v1alpha1"},
          {"kind", "Workload"},
          {"metadata", {{"namespace", "team"}, {"name", name}}},
          {"spec", {{"podGroups", json::array({{{"name", group}, {"policy", policy}}})}}}};
}

json Pod(const std::string& name, const std::string& workload, const std::string& claim,
         bool scheduled, const std::string& replica = "", int created_second = 0) {
  json ref = {{"name", workload}, {"podGroup", "workers"}};
  if (!replica.empty()) {
    ref["podGroupReplicaKey"] = replica;
  }
  json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"namespace", "team"},
        {"name", name},
        {"creationTimestamp", "2023-11-14T22:13:" + std::to_string(10 + created_second) + "Z"}}},
      {"spec",
       {{"workloadRef", ref},
        {"resourceClaims", json::array({{{"name", "gpus"}, {"resourceClaimName", claim}}})}}}};
  if (scheduled) {
    pod["spec"]["nodeName"] = "a";
  }
  return pod;
}

class GangTest : public ::testing::Test {
 protected:
  GangTest()
      : analyzer_(registry_, tracer_, AnalyzerOptions{PriceTable{}, &clock_}),
        gangs_(analyzer_, registry_, &clock_) {
    Handlers(k8s::kDeviceClasses).on_add(testing::Class("gpu", "true"));
  }
  k8s::InformerHandlers Handlers(const k8s::ResourceType& type) {
    return HandlersFor(type, analyzer_);
  }
  void Claim(const std::string& name, int count) {
    Handlers(k8s::kResourceClaims).on_add(testing::Claim("team", name, "gpu", "", count));
  }
  double Series(const std::string& family, const std::string& workload,
                const std::string& replica = "") {
    return testing::Value(*gangs_.TextSeries(), family,
                          {{"workload", workload}, {"replica", replica}});
  }

  prometheus::Registry registry_;
  telemetry::NoopTracer tracer_;
  common::FakeClock clock_{absl::FromUnixSeconds(1700000000)};  // 2023-11-14T22:13:20Z
  Analyzer analyzer_;
  GangTracker gangs_;
};

TEST_F(GangTest, ClaimsThatFitAloneAreShortTogether) {
  Handlers(k8s::kResourceSlices).on_add(testing::Slice("a", testing::WholeGpus("a", 4)));
  for (const char* c : {"w0", "w1", "w2"}) {
    Claim(c, 2);
    // Alone, each would be served: capacity is there.
    EXPECT_EQ(analyzer_.PendingReasonOf(std::string("team/") + c), PendingReason::kWaitingForPod);
  }
  EXPECT_EQ(analyzer_.ShortTogether("team", {"w0", "w1"}), 0);
  EXPECT_EQ(analyzer_.ShortTogether("team", {"w0", "w1", "w2"}), 2);
  // A claim already allocated, or unknown, asks for nothing more.
  json held = testing::Claim("team", "w2", "gpu", "", 2);
  held["status"]["allocation"]["devices"]["results"] = {
      {{"request", "req"}, {"driver", testing::kDriver}, {"pool", "a"}, {"device", "gpu-0"}},
      {{"request", "req"}, {"driver", testing::kDriver}, {"pool", "a"}, {"device", "gpu-1"}}};
  Handlers(k8s::kResourceClaims).on_update(held, held);
  EXPECT_EQ(analyzer_.ShortTogether("team", {"w0", "w1", "w2", "nobody"}), 2);
  EXPECT_EQ(analyzer_.ShortTogether("team", {"w0"}), 0);
  EXPECT_EQ(analyzer_.ShortTogether("other", {"w0"}), 0);
}

TEST_F(GangTest, PlacementsOfOneGpuShareItsCounters) {
  // Two placements of one GPU, each taking all 8 memory slices: only one can be made.
  std::vector<testing::DeviceSpec> placements;
  for (const char* name : {"gpu-0-7g", "gpu-0-7g-b"}) {
    placements.push_back({.name = name,
                          .type = "mig",
                          .product = "H100",
                          .uuid = "",
                          .profile = "7g.80gb",
                          .counter_set = "gpu-0",
                          .counters = 8,
                          .tainted = false});
  }
  Handlers(k8s::kResourceSlices).on_add(testing::Slice("a", placements, {{"gpu-0", 8}}));
  Claim("m0", 1);
  Claim("m1", 1);
  EXPECT_EQ(analyzer_.ShortTogether("team", {"m0"}), 0);
  EXPECT_EQ(analyzer_.ShortTogether("team", {"m0", "m1"}), 1);
}

TEST_F(GangTest, PendingGangSeriesFollowItsPods) {
  Handlers(k8s::kResourceSlices).on_add(testing::Slice("a", testing::WholeGpus("a", 4)));
  for (int i = 0; i < 3; ++i) {
    Claim("w" + std::to_string(i), 2);
  }
  gangs_.UpsertWorkload(Workload("train", "workers", 3));
  gangs_.UpsertPod(Pod("p0", "train", "w0", false, "", 0));
  gangs_.UpsertPod(Pod("p1", "train", "w1", false, "", 5));
  gangs_.UpsertPod(Pod("p2", "train", "w2", false, "", 9));
  gangs_.Refresh();
  ASSERT_EQ(gangs_.Gangs().size(), 1u);
  const GangView g = gangs_.Gangs().front();
  EXPECT_EQ(g.min_count, 3);
  EXPECT_EQ(g.pods, 3);
  EXPECT_EQ(g.scheduled, 0);
  EXPECT_EQ(g.claims, (std::vector<std::string>{"w0", "w1", "w2"}));
  EXPECT_EQ(Series("dralens_cluster_pending_gang_short_devices", "train"), 2);
  // Since its first pod was created (22:13:10), ten seconds before the clock.
  EXPECT_EQ(Series("dralens_cluster_pending_gang_age_seconds", "train"), 10);
  EXPECT_EQ(testing::Value(registry_, "dralens_cluster_pending_gangs", {{"namespace", "team"}}), 1);
  ASSERT_TRUE(gangs_.GangOfClaim("team", "w1").has_value());
  EXPECT_FALSE(gangs_.GangOfClaim("team", "w9").has_value());

  // More GPUs: it would fit now, but is still pending until its pods are scheduled.
  Handlers(k8s::kResourceSlices).on_add(testing::Slice("b", testing::WholeGpus("b", 2)));
  clock_.Advance(absl::Seconds(5));
  gangs_.Refresh();
  EXPECT_EQ(Series("dralens_cluster_pending_gang_short_devices", "train"), 0);
  EXPECT_EQ(Series("dralens_cluster_pending_gang_age_seconds", "train"), 15);

  // Two of three scheduled: still pending, and only the unscheduled pod's claim is evaluated.
  gangs_.UpsertPod(Pod("p0", "train", "w0", true));
  gangs_.UpsertPod(Pod("p1", "train", "w1", true));
  gangs_.Refresh();
  EXPECT_EQ(gangs_.Gangs().front().claims, (std::vector<std::string>{"w2"}));
  EXPECT_EQ(Series("dralens_cluster_pending_gang_age_seconds", "train"), 15);
  // All scheduled: no longer pending, its series go, and so does the namespace's count.
  gangs_.UpsertPod(Pod("p2", "train", "w2", true));
  gangs_.Refresh();
  EXPECT_EQ(Series("dralens_cluster_pending_gang_age_seconds", "train"), -1);
  EXPECT_EQ(Series("dralens_cluster_pending_gang_short_devices", "train"), -1);
  EXPECT_EQ(testing::Value(registry_, "dralens_cluster_pending_gangs", {{"namespace", "team"}}),
            -1);
  EXPECT_TRUE(gangs_.Gangs().empty());
  EXPECT_FALSE(gangs_.GangOfClaim("team", "w2").has_value());
}

// The gang needs minCount - scheduled more pods, not all of its pods: those that lack least go.
TEST_F(GangTest, OnlyThePodsStillNeededAreEvaluated) {
  Handlers(k8s::kResourceSlices).on_add(testing::Slice("a", testing::WholeGpus("a", 4)));
  Claim("small0", 1);
  Claim("small1", 1);
  Claim("huge", 8);
  gangs_.UpsertWorkload(Workload("train", "workers", 3));
  gangs_.UpsertPod(Pod("p0", "train", "small0", false));
  gangs_.UpsertPod(Pod("p1", "train", "huge", false));
  gangs_.UpsertPod(Pod("p2", "train", "small1", false));
  gangs_.UpsertPod(Pod("p3", "train", "done", true));  // one scheduled: two more are needed
  gangs_.Refresh();
  ASSERT_EQ(gangs_.Gangs().size(), 1u);
  EXPECT_EQ(gangs_.Gangs().front().scheduled, 1);
  // The two one-GPU pods fit; the eight-GPU pod is not needed for minCount.
  EXPECT_EQ(Series("dralens_cluster_pending_gang_short_devices", "train"), 0);
  // minCount 4: all three unscheduled pods are needed, the eight-GPU one too.
  gangs_.UpsertWorkload(Workload("train", "workers", 4));
  gangs_.Refresh();
  EXPECT_EQ(Series("dralens_cluster_pending_gang_short_devices", "train"), 6);  // 1+1+8 on 4
}

TEST_F(GangTest, OnlyGangPolicyGroupsOfKnownWorkloadsAndEachReplicaApart) {
  Claim("w0", 1);
  Claim("w1", 1);
  // No Workload yet, and a pod without a workloadRef: no gang.
  gangs_.UpsertPod(Pod("p0", "train", "w0", false, "a"));
  json plain = Pod("plain", "train", "w1", false);
  plain["spec"].erase("workloadRef");
  gangs_.UpsertPod(plain);
  gangs_.Refresh();
  EXPECT_TRUE(gangs_.Gangs().empty());
  // A basic policy is no gang either.
  gangs_.UpsertWorkload(Workload("train", "workers", 0));
  gangs_.Refresh();
  EXPECT_TRUE(gangs_.Gangs().empty());
  // A gang policy: each replica key is its own gang.
  gangs_.UpsertWorkload(Workload("train", "workers", 1));
  gangs_.UpsertPod(Pod("p1", "train", "w1", false, "b"));
  gangs_.Refresh();
  ASSERT_EQ(gangs_.Gangs().size(), 2u);
  EXPECT_EQ(Series("dralens_cluster_pending_gang_short_devices", "train", "a"), 1);
  EXPECT_EQ(Series("dralens_cluster_pending_gang_short_devices", "train", "b"), 1);
  EXPECT_EQ(testing::Value(registry_, "dralens_cluster_pending_gangs", {{"namespace", "team"}}), 2);
  // The Workload goes: so do its gangs.
  gangs_.DeleteWorkload("team", "train");
  gangs_.DeletePod("team", "p1");
  gangs_.Refresh();
  EXPECT_TRUE(gangs_.Gangs().empty());
  EXPECT_EQ(Series("dralens_cluster_pending_gang_short_devices", "train", "a"), -1);
  EXPECT_EQ(testing::Value(registry_, "dralens_cluster_pending_gangs", {{"namespace", "team"}}),
            -1);
}

TEST_F(GangTest, TheExplanationNamesTheGang) {
  Handlers(k8s::kResourceSlices).on_add(testing::Slice("a", testing::WholeGpus("a", 1)));
  Claim("w0", 1);
  Claim("w1", 1);
  gangs_.UpsertWorkload(Workload("train", "workers", 2));
  gangs_.UpsertPod(Pod("p0", "train", "w0", false));
  gangs_.UpsertPod(Pod("p1", "train", "w1", false));
  gangs_.Refresh();
  std::optional<ClaimExplanation> e = analyzer_.Explain("team", "w0");
  ASSERT_TRUE(e.has_value());
  e->gang = gangs_.GangOfClaim("team", "w0");
  EXPECT_NE(ExplanationText(*e).find("Gang:     team/train pod group workers: 0 of 2 pods "
                                     "scheduled, needs 2; its pending claims, evaluated "
                                     "together, lack 1 device\n"),
            std::string::npos)
      << ExplanationText(*e);
  EXPECT_EQ(PendingNote(*e).find("gang team/train pod group workers"), 0u);
  EXPECT_EQ(ExplanationJson(*e)["gang"]["shortDevices"], 1);
}

}  // namespace
}  // namespace dralens::exporter::cluster
