#include "src/model/inventory.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

GpuInfo Gpu(uint32_t minor, const std::string& uuid, bool mig = false) {
  const MigBoard* board = FindMigBoard("h100-80gb");
  GpuInfo gpu;
  gpu.minor = minor;
  gpu.index = minor;
  gpu.uuid = uuid;
  gpu.product_name = board->product_name;
  gpu.memory_bytes = board->memory_bytes();
  gpu.mig_capable = true;
  gpu.mig_mode_current = gpu.mig_mode_pending = mig ? MigMode::kEnabled : MigMode::kDisabled;
  gpu.memory_slices = 8;
  gpu.mig_profiles = board->profiles;
  gpu.cuda_compute_major = 9;
  return gpu;
}

MigDevice Mig(const std::string& uuid, const std::string& parent, const char* profile,
              uint32_t start, uint32_t gi) {
  MigDevice mig;
  mig.uuid = uuid;
  mig.parent_uuid = parent;
  mig.profile = *FindMigBoard("h100-80gb")->FindProfile(profile);
  mig.placement = MigPlacement{start, mig.profile.memory_slices};
  mig.gi_id = gi;
  mig.ci_id = 0;
  mig.ci_profile_id = mig.profile.ci_profile_id;
  mig.ci_slices = mig.profile.gpu_slices;
  return mig;
}

TEST(Inventory, EmptyByDefault) {
  Inventory inventory;
  EXPECT_THAT(inventory.gpus(), IsEmpty());
  EXPECT_THAT(inventory.mig_devices(), IsEmpty());
  EXPECT_EQ(inventory.FindGpuByUuid("GPU-x"), nullptr);
  EXPECT_TRUE(Diff(inventory, Inventory()).empty());
}

TEST(Inventory, SortsAndLooksUp) {
  auto inventory = Inventory::Create(
      "550.163.01", "12.4", {Gpu(3, "GPU-b", true), Gpu(1, "GPU-a")},
      {Mig("MIG-2", "GPU-b", "1g.10gb", 6, 13), Mig("MIG-1", "GPU-b", "3g.40gb", 0, 1)});
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  ASSERT_EQ(inventory->gpus().size(), 2u);
  EXPECT_EQ(inventory->gpus()[0].uuid, "GPU-a");
  EXPECT_EQ(inventory->mig_devices()[0].uuid, "MIG-1");
  EXPECT_EQ(inventory->mig_devices()[0].parent_minor, 3u);
  EXPECT_EQ(inventory->FindGpuByMinor(3)->uuid, "GPU-b");
  EXPECT_EQ(inventory->FindMigDeviceByUuid("MIG-2")->gi_id, 13u);
  EXPECT_EQ(inventory->FindMigDevice("GPU-b", 1, 0)->uuid, "MIG-1");
  EXPECT_EQ(inventory->FindMigDevice("GPU-b", 1, 1), nullptr);
  EXPECT_EQ(inventory->MigDevicesOf("GPU-b").size(), 2u);
  EXPECT_THAT(inventory->MigDevicesOf("GPU-a"), IsEmpty());
  EXPECT_EQ(inventory->driver_version(), "550.163.01");
  EXPECT_EQ(inventory->gpus()[1].CudaComputeCapability(), "9.0");

  // 3g at 0 and 1g at 6 leave 2g.20gb only at 4 and 1g.10gb at 4 and 5.
  const std::vector<MigPlaceable> placeable = inventory->PlaceableCountsOf("GPU-b");
  EXPECT_THAT(placeable, ElementsAre(MigPlaceable{"1g.10gb", 2}, MigPlaceable{"2g.20gb", 1},
                                     MigPlaceable{"3g.40gb", 0}, MigPlaceable{"4g.40gb", 0},
                                     MigPlaceable{"7g.80gb", 0}, MigPlaceable{"1g.10gb+me", 1},
                                     MigPlaceable{"1g.20gb", 1}));
  EXPECT_THAT(inventory->PlaceableCountsOf("GPU-nope"), IsEmpty());
}

TEST(Inventory, RejectsInconsistentSnapshots) {
  auto dup_uuid = Inventory::Create("d", "c", {Gpu(0, "GPU-a"), Gpu(1, "GPU-a")}, {});
  EXPECT_THAT(dup_uuid.status().message(), HasSubstr("duplicate GPU UUID GPU-a"));
  auto dup_minor = Inventory::Create("d", "c", {Gpu(0, "GPU-a"), Gpu(0, "GPU-b")}, {});
  EXPECT_THAT(dup_minor.status().message(), HasSubstr("duplicate GPU minor 0"));
  auto orphan = Inventory::Create("d", "c", {Gpu(0, "GPU-a", true)},
                                  {Mig("MIG-1", "GPU-z", "1g.10gb", 0, 7)});
  EXPECT_THAT(orphan.status().message(), HasSubstr("unknown parent GPU GPU-z"));
  auto not_mig =
      Inventory::Create("d", "c", {Gpu(0, "GPU-a")}, {Mig("MIG-1", "GPU-a", "1g.10gb", 0, 7)});
  EXPECT_THAT(not_mig.status().message(), HasSubstr("not in MIG mode"));
  auto overlap = Inventory::Create(
      "d", "c", {Gpu(0, "GPU-a", true)},
      {Mig("MIG-1", "GPU-a", "3g.40gb", 0, 1), Mig("MIG-2", "GPU-a", "1g.10gb", 3, 10)});
  EXPECT_EQ(overlap.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(overlap.status().message(), HasSubstr("overlaps"));
}

TEST(Inventory, DiffByUuid) {
  auto before = Inventory::Create("550.1", "12.4", {Gpu(0, "GPU-a", true), Gpu(1, "GPU-b")},
                                  {Mig("MIG-1", "GPU-a", "3g.40gb", 0, 1)});
  GpuInfo changed = Gpu(1, "GPU-b");
  changed.numa_node = 1;
  auto after = Inventory::Create("550.2", "12.4", {Gpu(0, "GPU-a", true), changed, Gpu(2, "GPU-c")},
                                 {Mig("MIG-2", "GPU-a", "3g.40gb", 4, 2)});
  ASSERT_TRUE(before.ok() && after.ok());
  const InventoryDiff diff = Diff(*before, *after);
  EXPECT_TRUE(diff.driver_changed);
  EXPECT_THAT(diff.added_gpus, ElementsAre("GPU-c"));
  EXPECT_THAT(diff.changed_gpus, ElementsAre("GPU-b"));
  EXPECT_THAT(diff.removed_gpus, IsEmpty());
  EXPECT_THAT(diff.added_mig_devices, ElementsAre("MIG-2"));
  EXPECT_THAT(diff.removed_mig_devices, ElementsAre("MIG-1"));
  EXPECT_EQ(diff.Summary(), "gpus +1 -0 ~1, mig +1 -1 ~0, driver changed");
  EXPECT_FALSE(diff.empty());
  EXPECT_TRUE(Diff(*after, *after).empty());
  EXPECT_EQ(*after, *after);
  EXPECT_FALSE(*before == *after);
}

TEST(MigDevice, ProfileNameWithPartialComputeInstance) {
  MigDevice mig = Mig("MIG-1", "GPU-a", "3g.40gb", 0, 1);
  EXPECT_EQ(mig.ProfileName(), "3g.40gb");
  mig.ci_slices = 1;
  EXPECT_EQ(mig.ProfileName(), "1c.3g.40gb");
}

}  // namespace
}  // namespace dralens::model
