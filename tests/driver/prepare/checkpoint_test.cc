#include "driver/prepare/checkpoint.h"

#include <sys/stat.h>

#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/common/clock.h"
#include "tests/driver/prepare/prepare_test_util.h"

namespace dralens::driver::prepare {
namespace {

using ::testing::HasSubstr;
using testing::LogCapture;
using ::testing::SizeIs;
using testing::Slurp;
using testing::Spit;
using testing::TempDir;

constexpr char kBoot[] = "11111111-2222-3333-4444-555555555555";

Checkpoint Sample() {
  Checkpoint cp;
  cp.node_boot_id = kBoot;
  CheckpointClaim a;
  a.state = ClaimState::kPrepareCompleted;
  a.namespace_name = "ml";
  a.name = "train-0";
  a.cdi_spec_file = "k8s.gpu.dralens.dev-claim_uid-a.json";
  a.devices.push_back(CheckpointDevice{.request_names = {"gpu"},
                                       .pool = "node-a",
                                       .device = "gpu-0",
                                       .cdi_device_ids = {"k8s.gpu.dralens.dev/claim=uid-a-gpu-0"},
                                       .share_id = std::nullopt,
                                       .type = model::DeviceType::kGpu,
                                       .uuid = "GPU-0",
                                       .device_class = "gpu.dralens.dev"});
  CheckpointClaim b;
  b.state = ClaimState::kPrepareStarted;
  b.namespace_name = "ml";
  b.name = "small \"quoted\" \n name";
  b.devices.push_back(
      CheckpointDevice{.request_names = {"small"},
                       .pool = "node-a",
                       .device = "gpu-1-mig-1g10gb-19-0",
                       .cdi_device_ids = {},
                       .share_id = "share-1",
                       .type = model::DeviceType::kMig,
                       .uuid = "MIG-1",
                       .dynamic_mig = CheckpointDevice::DynamicMig{.parent_uuid = "GPU-1",
                                                                   .profile = "1g.10gb",
                                                                   .placement_start = 3,
                                                                   .gi_id = 7,
                                                                   .ci_id = std::nullopt}});
  // Sharing decisions: MPS with its owner, and a consumable share with its memory.
  sharing::SharingConfig mps;
  mps.mode = sharing::SharingMode::kMps;
  mps.mps.default_active_thread_percentage = 25;
  CheckpointDevice::Sharing mps_share;
  mps_share.strategy = sharing::SharingStrategy::kMps;
  mps_share.config = mps;
  mps_share.mps_owner_claim_uid = "uid-z";
  a.devices[0].sharing = mps_share;
  CheckpointDevice::Sharing consumable;
  consumable.strategy = sharing::SharingStrategy::kConsumable;
  consumable.consumed_memory = *common::Quantity::Parse("10Gi");
  b.devices[0].sharing = consumable;
  cp.claims.emplace("uid-a", a);
  cp.claims.emplace("uid-b", b);
  return cp;
}

TEST(CheckpointCodecTest, RoundTrip) {
  Checkpoint cp = Sample();
  absl::StatusOr<Checkpoint> back = DecodeCheckpoint(EncodeCheckpoint(cp));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, cp);
}

TEST(CheckpointCodecTest, ABadSharingRecordIsRejectedWithItsPath) {
  nlohmann::json file = nlohmann::json::parse(EncodeCheckpoint(Sample()));
  file["claims"]["uid-a"]["devices"][0]["sharing"]["config"]["strategy"] = "Sometimes";
  file["checksum"] = CheckpointChecksum(file);
  absl::StatusOr<Checkpoint> back = DecodeCheckpoint(file.dump());
  ASSERT_FALSE(back.ok());
  EXPECT_THAT(std::string(back.status().message()),
              ::testing::HasSubstr("devices[0].sharing.config: sharing.strategy"));
}

TEST(CheckpointCodecTest, AnUnknownDeviceTypeOrStrategyIsRejectedWithItsPath) {
  nlohmann::json file = nlohmann::json::parse(EncodeCheckpoint(Sample()));
  file["claims"]["uid-a"]["devices"][0]["type"] = "fpga";
  file["checksum"] = CheckpointChecksum(file);
  absl::StatusOr<Checkpoint> back = DecodeCheckpoint(file.dump());
  ASSERT_FALSE(back.ok());
  EXPECT_THAT(std::string(back.status().message()),
              ::testing::HasSubstr("devices[0].type: unknown device type \"fpga\""));

  file = nlohmann::json::parse(EncodeCheckpoint(Sample()));
  file["claims"]["uid-a"]["devices"][0]["sharing"]["strategy"] = "sometimes";
  file["checksum"] = CheckpointChecksum(file);
  back = DecodeCheckpoint(file.dump());
  ASSERT_FALSE(back.ok());
  EXPECT_THAT(std::string(back.status().message()),
              ::testing::HasSubstr("sharing.strategy: unknown strategy \"sometimes\""));
}

TEST(CheckpointCodecTest, EmptyRoundTrip) {
  Checkpoint cp;
  cp.node_boot_id = kBoot;
  absl::StatusOr<Checkpoint> back = DecodeCheckpoint(EncodeCheckpoint(cp));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, cp);
}

