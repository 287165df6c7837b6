// The node role on a real NVIDIA GPU, driven as the kubelet drives it: full GPU, then a MIG
// instance that dralens creates (switching MIG mode on, on Hopper and later), then the full GPU
// again once dralens has destroyed the instance and switched MIG mode off; and a time-sliced
// claim, whose time slice dralens sets and puts back.
//
// Not part of ctest: it needs a GPU whose MIG mode is off and may be changed, so it runs only
// when asked, through tests/hardware/run-on-gpu.sh (which also puts the MIG mode back should
// the test stop half-way). DRALENS_BINARY names the binary to run.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/node_harness.h"

namespace dralens {
namespace {

using testing::NodeHarness;

// A shell command's output, echoed so that the run's log shows what nvidia-smi saw.
std::string Shell(const std::string& command) {
  std::string out;
  if (FILE* p = popen((command + " 2>&1").c_str(), "r")) {
    char buffer[4096];
    size_t n = 0;
    while ((n = fread(buffer, 1, sizeof(buffer), p)) > 0) {
      out.append(buffer, n);
    }
    pclose(p);
  }
  std::printf("$ %s\n%s", command.c_str(), out.c_str());
  return out;
}

std::string MigMode() {
  return std::string(absl::StripAsciiWhitespace(
      Shell("nvidia-smi -i 0 --query-gpu=mig.mode.current --format=csv,noheader")));
}

std::string Attribute(const nlohmann::json& device, const std::string& name) {
  const nlohmann::json& a = device.value("attributes", nlohmann::json::object());
  return a.contains(name) ? a[name].value("string", "") : "";
}

TEST(MigOnGpuTest, FullGpuThenADynamicMigInstanceThenTheFullGpuAgain) {
  ASSERT_EQ(MigMode(), "Disabled") << "needs a GPU whose MIG mode is off";
  NodeHarness node;
  node.UseDeviceSource({"--device-source=nvml", "--dynamic-mig"});
  node.Start();
  node.Register();

  std::string full;
  std::string mig;
  std::string mig_profile;
  auto slices = node.client().List(k8s::kResourceSlices, "", {});
  ASSERT_TRUE(slices.ok()) << slices.status();
  for (const nlohmann::json& slice : slices->items) {
    for (const nlohmann::json& device : slice["spec"].value("devices", nlohmann::json::array())) {
      const std::string type = Attribute(device, "type");
      const std::string profile = Attribute(device, "profile");
      if (type == "gpu" && full.empty()) {
        full = device["name"];
      }
      if (type == "mig" && mig.empty() && absl::StartsWith(profile, "1g.") &&
          !absl::StrContains(profile, "+")) {
        mig = device["name"];
        mig_profile = profile;
      }
    }
  }
  std::printf("full GPU %s, first 1g placement %s (%s)\n", full.c_str(), mig.c_str(),
              mig_profile.c_str());
  ASSERT_FALSE(full.empty());
  ASSERT_FALSE(mig.empty()) << "no MIG placement published for a MIG-capable GPU";

  std::vector<std::string> ids;
  const NodeHarness::Claim first = node.AllocatedClaim("full-1", full);
  EXPECT_EQ(node.Prepare(first, &ids), "");
  std::printf("full GPU prepared: %s\n", absl::StrJoin(ids, ",").c_str());
  EXPECT_EQ(MigMode(), "Disabled");
  EXPECT_EQ(node.Unprepare(first), "");

  ids.clear();
  const NodeHarness::Claim sliced = node.AllocatedClaim("mig-1", mig);
  EXPECT_EQ(node.Prepare(sliced, &ids), "");
  std::printf("MIG device prepared: %s\n", absl::StrJoin(ids, ",").c_str());
  EXPECT_EQ(MigMode(), "Enabled");
  EXPECT_THAT(Shell("nvidia-smi -L"), ::testing::HasSubstr("MIG " + mig_profile));
  Shell("nvidia-smi mig -lgi; nvidia-smi mig -lci; ls " + node.CdiRoot() + "; cat " +
        node.CdiRoot() + "/*.json");
  EXPECT_EQ(node.Unprepare(sliced), "");
  EXPECT_THAT(Shell("nvidia-smi mig -lgi"), ::testing::Not(::testing::HasSubstr(mig_profile)));
  EXPECT_EQ(MigMode(), "Disabled") << "MIG mode stays on after the last instance went";

  const NodeHarness::Claim again = node.AllocatedClaim("full-2", full);
  EXPECT_EQ(node.Prepare(again), "");
  EXPECT_EQ(node.Unprepare(again), "");
  EXPECT_EQ(node.process().Stop(SIGTERM, absl::Seconds(20)), 0);
  const std::string log = node.process().Output();
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, "MIG") || absl::StrContains(line, "level=warn") ||
        absl::StrContains(line, "level=error") || absl::StrContains(line, "discovered")) {
      std::printf("%.*s\n", static_cast<int>(line.size()), line.data());
    }
  }
}

// A time-sliced claim: dralens sets the GPU's time slice for it (nvidia-smi compute-policy
// --set-timeslice, as NVML has no call for it) and puts the default back when the claim goes.
TEST(TimeSliceOnGpuTest, ATimeSlicedClaimSetsTheIntervalAndTheDefaultComesBack) {
  ASSERT_EQ(MigMode(), "Disabled") << "needs a GPU whose MIG mode is off";
  const std::string before = Shell("nvidia-smi compute-policy -l");
  NodeHarness node;
  node.UseDeviceSource({"--device-source=nvml"});
  node.Start();
  node.Register();
  const nlohmann::json long_slices = nlohmann::json::parse(R"({
      "apiVersion": "resource.dralens.dev/v1beta1", "kind": "GpuConfig",
      "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}})");
  const NodeHarness::Claim sliced = node.AllocatedClaim("sliced", "gpu-0", long_slices);
  std::vector<std::string> ids;
  EXPECT_EQ(node.Prepare(sliced, &ids), "");
  std::printf("time-sliced claim prepared: %s\n", absl::StrJoin(ids, ",").c_str());
  const std::string during = Shell("nvidia-smi compute-policy -l");
  EXPECT_NE(during, before) << "the GPU's time slice did not change";
  Shell("nvidia-smi -i 0 --query-gpu=compute_mode --format=csv,noheader");
  EXPECT_EQ(node.Unprepare(sliced), "");
  EXPECT_EQ(Shell("nvidia-smi compute-policy -l"), before) << "the time slice was not put back";
  EXPECT_EQ(node.process().Stop(SIGTERM, absl::Seconds(20)), 0);
  for (absl::string_view line : absl::StrSplit(node.process().Output(), '\n')) {
    if (absl::StrContains(line, "slic") || absl::StrContains(line, "sharing") ||
        absl::StrContains(line, "level=warn") || absl::StrContains(line, "level=error")) {
      std::printf("%.*s\n", static_cast<int>(line.size()), line.data());
    }
  }
}

}  // namespace
}  // namespace dralens
