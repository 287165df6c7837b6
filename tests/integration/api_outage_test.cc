// The node role while its API server is unreachable: every resource request answered 503, as
// kube-apiserver behind a load balancer with no healthy backend answers. What the node already
// knows keeps working (a prepared claim asked for again, any unprepare), what needs the API
// fails for that claim with an error that says so, the process stays up, and once the server
// answers again the same prepare goes through and the node is ready with its slices published.
// The outage here lasts seconds, long enough for the client's retries and backoff to give up on
// each request; nothing in the node's behaviour depends on how long it lasts.
#include <httplib.h>

#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/node_harness.h"
#include "tests/testing/eventually.h"

namespace dralens {
namespace {

using ::testing::HasSubstr;
using testing::NodeHarness;
using testing::Subprocess;

int MetricsPort(const std::string& log) {
  std::smatch m;
  if (!std::regex_search(log, m, std::regex(R"(serving metrics"? address=\S+ port=(\d+))"))) {
    return 0;
  }
  return std::stoi(m[1]);
}

int Get(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  auto res = c.Get(path);
  return res ? res->status : 0;
}

TEST(ApiOutageTest, KnownClaimsKeepWorkingNewOnesFailPerClaimAndRecoverAfter) {
  NodeHarness node;
  node.Start();
  node.Register();
  const int port = MetricsPort(node.process().Output());
  ASSERT_NE(port, 0) << node.process().Output();
  ASSERT_TRUE(testing::Eventually([&] { return Get(port, "/readyz") == 200; }));

  const NodeHarness::Claim known = node.AllocatedClaim("known", "gpu-0");
  const NodeHarness::Claim fresh = node.AllocatedClaim("fresh", "gpu-1");
  const NodeHarness::Claim released = node.AllocatedClaim("released", "gpu-2");
  ASSERT_EQ(node.Prepare(known), "");
  ASSERT_EQ(node.Prepare(released), "");

  node.api().InjectFault({.kind = sim::FaultRule::Kind::kStatus,
                          .verb = "",
                          .resource = "",
                          .times = -1,
                          .code = 503});

  // Answered from the checkpoint, as after a kubelet restart.
  EXPECT_EQ(node.Prepare(known), "");
  // Needs the ResourceClaim: fails for this claim only, and says why.
  const std::string error = node.Prepare(fresh);
  EXPECT_THAT(error, HasSubstr("503")) << error;
  EXPECT_THAT(error, ::testing::Not(HasSubstr("gRPC"))) << error;
  // Needs nothing from the API server.
  EXPECT_EQ(node.Unprepare(released), "");
  EXPECT_EQ(Get(port, "/healthz"), 200);
  EXPECT_EQ(node.process().Wait(absl::ZeroDuration()), -1) << "the node exited during the outage";

  node.api().ClearFaults();
  EXPECT_TRUE(testing::Eventually([&] { return node.Prepare(fresh).empty(); }));
  EXPECT_TRUE(testing::Eventually([&] { return Get(port, "/readyz") == 200; }));
  auto slices = node.client().List(k8s::kResourceSlices, "", {});
  ASSERT_TRUE(slices.ok()) << slices.status();
  int devices = 0;
  for (const nlohmann::json& slice : slices->items) {
    if (slice["spec"].value("nodeName", "") == NodeHarness::kNode) {
      devices += static_cast<int>(slice["spec"].value("devices", nlohmann::json::array()).size());
    }
  }
  EXPECT_EQ(devices, 8);  // dgx-h100: eight full GPUs
  EXPECT_EQ(node.Unprepare(known), "");
  EXPECT_EQ(node.Unprepare(fresh), "");
}

// The cluster role through the same outage: it keeps serving what it knew (the series stay),
// says for how long its view may have lagged (dralens_cluster_stale_seconds grows), stays up,
// and once the server answers again it is in step (staleness back to 0) and sees what changed.
TEST(ApiOutageTest, ClusterRoleKeepsItsLastStateMarksItStaleAndCatchesUp) {
  NodeHarness node;
  node.Start();
  node.Register();
  Subprocess cluster({DRALENS_BINARY, "cluster", "--metrics-address=127.0.0.1:0"},
                     {{"KUBECONFIG", node.Kubeconfig()}});
  ASSERT_TRUE(cluster.WaitForOutput("serving metrics", absl::Seconds(60))) << cluster.Output();
  const int port = MetricsPort(cluster.Output());
  ASSERT_NE(port, 0) << cluster.Output();
  const std::string gpus = "dralens_cluster_gpus";
  ASSERT_TRUE(testing::Eventually([&] { return testing::MetricSum(port, gpus) == 8; }))
      << testing::MetricSum(port, gpus);  // dgx-h100: eight GPUs
  EXPECT_EQ(testing::MetricSum(port, "dralens_cluster_stale_seconds"), 0);

  node.api().InjectFault({.kind = sim::FaultRule::Kind::kStatus,
                          .verb = "",
                          .resource = "",
                          .times = -1,
                          .code = 503});
  node.api().DropWatches();
  for (const char* resource :
       {"resourceclaims", "resourceslices", "deviceclasses", "pods", "nodes"}) {
    const std::string label = absl::StrCat("resource=\"", resource, "\"");
    EXPECT_TRUE(testing::Eventually([&] {
      return testing::MetricSum(port, "dralens_cluster_stale_seconds", {label}) > 0;
    })) << resource;
  }
  const double first =
      testing::MetricSum(port, "dralens_cluster_stale_seconds", {"resource=\"nodes\""});
  EXPECT_TRUE(testing::Eventually([&] {
    return testing::MetricSum(port, "dralens_cluster_stale_seconds", {"resource=\"nodes\""}) >
           first;
  }));
  // What it knew stays exported, and the process serves on.
  EXPECT_EQ(testing::MetricSum(port, gpus), 8);
  EXPECT_EQ(testing::MetricSum(port, gpus, {"state=\"free\""}), 8);
  EXPECT_EQ(cluster.Wait(absl::ZeroDuration()), -1) << "the cluster role exited during the outage";

  node.api().ClearFaults();
  EXPECT_TRUE(testing::Eventually(
      [&] { return testing::MetricSum(port, "dralens_cluster_stale_seconds") == 0; },
      absl::Seconds(60)))
      << testing::MetricSum(port, "dralens_cluster_stale_seconds");
  // In step again: a claim allocated after the outage shows up.
  node.AllocatedClaim("after", "gpu-3");
  EXPECT_TRUE(testing::Eventually(
      [&] { return testing::MetricSum(port, gpus, {"state=\"allocated\""}) == 1; },
      absl::Seconds(60)))
      << testing::MetricSum(port, gpus, {"state=\"allocated\""});
  EXPECT_EQ(cluster.Stop(SIGTERM, absl::Seconds(15)), 0) << cluster.Output();
}

}  // namespace
}  // namespace dralens