TEST(CheckpointCodecTest, EncodingIsDeterministic) {
  EXPECT_EQ(EncodeCheckpoint(Sample()), EncodeCheckpoint(Sample()));
}

TEST(CheckpointCodecTest, Fnv1a64KnownValues) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ULL);
}

TEST(CheckpointCodecTest, ChecksumIgnoresFormattingButNotContent) {
  nlohmann::json file = nlohmann::json::parse(EncodeCheckpoint(Sample()));
  // Pretty-printed: same content, same checksum.
  ASSERT_TRUE(DecodeCheckpoint(file.dump(4)).ok());
  // A field added by a future version without bumping the checksum would be caught.
  file["claims"]["uid-a"]["name"] = "train-1";
  absl::StatusOr<Checkpoint> bad = DecodeCheckpoint(file.dump());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("checksum mismatch"));
}

TEST(CheckpointCodecTest, ChecksumCatchesEveryFlippedByteOfAValue) {
  std::string text = EncodeCheckpoint(Sample());
  size_t pos = text.find("gpu-1-mig");
  ASSERT_NE(pos, std::string::npos);
  for (size_t i = pos; i < pos + 9; ++i) {
    std::string flipped = text;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x01);
    absl::StatusOr<Checkpoint> decoded = DecodeCheckpoint(flipped);
    EXPECT_FALSE(decoded.ok()) << "byte " << i;
  }
}

TEST(CheckpointCodecTest, RejectsUnknownVersionAndBadState) {
  nlohmann::json file = nlohmann::json::parse(EncodeCheckpoint(Sample()));
  file["version"] = 2;
  file["checksum"] = CheckpointChecksum(file);
  absl::StatusOr<Checkpoint> v2 = DecodeCheckpoint(file.dump());
  ASSERT_FALSE(v2.ok());
  EXPECT_THAT(v2.status().message(), HasSubstr("unknown version 2"));

  file["version"] = 1;
  file["claims"]["uid-a"]["state"] = "Unpreparing";
  file["checksum"] = CheckpointChecksum(file);
  absl::StatusOr<Checkpoint> state = DecodeCheckpoint(file.dump());
  ASSERT_FALSE(state.ok());
  EXPECT_THAT(state.status().message(), HasSubstr("unknown state"));
}

class FileCheckpointStoreTest : public ::testing::Test {
 protected:
  std::string Path() const { return dir_.Join("gpu.dralens.dev/checkpoint.json"); }
  TempDir dir_;
  common::FakeClock clock_{absl::FromUnixSeconds(1700000123)};
};

TEST_F(FileCheckpointStoreTest, MissingFileIsFresh) {
  FileCheckpointStore store(Path(), kBoot, clock_);
  absl::StatusOr<LoadedCheckpoint> loaded = store.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->origin, LoadedCheckpoint::Origin::kFresh);
  EXPECT_TRUE(loaded->checkpoint.claims.empty());
  EXPECT_EQ(loaded->checkpoint.node_boot_id, kBoot);
}

TEST_F(FileCheckpointStoreTest, SaveThenLoad) {
  FileCheckpointStore store(Path(), kBoot, clock_);
  ASSERT_TRUE(store.Save(Sample()).ok());
  absl::StatusOr<LoadedCheckpoint> loaded = store.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->origin, LoadedCheckpoint::Origin::kLoaded);
  EXPECT_EQ(loaded->checkpoint, Sample());
  EXPECT_EQ(CheckpointPath(dir_.path(), "gpu.dralens.dev"), Path());
  // Only the plugin (root) may read what it prepared: claim names, device UUIDs, share IDs.
  struct stat st {};
  ASSERT_EQ(stat(Path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST_F(FileCheckpointStoreTest, FlippedByteOnDiskIsKeptAsideAndLogged) {
  FileCheckpointStore store(Path(), kBoot, clock_);
  ASSERT_TRUE(store.Save(Sample()).ok());
  std::string text = Slurp(Path());
  size_t pos = text.find("train-0");
  ASSERT_NE(pos, std::string::npos);
  text[pos] = 'T';
  Spit(Path(), text);

  LogCapture logs;
  absl::StatusOr<LoadedCheckpoint> loaded = store.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->origin, LoadedCheckpoint::Origin::kRebuilt);
  EXPECT_TRUE(loaded->checkpoint.claims.empty());
  EXPECT_THAT(loaded->reason, HasSubstr("checksum mismatch"));
  EXPECT_EQ(loaded->quarantined_path, Path() + ".corrupt-1700000123");
  // The bad bytes are kept, not wiped.
  EXPECT_EQ(Slurp(loaded->quarantined_path), text);
  EXPECT_FALSE(std::filesystem::exists(Path()));
  EXPECT_TRUE(logs.Contains("level=error"));
  EXPECT_TRUE(logs.Contains("kept aside"));
}

TEST_F(FileCheckpointStoreTest, GarbageIsKeptAside) {
  std::filesystem::create_directories(dir_.Join("gpu.dralens.dev"));
  Spit(Path(), "{not json");
  FileCheckpointStore store(Path(), kBoot, clock_);
  absl::StatusOr<LoadedCheckpoint> loaded = store.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->origin, LoadedCheckpoint::Origin::kRebuilt);
  EXPECT_EQ(Slurp(loaded->quarantined_path), "{not json");
  // A second bad file in the same second is kept under another name.
  Spit(Path(), "also bad");
  absl::StatusOr<LoadedCheckpoint> again = store.Load();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->quarantined_path, loaded->quarantined_path);
  EXPECT_EQ(Slurp(again->quarantined_path), "also bad");
  EXPECT_EQ(Slurp(loaded->quarantined_path), "{not json");
  // The next save starts a clean file beside the kept ones.
  ASSERT_TRUE(store.Save(Checkpoint{}).ok());
  EXPECT_THAT(testing::ListDir(dir_.Join("gpu.dralens.dev")), SizeIs(3));
}

