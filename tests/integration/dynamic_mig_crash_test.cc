// `dralens node --dynamic-mig` killed (the preparer's crash hook calls _exit(137), as SIGKILL
// would) at every step of a dynamic MIG instance's life, restarted, and driven to unprepare
// over its real kubelet socket. The simulated GPUs live in the node's process, so each restart
// also finds the instances gone and MIG mode off, as after a GPU reset or a driver reload: the
// restarted node must prepare the restored claim again, or drop it when it was deleted, or,
// killed inside an unprepare (the CDI spec gone), finish that unprepare; and unprepare must
// always succeed and leave no instance, CDI spec or checkpoint entry.
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/node_harness.h"

namespace dralens {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::NodeHarness;

class DynamicMigCrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    node_.UseDeviceSource(
        {"--device-source=simulated", "--simulated-profile=dgx-h100", "--dynamic-mig"});
  }

  void StartNode(const std::string& crash_at = "") {
    std::map<std::string, std::string> env;
    if (!crash_at.empty()) {
      env["DRALENS_TEST_CRASH_AT"] = crash_at;
    }
    node_.Start({}, {}, env);
  }

  // The published name of the 1g.10gb placement at memory slice 0 of gpu-1.
  std::string Placement() { return node_.PublishedDevice("gpu-1-mig-1g10gb-", "-0"); }

  // Whether /metrics says `device` is prepared (dralens_device_state{state="prepared"} 1).
  bool SeriesSaysPrepared(const std::string& device) {
    std::istringstream lines(node_.Get("/metrics"));
    for (std::string line; std::getline(lines, line);) {
      if (absl::StartsWith(line, "dralens_device_state{") &&
          absl::StrContains(line, absl::StrCat("device=\"", device, "\"")) &&
          absl::StrContains(line, "state=\"prepared\"") && absl::EndsWith(line, " 1")) {
        return true;
      }
    }
    return false;
  }

  // Nothing left: no MIG device on the node (no MIG layout series), no spec, no entry.
  void ExpectNothingLeft() {
    EXPECT_THAT(node_.Get("/metrics"), ::testing::Not(HasSubstr("dralens_mig_devices{")));
    EXPECT_THAT(node_.CdiFiles(), IsEmpty());
    EXPECT_THAT(node_.CheckpointedUids(), IsEmpty());
  }

  NodeHarness node_;
};

// Rounds: DRALENS_CRASH_ROUNDS (default 1); `make crash-loop` runs many more.
TEST_F(DynamicMigCrashTest, CrashAtEveryDynamicMigStepLeavesNoInstanceSpecOrEntry) {
  int rounds = 1;
  if (const char* env = std::getenv("DRALENS_CRASH_ROUNDS")) {
    ASSERT_TRUE(absl::SimpleAtoi(env, &rounds)) << env;
  }
  StartNode();
  const std::string device = Placement();
  node_.Stop();
  ASSERT_FALSE(device.empty());

  const std::vector<std::string> prepare_steps = {"after-started", "after-mig-created", "after-cdi",
                                                  "after-completed"};
  const std::vector<std::string> unprepare_steps = {
      "unprepare-after-cdi-removed", "unprepare-after-mig-destroyed", "unprepare-after-checkpoint"};
  int crashes = 0;
  for (int round = 0; round < rounds; ++round) {
    for (const std::string& step : prepare_steps) {
      SCOPED_TRACE(absl::StrCat("round ", round, " prepare step ", step));
      const NodeHarness::Claim c =
          node_.AllocatedClaim(absl::StrCat("p-", round, "-", step), device);
      StartNode(step);
      node_.ExpectCrashed(node_.Prepare(c), step);
      ++crashes;

      StartNode();
      if (step == "after-completed") {
        // Restored at start, before the kubelet asks again: the instance exists once more and
        // the device keeps its series.
        EXPECT_THAT(node_.Get("/debug/claims"), HasSubstr("\"MIG-"));
        EXPECT_TRUE(SeriesSaysPrepared(device)) << node_.Get("/metrics");
      }
      EXPECT_EQ(node_.Prepare(c), "") << node_.process().Output();
      EXPECT_THAT(node_.CdiFiles(), ElementsAre("k8s.gpu.dralens.dev-claim_" + c.uid + ".json"));
      EXPECT_THAT(node_.CheckpointedUids(), ElementsAre(c.uid));
      // Its instance exists: the claim answers for a real MIG device.
      EXPECT_THAT(node_.Get("/debug/claims"), HasSubstr("\"MIG-"));
      EXPECT_THAT(node_.Get("/metrics"), HasSubstr("dralens_mig_devices{"));

      EXPECT_EQ(node_.Unprepare(c), "") << node_.process().Output();
      ExpectNothingLeft();
      node_.Stop();
    }
    for (const std::string& step : unprepare_steps) {
      for (bool deleted : {false, true}) {
        SCOPED_TRACE(absl::StrCat("round ", round, " unprepare step ", step,
                                  deleted ? ", claim deleted" : ""));
        const std::string suffix = absl::StrCat(round, "-", step, deleted ? "-d" : "");
        const NodeHarness::Claim c = node_.AllocatedClaim("u-" + suffix, device);
        StartNode(step);
        ASSERT_EQ(node_.Prepare(c), "");
        node_.ExpectCrashed(node_.Unprepare(c), step);
        ++crashes;

        // The kubelet's retry may come after the claim was deleted.
        if (deleted) {
          ASSERT_TRUE(
              node_.client().Delete(k8s::kResourceClaims, NodeHarness::kNs, c.name, {}).ok());
        }
        StartNode();
        // Every unprepare step comes after the CDI spec went: the start finishes the unprepare
        // instead of making the instance again for a claim the kubelet is letting go.
        EXPECT_THAT(node_.Get("/debug/claims"), ::testing::Not(HasSubstr("\"MIG-")));
        EXPECT_FALSE(SeriesSaysPrepared(device)) << node_.Get("/metrics");
        EXPECT_EQ(node_.Unprepare(c), "") << node_.process().Output();
        ExpectNothingLeft();

        // The placement is free again.
        const NodeHarness::Claim next = node_.AllocatedClaim("n-" + suffix, device);
        EXPECT_EQ(node_.Prepare(next), "");
        EXPECT_EQ(node_.Unprepare(next), "");
        ExpectNothingLeft();
        node_.Stop();
      }
    }
  }
  EXPECT_EQ(crashes, rounds * 10);
  RecordProperty("crashes", crashes);
}

}  // namespace
}  // namespace dralens
