// Alpha APIs behind feature gates: scheduling.k8s.io/v1alpha1 Workloads are served, and
// discovered, only with the GenericWorkload gate on, as on kube-apiserver.
#include <string>

#include "gtest/gtest.h"
#include "tests/src/sim/sim_test_util.h"

namespace dralens::sim::testing {
namespace {

constexpr char kWorkloads[] = "/apis/scheduling.k8s.io/v1alpha1/namespaces/team/workloads";

json Workload() {
  return {{"apiVersion", "scheduling.k8s.io/v1alpha1"},
          {"kind", "Workload"},
          {"metadata", {{"name", "train"}}},
          {"spec",
           {{"podGroups",
             json::array({{{"name", "workers"}, {"policy", {{"gang", {{"minCount", 4}}}}}}})}}}};
}

class WorkloadGateOffTest : public ServerTest {};

TEST_F(WorkloadGateOffTest, WorkloadsAreNotServedWithoutTheGate) {
  Reply list = http_->Get(kWorkloads);
  EXPECT_EQ(list.status, 404) << list.raw;
  EXPECT_EQ(http_->Post(kWorkloads, Workload()).status, 404);
  EXPECT_EQ(http_->Get("/apis/scheduling.k8s.io/v1alpha1").status, 404);
  EXPECT_EQ(http_->Get("/apis").raw.find("scheduling.k8s.io"), std::string::npos);
}

class WorkloadGateOnTest : public ServerTest {
 protected:
  ApiServerOptions Options() override {
    ApiServerOptions o;
    o.feature_gates = {"GenericWorkload"};
    return o;
  }
};

TEST_F(WorkloadGateOnTest, WorkloadsAreServedAndDiscoveredWithTheGate) {
  Reply created = http_->Post(kWorkloads, Workload());
  ASSERT_EQ(created.status, 201) << created.raw;
  EXPECT_EQ(created.body["spec"]["podGroups"][0]["policy"]["gang"]["minCount"], 4);
  Reply list = http_->Get(kWorkloads);
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(list.body["kind"], "WorkloadList");
  EXPECT_EQ(list.body["items"].size(), 1u);
  Reply group = http_->Get("/apis/scheduling.k8s.io/v1alpha1");
  ASSERT_EQ(group.status, 200);
  EXPECT_EQ(group.body["resources"][0]["name"], "workloads");
  EXPECT_NE(http_->Get("/apis").raw.find("scheduling.k8s.io"), std::string::npos);
}

}  // namespace
}  // namespace dralens::sim::testing
