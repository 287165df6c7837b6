// `dralens node` surviving what real nodes do, as the real binary against the embedded API
// server: the kubelet wiping the node's slices (at its start) while the plugin runs, a kubelet
// registering the plugin again, temp files left by a kill, claims orphaned while the plugin was
// away, and sharing settings after a kill -9.
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/integration/node_harness.h"
#include "tests/testing/eventually.h"

namespace dralens {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::dralens::testing::Eventually;
using testing::NodeHarness;

// The `ts=` of the first log line after byte `from` of `output` that contains `needle`.
std::optional<absl::Time> LogTime(const std::string& output, size_t from,
                                  const std::string& needle) {
  size_t at = output.find(needle, from);
  if (at == std::string::npos) {
    return std::nullopt;
  }
  const size_t line = output.rfind('\n', at);
  const size_t ts = output.find("ts=", line == std::string::npos ? 0 : line);
  if (ts == std::string::npos || ts > at) {
    return std::nullopt;
  }
  const std::string text = output.substr(ts + 3, output.find(' ', ts) - ts - 3);
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &error)) {
    return std::nullopt;
  }
  return t;
}

class NodeReconcileTest : public ::testing::Test {
 protected:
  void StartNode(const std::vector<std::string>& extra_flags = {}) { node_.Start({}, extra_flags); }
  void StartReady() {
    StartNode();
    node_.Register();
    ASSERT_TRUE(Eventually([&] { return Readyz() == 200; })) << Output();
  }
  int Readyz() { return node_.Status("/readyz"); }
  double Metric(const std::string& family, const std::vector<std::string>& labels = {}) {
    return node_.Metric(family, labels);
  }
  std::string Output() { return node_.process().Output(); }
  std::string DriverDir() const { return node_.PluginDir(); }
  std::string CdiSpec(const std::string& uid) const {
    return node_.CdiRoot() + "/k8s.gpu.dralens.dev-claim_" + uid + ".json";
  }

  NodeHarness node_;
};

TEST_F(NodeReconcileTest, KubeletWipeIsRepublishedAndNotReadyInBetween) {
  StartReady();
  ASSERT_EQ(node_.Devices(), 8u);
  const int64_t generation = node_.Slices()[0]["spec"]["pool"]["generation"];

  // While the API server refuses new slices, the wiped pool stays empty: not ready.
  node_.api().InjectFault({.kind = sim::FaultRule::Kind::kStatus,
                           .verb = "create",
                           .resource = "resourceslices",
                           .times = -1,
                           .code = 500});
  node_.Wipe();
  ASSERT_TRUE(Eventually([&] { return Readyz() == 503; })) << Output();
  EXPECT_TRUE(node_.Slices().empty());
  EXPECT_GE(Metric("dralens_slices_drift_total", {"kind=\"deleted\""}), 1);
  // The pass that tries to repair it fails (after the client's own retries).
  ASSERT_TRUE(
      Eventually([&] { return Metric("dralens_slices_syncs_total", {"result=\"error\""}) >= 1; }));
  EXPECT_EQ(Readyz(), 503);
  // The API server recovers: the backoff retries, the pool is back at a higher generation.
  node_.api().ClearFaults();
  ASSERT_TRUE(Eventually([&] { return node_.Devices() == 8 && Readyz() == 200; })) << Output();
  EXPECT_GT(node_.Slices()[0]["spec"]["pool"]["generation"].get<int64_t>(), generation);

  // A plain wipe, as a kubelet restart does: the watch sees it and the pool is republished
  // without waiting for any timer (the periodic pass is minutes away). The time from the wipe
  // to the republish, from the binary's own log timestamps, is printed for the record.
  const size_t log_from = Output().size();
  const double changed = Metric("dralens_slices_syncs_total", {"result=\"changed\""});
  const absl::Time wiped = absl::Now();
  node_.Wipe();
  ASSERT_TRUE(Eventually([&] { return node_.Devices() == 8; })) << Output();
  ASSERT_TRUE(Eventually([&] { return Readyz() == 200; }));
  EXPECT_EQ(Metric("dralens_slices_syncs_total", {"result=\"changed\""}), changed + 1);
  ASSERT_TRUE(node_.process().WaitForOutput("slices published", absl::Seconds(5)));
  std::optional<absl::Time> detected = LogTime(Output(), log_from, "slice drift");
  std::optional<absl::Time> published = LogTime(Output(), log_from, "slices published");
  ASSERT_TRUE(detected.has_value() && published.has_value()) << Output().substr(log_from);
  EXPECT_LE(*detected, *published);
  const absl::Duration republish = *published - wiped;
  RecordProperty("wipe_to_republish_ms", absl::StrCat(absl::ToInt64Milliseconds(republish)));
  std::printf("wipe to republish: %s (drift seen after %s)\n",
              absl::FormatDuration(republish).c_str(),
              absl::FormatDuration(*detected - wiped).c_str());
}

TEST_F(NodeReconcileTest, ARegistrationByTheKubeletTriggersACheck) {
  StartReady();
  auto passes = [&] {
    return Metric("dralens_slices_syncs_total", {"result=\"unchanged\""}) +
           Metric("dralens_slices_syncs_total", {"result=\"changed\""});
  };
  const double before = passes();
  // A restarted kubelet registers the plugin again; nothing else changed on the server.
  node_.Register();
  ASSERT_TRUE(Eventually([&] { return passes() > before; })) << Output();
  EXPECT_EQ(Readyz(), 200);
}

