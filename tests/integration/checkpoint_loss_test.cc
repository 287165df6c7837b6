// `dralens node` started after its checkpoint was lost while claims prepared before it still
// have their CDI specs: unreadable (set aside as checkpoint.json.corrupt-*) or gone. With
// --dynamic-mig the node cannot tell those claims' MIG instances from orphans, so it refuses to
// start, says why and what to do, and keeps refusing until the specs are dealt with; without
// it the node serves, and the kubelet's unprepare removes the leftover specs.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
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

std::string SpecFile(const NodeHarness::Claim& c) {
  return "k8s.gpu.dralens.dev-claim_" + c.uid + ".json";
}

// Overwrites the checkpoint with bytes that are not a checkpoint (a torn write by a broken disk).
void Corrupt(const NodeHarness& node) {
  std::ofstream(node.PluginDir() + "/checkpoint.json", std::ios::trunc) << "{\"version\":1,\"cla";
}

std::vector<std::string> SetAside(const NodeHarness& node) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(node.PluginDir(), ec)) {
    if (absl::StrContains(e.path().filename().string(), "checkpoint.json.corrupt-")) {
      out.push_back(e.path().filename().string());
    }
  }
  return out;
}

TEST(CheckpointLossTest, DynamicMigNodeRefusesUntilTheLeftoverSpecsAreDealtWith) {
  NodeHarness node;
  node.UseDeviceSource(
      {"--device-source=simulated", "--simulated-profile=dgx-h100", "--dynamic-mig"});
  node.Start();
  const std::string device = node.PublishedDevice("gpu-1-mig-1g10gb-");
  ASSERT_FALSE(device.empty());
  const NodeHarness::Claim c = node.AllocatedClaim("mig", device);
  ASSERT_EQ(node.Prepare(c), "") << node.process().Output();
  node.Stop();
  ASSERT_THAT(node.CdiFiles(), ElementsAre(SpecFile(c)));

  Corrupt(node);
  std::string output;
  EXPECT_NE(node.StartExpectingExit(&output), 0);
  EXPECT_THAT(output, HasSubstr("the checkpoint was unreadable"));
  EXPECT_THAT(output, HasSubstr(c.uid));
  EXPECT_THAT(output, HasSubstr("--dynamic-mig"));
  EXPECT_THAT(output, HasSubstr("Checkpoint lost"));
  EXPECT_THAT(SetAside(node), ::testing::SizeIs(1));  // kept for a person to inspect
  EXPECT_THAT(node.CdiFiles(), ElementsAre(SpecFile(c)));

  // The bad file is aside now, so the next start finds none: still a lost checkpoint.
  EXPECT_NE(node.StartExpectingExit(&output), 0);
  EXPECT_THAT(output, HasSubstr("there is no checkpoint"));
  EXPECT_THAT(output, HasSubstr(c.uid));

  // Once the operator removed the spec (no pod uses the claim), the node starts.
  std::filesystem::remove(node.CdiRoot() + "/" + SpecFile(c));
  node.Start();
  EXPECT_THAT(node.CheckpointedUids(), IsEmpty());
  node.Stop();
}

TEST(CheckpointLossTest, NodeWithoutDynamicMigServesAndUnprepareRemovesTheLeftoverSpec) {
  NodeHarness node;
  node.Start();
  const NodeHarness::Claim c = node.AllocatedClaim("full", "gpu-2");
  ASSERT_EQ(node.Prepare(c), "") << node.process().Output();
  node.Stop();
  ASSERT_THAT(node.CdiFiles(), ElementsAre(SpecFile(c)));

  Corrupt(node);
  node.Start();
  EXPECT_THAT(node.process().Output(), HasSubstr("claims prepared before the checkpoint was lost"));
  EXPECT_THAT(node.process().Output(), HasSubstr(c.uid));
  EXPECT_THAT(SetAside(node), ::testing::SizeIs(1));
  EXPECT_THAT(node.CheckpointedUids(), IsEmpty());
  // The kubelet unprepares the claim when its pod goes: the spec goes too.
  EXPECT_EQ(node.Unprepare(c), "");
  EXPECT_THAT(node.CdiFiles(), IsEmpty());
  // And the device can be prepared for a new claim.
  const NodeHarness::Claim next = node.AllocatedClaim("next", "gpu-2");
  EXPECT_EQ(node.Prepare(next), "") << node.process().Output();
  EXPECT_THAT(node.CdiFiles(), ElementsAre(SpecFile(next)));
  node.Stop();
}

}  // namespace
}  // namespace dralens
