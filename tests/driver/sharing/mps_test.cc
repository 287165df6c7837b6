#include "driver/sharing/mps.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/sharing/config.h"
#include "driver/sharing/planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::driver::sharing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kRoot[] = "/var/lib/kubelet/plugins/gpu.dralens.dev/mps";
constexpr char kUid[] = "0d7a3c6e-1f2b-4c5d-9e8f-0123456789ab";

common::Quantity Q(absl::string_view text) { return *common::Quantity::Parse(text); }

TEST(MpsPathsFor, Layout) {
  absl::StatusOr<MpsPaths> p = MpsPathsFor(kRoot, kUid);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->claim_dir, absl::StrCat(kRoot, "/", kUid));
  EXPECT_EQ(p->pipe_dir, absl::StrCat(kRoot, "/", kUid, "/pipe"));
  EXPECT_EQ(p->log_dir, absl::StrCat(kRoot, "/", kUid, "/log"));
  // A trailing slash on the root does not double up.
  EXPECT_EQ(MpsPathsFor(absl::StrCat(kRoot, "/"), kUid)->pipe_dir, p->pipe_dir);
}

TEST(MpsPathsFor, RefusesTraversal) {
  for (const char* uid : {"../etc", "..", "a/b", "/abs", "", "x/../../y", ".hidden"}) {
    absl::StatusOr<MpsPaths> p = MpsPathsFor(kRoot, uid);
    ASSERT_FALSE(p.ok()) << uid;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(p.status().message(), HasSubstr("claim UID")) << uid;
  }
  EXPECT_FALSE(MpsPathsFor("relative/root", kUid).ok());
  EXPECT_FALSE(MpsPathsFor("", kUid).ok());
}

TEST(PinnedMemoryLimitMiB, Precedence) {
  MpsConfig mps;
  MpsDeviceRef dev{"GPU-1111", 3, 0};
  EXPECT_EQ(PinnedMemoryLimitMiB(mps, dev), std::nullopt);
  mps.default_pinned_device_memory_limit = Q("10Gi");
  EXPECT_EQ(PinnedMemoryLimitMiB(mps, dev), 10240);
  mps.default_per_device_pinned_memory_limit.emplace("3", Q("2Gi"));
  EXPECT_EQ(PinnedMemoryLimitMiB(mps, dev), 2048);
  mps.default_per_device_pinned_memory_limit.emplace("GPU-1111", Q("1500Mi"));
  EXPECT_EQ(PinnedMemoryLimitMiB(mps, dev), 1500);
  // Entries for other devices do not apply; decimal quantities are rounded down to MiB.
  MpsDeviceRef other{"GPU-2222", 4, 0};
  mps.default_pinned_device_memory_limit = Q("1G");
  EXPECT_EQ(PinnedMemoryLimitMiB(mps, other), 953);
}

TEST(MpsContainerEdits, MinimalConfig) {
  MpsPaths paths = *MpsPathsFor(kRoot, kUid);
  SharingContainerEdits e = MpsContainerEdits(paths, MpsConfig{}, {"GPU-1111", 0, 0});
  EXPECT_THAT(e.env, ElementsAre("CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
                                 "CUDA_MPS_LOG_DIRECTORY=/var/log/nvidia-mps"));
  ASSERT_EQ(e.mounts.size(), 2u);
  EXPECT_EQ(e.mounts[0],
            (SharingMount{paths.pipe_dir, "/tmp/nvidia-mps", {"rw", "nosuid", "nodev", "bind"}}));
  EXPECT_EQ(
      e.mounts[1],
      (SharingMount{paths.log_dir, "/var/log/nvidia-mps", {"ro", "nosuid", "nodev", "bind"}}));
}

TEST(MpsContainerEdits, LimitsAsClientEnv) {
  MpsConfig mps;
  mps.default_active_thread_percentage = 25;
  mps.default_pinned_device_memory_limit = Q("10Gi");
  SharingContainerEdits e = MpsContainerEdits(*MpsPathsFor(kRoot, kUid), mps, {"GPU-1111", 5, 1});
  EXPECT_THAT(e.env, ElementsAre("CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
                                 "CUDA_MPS_LOG_DIRECTORY=/var/log/nvidia-mps",
                                 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25",
                                 "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=1=10240M"));
}

TEST(MpsDaemonSettingsFor, FromConfig) {
  MpsConfig mps;
  mps.default_active_thread_percentage = 60;
  mps.default_per_device_pinned_memory_limit.emplace("GPU-1111", Q("4Gi"));
  mps.multi_user = true;
  MpsPaths paths = *MpsPathsFor(kRoot, kUid);
  MpsDaemonSettings s = MpsDaemonSettingsFor({"GPU-1111", 0, 0}, paths, mps);
  EXPECT_EQ(s.device_uuid, "GPU-1111");
  EXPECT_EQ(s.paths, paths);
  EXPECT_EQ(s.active_thread_percentage, 60);
  EXPECT_EQ(s.pinned_memory_limit_mib, 4096);
  EXPECT_TRUE(s.multi_user);
}

