// The node role when its disk fails it: the plugin directory (where the checkpoint lives) on a
// small tmpfs of its own, filled up (ENOSPC) and remounted read-only (EROFS) while the node
// serves. A prepare then fails for that claim with an error that says why, nothing is left
// half-written, the claims already prepared are untouched, and the next prepare after space
// returns succeeds.
//
// The tmpfs is mounted in a private mount namespace of the node (`unshare -m`), so the machine
// running the test sees nothing of it; the test reaches it through /proc/<pid>/root. Needs root
// (CI runs as root); elsewhere the test is skipped and says so.
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/node_harness.h"

namespace dralens {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::NodeHarness;

bool CanMountNamespaces() {
  if (geteuid() != 0) {
    return false;
  }
  const auto [code, out] =
      testing::RunToCompletion({"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh",
                                "-c", "mount -t tmpfs -o size=64k tmpfs /mnt && umount /mnt"},
                               {}, absl::Seconds(10));
  return code == 0;
}

// Fills the filesystem holding `dir` with one file until a write fails.
void Fill(const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  const std::string chunk(4096, 'x');
  for (int i = 0; i < 1 << 16 && out; ++i) {
    out.write(chunk.data(), chunk.size());
    out.flush();
  }
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class DiskFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CanMountNamespaces()) {
      GTEST_SKIP() << "needs root and unshare -m (mount namespaces) to give the node a tmpfs";
    }
    fs::create_directories(node_.PluginsDir());
    node_.Start({"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
                 "mount -t tmpfs -o size=256k,mode=0755 tmpfs \"$0\" && shift && exec \"$@\"",
                 node_.PluginsDir(), "placeholder"});
    node_.SeeThroughProcessRoot();
    node_.Register();
  }

  // The plugin directory as the node sees it (on its tmpfs).
  std::string PluginDir() { return node_.SeenFrom() + node_.PluginDir(); }
  std::string Filler() { return node_.SeenFrom() + node_.PluginsDir() + "/filler"; }
  void Nsenter(const std::string& mount_options) {
    const auto [code, out] = testing::RunToCompletion(
        {"/usr/bin/nsenter", "-t", std::to_string(node_.process().pid()), "-m", "mount", "-o",
         "remount," + mount_options, node_.PluginsDir()},
        {}, absl::Seconds(10));
    ASSERT_EQ(code, 0) << out;
  }

  NodeHarness node_;
};

TEST_F(DiskFaultTest, AFullDiskFailsTheClaimCleanlyAndTheNextPrepareSucceeds) {
  const NodeHarness::Claim before = node_.AllocatedClaim("before", "gpu-0");
  const NodeHarness::Claim during = node_.AllocatedClaim("during", "gpu-1");
  ASSERT_EQ(node_.Prepare(before), "");
  const std::vector<std::string> files_before = Names(PluginDir());

  Fill(Filler());
  struct statvfs st {};
  ASSERT_EQ(statvfs(PluginDir().c_str(), &st), 0);
  ASSERT_LT(st.f_bavail * st.f_frsize, 8192u) << "the tmpfs is not full";

  const std::string error = node_.Prepare(during);
  EXPECT_THAT(error, HasSubstr("No space left on device")) << error;
  EXPECT_THAT(error, HasSubstr("checkpoint")) << error;
  // Nothing half-written: the same files as before, the checkpoint still names only the
  // claim prepared before, and no CDI spec for the failed claim.
  EXPECT_EQ(Names(PluginDir()), files_before);
  EXPECT_EQ(node_.CheckpointedUids(), std::vector<std::string>{before.uid});
  for (const std::string& spec : Names(node_.CdiRoot())) {
    EXPECT_FALSE(absl::StrContains(spec, during.uid)) << spec;
  }

  fs::remove(Filler());
  EXPECT_EQ(node_.Prepare(during), "");
  std::vector<std::string> both = {before.uid, during.uid};
  std::sort(both.begin(), both.end());
  EXPECT_EQ(node_.CheckpointedUids(), both);
  EXPECT_EQ(node_.Unprepare(before), "");
  EXPECT_EQ(node_.Unprepare(during), "");
  EXPECT_TRUE(node_.CheckpointedUids().empty());
}

TEST_F(DiskFaultTest, AReadOnlyCheckpointDirectoryFailsTheClaimAndUnprepareWaitsForIt) {
  const NodeHarness::Claim held = node_.AllocatedClaim("held", "gpu-0");
  const NodeHarness::Claim blocked = node_.AllocatedClaim("blocked", "gpu-1");
  ASSERT_EQ(node_.Prepare(held), "");

  Nsenter("ro");
  const std::string error = node_.Prepare(blocked);
  EXPECT_THAT(error, HasSubstr("Read-only file system")) << error;
  // The prepared claim is still answered from memory, as the kubelet asks again after its own
  // restart.
  EXPECT_EQ(node_.Prepare(held), "");
  // Unprepare cannot record its change either: it fails, and the claim stays prepared.
  EXPECT_THAT(node_.Unprepare(held), HasSubstr("Read-only file system"));

  Nsenter("rw");
  EXPECT_EQ(node_.Prepare(blocked), "");
  EXPECT_EQ(node_.Unprepare(held), "");
  EXPECT_EQ(node_.Unprepare(blocked), "");
  EXPECT_TRUE(node_.CheckpointedUids().empty());
}

}  // namespace
}  // namespace dralens