TEST_F(NodeReconcileTest, StartRemovesOnlyOurOwnTempFiles) {
  fs::create_directories(DriverDir());
  fs::create_directories(node_.CdiRoot());
  const std::vector<std::string> ours = {
      DriverDir() + "/.checkpoint.json.tmp-a1B2c3",
      node_.CdiRoot() + "/.k8s.gpu.dralens.dev-claim_9d1e.json.tmp-x9Y8z7"};
  const std::vector<std::string> foreign = {node_.CdiRoot() + "/.nvidia.yaml.tmp-abcdef",
                                            node_.CdiRoot() + "/vendor.json",
                                            DriverDir() + "/notes.txt"};
  for (const std::string& path : ours) {
    std::ofstream(path) << "{\"partial";
  }
  for (const std::string& path : foreign) {
    std::ofstream(path) << "keep";
  }
  StartNode();
  for (const std::string& path : ours) {
    EXPECT_FALSE(fs::exists(path)) << path;
  }
  for (const std::string& path : foreign) {
    EXPECT_TRUE(fs::exists(path)) << path;
  }
  EXPECT_EQ(Metric("dralens_node_temp_files_removed_total", {"location=\"plugin_dir\""}), 1);
  EXPECT_EQ(Metric("dralens_node_temp_files_removed_total", {"location=\"cdi_root\""}), 1);
  EXPECT_NE(Output().find("removed a temp file left by an interrupted write"), std::string::npos);
}

TEST_F(NodeReconcileTest, OrphansAreReportedAndUnpreparedOnlyWhenAskedTo) {
  StartReady();
  const NodeHarness::Claim kept = node_.AllocatedClaim("kept", "gpu-0");
  const NodeHarness::Claim gone = node_.AllocatedClaim("gone", "gpu-1");
  ASSERT_EQ(node_.Prepare(kept), "");
  ASSERT_EQ(node_.Prepare(gone), "");
  // Killed, and meanwhile the claim is deleted: nobody will ask for its unprepare.
  EXPECT_EQ(node_.process().Stop(SIGKILL, absl::Seconds(10)), 128 + SIGKILL);
  ASSERT_TRUE(node_.client().Delete(k8s::kResourceClaims, NodeHarness::kNs, "gone", {}).ok());

  // Found at start and reported; not touched without the option.
  StartNode();
  ASSERT_TRUE(Eventually([&] {
    return Metric("dralens_node_orphaned_claims", {"reason=\"gone\""}) == 1;
  })) << Output();
  EXPECT_EQ(Metric("dralens_node_orphaned_claims", {"reason=\"replaced\""}), 0);
  EXPECT_EQ(Metric("dralens_node_orphaned_claim_age_seconds", {"uid=\"" + gone.uid + "\""}), 0);
  EXPECT_EQ(Metric("dralens_node_orphaned_claim_age_seconds", {"uid=\"" + kept.uid + "\""}), -1);
  EXPECT_TRUE(fs::exists(CdiSpec(gone.uid)));
  EXPECT_EQ(node_.process().Stop(SIGTERM, absl::Seconds(15)), 0);

  // With --unprepare-orphans-after, released through the kubelet's unprepare path.
  StartNode({"--orphan-check-interval=1s", "--unprepare-orphans-after=1s"});
  ASSERT_TRUE(Eventually([&] {
    return Metric("dralens_node_orphans_unprepared_total", {"result=\"ok\""}) == 1;
  })) << Output();
  EXPECT_FALSE(fs::exists(CdiSpec(gone.uid)));
  EXPECT_TRUE(fs::exists(CdiSpec(kept.uid)));
  EXPECT_EQ(Metric("dralens_node_orphaned_claims", {"reason=\"gone\""}), 0);
  EXPECT_EQ(Metric("dralens_node_orphaned_claim_age_seconds", {"uid=\"" + gone.uid + "\""}), -1);
  EXPECT_NE(Output().find("orphaned claim unprepared"), std::string::npos);
  // Its device is free again.
  const NodeHarness::Claim next = node_.AllocatedClaim("next", "gpu-1");
  EXPECT_EQ(node_.Prepare(next), "");
}

TEST_F(NodeReconcileTest, SharingOfRestoredClaimsIsAppliedAgainAfterAKill) {
  StartReady();
  const json time_slicing = {
      {"apiVersion", "resource.dralens.dev/v1beta1"},
      {"kind", "GpuConfig"},
      {"sharing", {{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", "Long"}}}}}};
  const json mps = {
      {"apiVersion", "resource.dralens.dev/v1beta1"},
      {"kind", "GpuConfig"},
      {"sharing", {{"strategy", "MPS"}, {"mpsConfig", {{"defaultActiveThreadPercentage", 50}}}}}};
  ASSERT_EQ(node_.Prepare(node_.AllocatedClaim("ts", "gpu-2", time_slicing)), "");
  ASSERT_EQ(node_.Prepare(node_.AllocatedClaim("mps", "gpu-3", mps)), "");
  EXPECT_EQ(node_.process().Stop(SIGKILL, absl::Seconds(10)), 128 + SIGKILL);

  // The new process's GPUs and daemons start from nothing: the settings are applied again.
  StartNode();
  EXPECT_EQ(
      Metric("dralens_sharing_restores_total", {"strategy=\"time_slicing\"", "result=\"ok\""}), 1);
  EXPECT_EQ(Metric("dralens_sharing_restores_total", {"strategy=\"mps\"", "result=\"ok\""}), 1);
  EXPECT_EQ(Metric("dralens_sharing_restores_total", {"result=\"error\""}), 0);
}

}  // namespace
}  // namespace dralens