TEST_F(FileCheckpointStoreTest, BootIdChangeDiscards) {
  {
    FileCheckpointStore before(Path(), "old-boot", clock_);
    ASSERT_TRUE(before.Save(Sample()).ok());
  }
  LogCapture logs;
  FileCheckpointStore after(Path(), kBoot, clock_);
  absl::StatusOr<LoadedCheckpoint> loaded = after.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->origin, LoadedCheckpoint::Origin::kDiscardedReboot);
  EXPECT_TRUE(loaded->checkpoint.claims.empty());
  EXPECT_EQ(loaded->checkpoint.node_boot_id, kBoot);
  EXPECT_THAT(loaded->reason, HasSubstr("rebooted"));
  EXPECT_TRUE(logs.Contains("node rebooted; discarding checkpoint"));
  EXPECT_TRUE(logs.Contains("claims_discarded=2"));
}

TEST_F(FileCheckpointStoreTest, SaveStampsTheRunningBootId) {
  FileCheckpointStore store(Path(), kBoot, clock_);
  Checkpoint cp = Sample();
  cp.node_boot_id = "something-else";
  ASSERT_TRUE(store.Save(cp).ok());
  absl::StatusOr<LoadedCheckpoint> loaded = store.Load();
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->origin, LoadedCheckpoint::Origin::kLoaded);
}

TEST(CheckpointFixtureTest, Version1Loads) {
  const std::string fixture =
      std::string(DRALENS_SOURCE_DIR) + "/tests/fixtures/checkpoints/v1.json";
  TempDir dir;
  const std::string path = dir.Join("checkpoint.json");
  Spit(path, Slurp(fixture));
  common::FakeClock clock;
  FileCheckpointStore store(path, "5f0c2a7e-3b1d-4c59-9a0e-6d2f8b7c1e44", clock);
  absl::StatusOr<LoadedCheckpoint> loaded = store.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->origin, LoadedCheckpoint::Origin::kLoaded) << loaded->reason;
  const Checkpoint& cp = loaded->checkpoint;
  ASSERT_THAT(cp.claims, SizeIs(2));
  const CheckpointClaim& done = cp.claims.at("0f6b1c1e-8a52-4d4b-9d39-2b8f3c7a9e01");
  EXPECT_EQ(done.state, ClaimState::kPrepareCompleted);
  EXPECT_EQ(done.namespace_name, "ml");
  EXPECT_EQ(done.name, "train-0");
  ASSERT_THAT(done.devices, SizeIs(1));
  EXPECT_EQ(done.devices[0].device, "gpu-0");
  EXPECT_EQ(done.devices[0].cdi_device_ids[0],
            "k8s.gpu.dralens.dev/claim=0f6b1c1e-8a52-4d4b-9d39-2b8f3c7a9e01-gpu-0");
  const CheckpointClaim& started = cp.claims.at("7c9d2e40-1b6a-4f0e-8e21-5a4b3c2d1f00");
  EXPECT_EQ(started.state, ClaimState::kPrepareStarted);
  EXPECT_EQ(started.devices[0].share_id, "b1e2c3d4-0000-4000-8000-000000000001");
  EXPECT_EQ(started.devices[0].type, model::DeviceType::kMig);
  // Re-encoding the same content reproduces the fixture's checksum.
  nlohmann::json original = nlohmann::json::parse(Slurp(fixture));
  EXPECT_EQ(nlohmann::json::parse(EncodeCheckpoint(cp))["checksum"], original["checksum"]);
}

}  // namespace
}  // namespace dralens::driver::prepare