TEST(SimulatedMpsControl, StartStopIdempotent) {
  SimulatedMpsControl control;
  MpsDaemonSettings s = MpsDaemonSettingsFor({"GPU-1111", 0, 0}, *MpsPathsFor(kRoot, kUid), {});
  ASSERT_TRUE(control.Start(s).ok());
  ASSERT_TRUE(control.Start(s).ok());
  EXPECT_EQ(control.Running("GPU-1111"), s);

  MpsDaemonSettings other = s;
  other.active_thread_percentage = 10;
  absl::Status st = control.Start(other);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);

  ASSERT_TRUE(control.Stop("GPU-1111").ok());
  ASSERT_TRUE(control.Stop("GPU-1111").ok());
  EXPECT_EQ(control.Running("GPU-1111"), std::nullopt);

  std::vector<SimulatedMpsControl::Call> calls = control.Calls();
  ASSERT_EQ(calls.size(), 5u);
  EXPECT_EQ(calls[0].op, SimulatedMpsControl::Call::Op::kStart);
  EXPECT_EQ(calls[0].settings, s);
  EXPECT_EQ(calls[2].settings, other);
  EXPECT_EQ(calls[3], (SimulatedMpsControl::Call{SimulatedMpsControl::Call::Op::kStop, "GPU-1111",
                                                 std::nullopt}));
}

TEST(SimulatedMpsControl, InjectedFailureStartsNothing) {
  SimulatedMpsControl control;
  control.FailNextStartForTest(absl::UnavailableError("daemon did not come up"));
  MpsDaemonSettings s = MpsDaemonSettingsFor({"GPU-1111", 0, 0}, *MpsPathsFor(kRoot, kUid), {});
  EXPECT_EQ(control.Start(s).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(control.Running("GPU-1111"), std::nullopt);
  EXPECT_TRUE(control.Start(s).ok());
}

TEST(SimulatedMpsControl, ConcurrentCallsAllRecorded) {
  SimulatedMpsControl control;
  MpsPaths paths = *MpsPathsFor(kRoot, kUid);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const std::string uuid = absl::StrCat("GPU-", t, "-", i);
        EXPECT_TRUE(control.Start(MpsDaemonSettingsFor({uuid, i, 0}, paths, {})).ok());
        EXPECT_TRUE(control.Stop(uuid).ok());
      }
    });
  }
  for (std::thread& th : threads) {
    th.join();
  }
  EXPECT_EQ(control.Calls().size(), 400u);
  EXPECT_EQ(control.Running("GPU-0-0"), std::nullopt);
}

// The pieces together, as the preparer uses them: claim config → effective config → decision →
// daemon settings and client edits.
TEST(SharingPipeline, MpsClaimEndToEnd) {
  model::DeviceAllocationConfiguration entry;
  entry.source = "FromClaim";
  entry.requests = {"gpu"};
  entry.opaque = model::OpaqueDeviceConfiguration{
      "gpu.dralens.dev",
      {{"apiVersion", kConfigApiVersion},
       {"kind", kGpuConfigKind},
       {"sharing",
        {{"strategy", "MPS"},
         {"mpsConfig",
          {{"defaultActiveThreadPercentage", 40}, {"defaultPinnedDeviceMemoryLimit", "8Gi"}}}}}}};
  absl::StatusOr<DeviceConfig> config =
      ResolveDeviceConfig({entry}, "gpu.dralens.dev", {"gpu", DeviceType::kGpu});
  ASSERT_TRUE(config.ok()) << config.status();

  SharingDevice device{"gpu-0", DeviceType::kGpu, "GPU-1111", Q("80Gi")};
  SharingDecision first = SharingPlanner().Plan(device, {kUid, config->sharing, {}, {}}, {});
  ASSERT_TRUE(first.allowed) << first.reason;
  ASSERT_EQ(first.strategy, SharingStrategy::kMps);

  // A second claim with the same config joins the first claim's daemon.
  SharingDecision second = SharingPlanner().Plan(device, {"claim-2", config->sharing, {}, {}},
                                                 {{kUid, std::nullopt, std::nullopt, first}});
  ASSERT_TRUE(second.allowed) << second.reason;
  ASSERT_EQ(second.mps_owner_claim_uid, kUid);

  absl::StatusOr<MpsPaths> paths = MpsPathsFor(kRoot, second.mps_owner_claim_uid);
  ASSERT_TRUE(paths.ok()) << paths.status();
  MpsDeviceRef ref{device.uuid, 0, 0};
  SimulatedMpsControl control;
  ASSERT_TRUE(control.Start(MpsDaemonSettingsFor(ref, *paths, second.sharing.mps)).ok());
  EXPECT_EQ(control.Running("GPU-1111")->pinned_memory_limit_mib, 8192);
  SharingContainerEdits edits = MpsContainerEdits(*paths, second.sharing.mps, ref);
  EXPECT_THAT(edits.env, ::testing::Contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40"));
  EXPECT_THAT(edits.env, ::testing::Contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M"));
  EXPECT_EQ(edits.mounts[0].host_path, absl::StrCat(kRoot, "/", kUid, "/pipe"));
}

}  // namespace
}  // namespace dralens::driver::sharing
