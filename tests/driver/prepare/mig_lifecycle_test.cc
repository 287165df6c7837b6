// The MIG lifecycle per architecture under dynamic MIG: Hopper switches MIG mode on for the
// first instance and off after the last, a full GPU is prepared only outside MIG mode, Ampere
// is never switched, and instances that a GPU reset took are treated as gone (unprepare) or
// created again (re-prepare, restart).
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "driver/discovery/simulated/simulated_device_source.h"
#include "driver/prepare/claim_preparer.h"
#include "driver/slices/slice_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/driver/prepare/prepare_test_util.h"

namespace dralens::driver::prepare {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr char kDriver[] = "gpu.dralens.dev";
constexpr char kNode[] = "node-l";
constexpr char kNs[] = "ml";

// One H100 (Hopper) and two A100s (Ampere), the second already in MIG mode.
constexpr char kMixed[] = R"({"name":"lifecycle","gpus":[
  {"board":"h100-80gb"},
  {"board":"a100-40gb"},
  {"board":"a100-40gb","migEnabled":true}]})";

class MigLifecycleTest : public ::testing::Test {
 protected:
  MigLifecycleTest() : h_(testing::Options(kNode, kMixed, /*dynamic_mig=*/true)) {}

  const model::GpuInfo& Gpu(uint32_t minor) { return *h_.inventory().FindGpuByMinor(minor); }

  std::string Placement(uint32_t minor, const std::string& profile, uint32_t start) {
    const model::GpuInfo& gpu = Gpu(minor);
    const model::MigProfile* p = gpu.FindMigProfile(profile);
    EXPECT_NE(p, nullptr) << profile;
    return p == nullptr ? "" : slices::DynamicMigDeviceName(gpu, *p, start);
  }

  ClaimRef MakeClaim(const std::string& name, const std::string& device) {
    return testing::CreateClaim(h_.client(), kNs, name, "gpu", "gpu.dralens.dev", kDriver, kNode,
                                device);
  }

  model::Inventory Now() {
    auto now = h_.source().Discover();
    EXPECT_TRUE(now.ok()) << now.status();
    return now.ok() ? *now : model::Inventory();
  }
  bool MigOn(uint32_t minor) { return Now().FindGpuByUuid(Gpu(minor).uuid)->mig_enabled(); }
  size_t Instances(uint32_t minor) { return Now().MigDevicesOf(Gpu(minor).uuid).size(); }

  double MigOperations(const std::string& operation, const std::string& result) {
    return h_.Series("dralens_mig_operations_total", {{"operation", operation}, {"result", result}})
        .value_or(0);
  }

  // The names of the devices published for GPU `minor`.
  std::vector<std::string> Published(uint32_t minor) {
    slices::SliceBuilder builder({kNode, "", kDriver}, {.dynamic_mig = true});
    auto built = builder.Build(Now());
    EXPECT_TRUE(built.ok()) << built.status();
    std::vector<std::string> names;
    const std::string prefix = absl::StrCat("gpu-", minor);
    for (const model::ResourceSlice& s :
         built.ok() ? *built : std::vector<model::ResourceSlice>{}) {
      for (const model::SliceDevice& d : s.spec.devices) {
        if (d.name == prefix || absl::StartsWith(d.name, prefix + "-")) {
          names.push_back(d.name);
        }
      }
    }
    return names;
  }

  testing::PrepareHarness h_;
};

TEST_F(MigLifecycleTest, PublishesOnlyWhatEachArchitectureCanPrepare) {
  // Hopper, MIG off: the full GPU and every placement (MIG mode switches at prepare).
  std::vector<std::string> h100 = Published(0);
  EXPECT_THAT(h100, ::testing::Contains("gpu-0"));
  EXPECT_GT(h100.size(), 1u);
  // Ampere, MIG off: the full GPU only; enabling MIG there needs a GPU reset.
  EXPECT_THAT(Published(1), ::testing::ElementsAre("gpu-1"));
  // Ampere, MIG on: placements only, never the full GPU as well.
  std::vector<std::string> a100_mig = Published(2);
  EXPECT_THAT(a100_mig, ::testing::Not(::testing::Contains("gpu-2")));
  EXPECT_GT(a100_mig.size(), 1u);
}

TEST_F(MigLifecycleTest, AnAmpereGpuWithMigOffIsNeitherIndexedNorSwitched) {
  // Its placements are not published, so an allocation naming one is not ours...
  const model::GpuInfo& a100 = Gpu(1);
  const model::MigProfile* p = a100.FindMigProfile("1g.5gb");
  ASSERT_NE(p, nullptr);
  const ClaimRef claim = MakeClaim("stale", slices::DynamicMigDeviceName(a100, *p, 0));
  EXPECT_THAT(h_.PrepareOne(claim).error, HasSubstr("which this node does not have"));
  EXPECT_EQ(h_.source().CallCountForTest(discovery::SimulatedOp::kSetMigMode), 0);
  EXPECT_FALSE(MigOn(1));
  // The full GPU is prepared as usual.
  const ClaimRef whole = MakeClaim("whole", "gpu-1");
  EXPECT_EQ(h_.PrepareOne(whole).error, "");
}

TEST_F(MigLifecycleTest, AnAmpereGpuInMigModeIsUsedAsIsAndLeftOn) {
  const ClaimRef claim = MakeClaim("a100", Placement(2, "3g.20gb", 4));
  ASSERT_EQ(h_.PrepareOne(claim).error, "");
  EXPECT_EQ(Instances(2), 1u);
  ASSERT_EQ(h_.UnprepareOne(claim), "");
  EXPECT_EQ(Instances(2), 0u);
  EXPECT_TRUE(MigOn(2));  // switching it off would need a reset, and the placements need it on
  EXPECT_EQ(h_.source().CallCountForTest(discovery::SimulatedOp::kSetMigMode), 0);
  // The full GPU of an Ampere GPU in MIG mode is refused, not handed out in MIG mode.
  const ClaimRef whole = MakeClaim("whole", "gpu-2");
  EXPECT_THAT(h_.PrepareOne(whole).error, HasSubstr("in MIG mode"));
  EXPECT_EQ(h_.checkpoint().claims.count(whole.uid), 0u);
}

TEST_F(MigLifecycleTest, AHopperGpuGoesFromFullGpuToMigAndBack) {
  // Full GPU with a time slice: MIG mode is off.
  const ClaimRef full = MakeClaim("full", "gpu-0");
  ASSERT_EQ(h_.PrepareOne(full).error, "");
  EXPECT_FALSE(MigOn(0));
  ASSERT_EQ(h_.UnprepareOne(full), "");

  // A MIG claim switches MIG mode on, the last unprepare switches it off again.
  const ClaimRef a = MakeClaim("a", Placement(0, "1g.10gb", 0));
  const ClaimRef b = MakeClaim("b", Placement(0, "2g.20gb", 2));
  ASSERT_EQ(h_.PrepareOne(a).error, "");
  EXPECT_TRUE(MigOn(0));
  ASSERT_EQ(h_.PrepareOne(b).error, "");
  EXPECT_EQ(Instances(0), 2u);
  EXPECT_EQ(MigOperations("enable", "ok"), 1);
  ASSERT_EQ(h_.UnprepareOne(a), "");
  EXPECT_TRUE(MigOn(0));  // b still holds an instance
  ASSERT_EQ(h_.UnprepareOne(b), "");
  EXPECT_FALSE(MigOn(0));
  EXPECT_EQ(MigOperations("disable", "ok"), 1);

  // And the full GPU again.
  const ClaimRef again = MakeClaim("again", "gpu-0");
  ASSERT_EQ(h_.PrepareOne(again).error, "");
  ASSERT_EQ(h_.UnprepareOne(again), "");
}

TEST_F(MigLifecycleTest, AFullGpuLeftInMigModeIsSwitchedOffOnlyWhenNoInstanceIsLeft) {
  ASSERT_TRUE(h_.source().SetMigMode(Gpu(0).uuid, true).ok());
  auto held = h_.source().CreateMigDevice(Gpu(0).uuid, "1g.10gb", 6);
  ASSERT_TRUE(held.ok()) << held.status();
  const ClaimRef full = MakeClaim("full", "gpu-0");
  EXPECT_THAT(h_.PrepareOne(full).error, HasSubstr("in MIG mode with 1 MIG devices"));
  EXPECT_TRUE(MigOn(0));

  ASSERT_TRUE(h_.source().DestroyMigDevice(held->uuid).ok());
  ASSERT_EQ(h_.PrepareOne(full).error, "");
  EXPECT_FALSE(MigOn(0));
}

TEST_F(MigLifecycleTest, UnprepareAfterAGpuResetSucceeds) {
  const ClaimRef claim = MakeClaim("reset", Placement(0, "3g.40gb", 0));
  ASSERT_EQ(h_.PrepareOne(claim).error, "");
  // A GPU reset takes the instance; Hopper's MIG mode stays as set (it was applied at once).
  ASSERT_TRUE(h_.source().InjectGpuReset(Gpu(0).uuid).ok());
  EXPECT_EQ(Instances(0), 0u);
  ASSERT_EQ(h_.UnprepareOne(claim), "");
  EXPECT_TRUE(h_.checkpoint().claims.empty());
  EXPECT_FALSE(std::filesystem::exists(h_.SpecPath(claim.uid)));
  EXPECT_FALSE(MigOn(0));

  // The same with MIG mode off after the reset (NVML then answers NOT_SUPPORTED).
  const ClaimRef off = MakeClaim("off", Placement(0, "1g.10gb", 1));
  ASSERT_EQ(h_.PrepareOne(off).error, "");
  ASSERT_TRUE(h_.source().SetMigMode(Gpu(0).uuid, false).code() != absl::StatusCode::kOk);
  ASSERT_TRUE(h_.source().InjectGpuReset(Gpu(0).uuid).ok());
  ASSERT_TRUE(h_.source().SetMigMode(Gpu(0).uuid, false).ok());
  ASSERT_EQ(h_.UnprepareOne(off), "");
  EXPECT_TRUE(h_.checkpoint().claims.empty());
}

TEST_F(MigLifecycleTest, RePrepareAfterAGpuResetCreatesTheInstanceAgain) {
  const std::string device = Placement(0, "2g.20gb", 4);
  const ClaimRef claim = MakeClaim("again", device);
  ASSERT_EQ(h_.PrepareOne(claim).error, "");
  const std::string before = h_.checkpoint().claims.at(claim.uid).devices.at(0).uuid;
  ASSERT_TRUE(h_.source().InjectGpuReset(Gpu(0).uuid).ok());

  // The kubelet re-sends the claim (its own restart, another pod of the claim).
  PrepareResult again = h_.PrepareOne(claim);
  ASSERT_EQ(again.error, "");
  ASSERT_THAT(again.devices, SizeIs(1));
  EXPECT_EQ(again.devices[0].device_name, device);
  std::vector<const model::MigDevice*> now;
  model::Inventory inventory = Now();
  for (const model::MigDevice* d : inventory.MigDevicesOf(Gpu(0).uuid)) {
    now.push_back(d);
  }
  ASSERT_THAT(now, SizeIs(1));
  EXPECT_EQ(now[0]->placement.start, 4u);
  const Checkpoint checkpoint = h_.checkpoint();
  const CheckpointDevice& recorded = checkpoint.claims.at(claim.uid).devices.at(0);
  EXPECT_EQ(recorded.uuid, now[0]->uuid);
  EXPECT_NE(recorded.uuid, before);
  EXPECT_EQ(h_.Series("dralens_device_state", {{"device", device}, {"state", "prepared"}}), 1);

  // A claim deleted meanwhile cannot be prepared again: it fails, and nothing is left.
  ASSERT_TRUE(h_.source().InjectGpuReset(Gpu(0).uuid).ok());
  ASSERT_TRUE(h_.client().Delete(k8s::kResourceClaims, kNs, claim.name, {}).ok());
  EXPECT_NE(h_.PrepareOne(claim).error, "");
  EXPECT_EQ(h_.checkpoint().claims.count(claim.uid), 0u);
  EXPECT_EQ(Instances(0), 0u);
  EXPECT_EQ(h_.UnprepareOne(claim), "");
}

TEST_F(MigLifecycleTest, ARestartRestoresVanishedInstancesAndTheirSeries) {
  const std::string device = Placement(0, "1g.10gb", 5);
  const ClaimRef claim = MakeClaim("restored", device);
  ASSERT_EQ(h_.PrepareOne(claim).error, "");
  ASSERT_TRUE(h_.source().InjectGpuReset(Gpu(0).uuid).ok());

  h_.Restart();
  auto changed = h_.preparer().ReclaimOrphanMigInstances(Now());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(*changed, 1);
  EXPECT_EQ(Instances(0), 1u);
  EXPECT_EQ(h_.checkpoint().claims.at(claim.uid).state, ClaimState::kPrepareCompleted);
  EXPECT_TRUE(std::filesystem::exists(h_.SpecPath(claim.uid)));
  EXPECT_EQ(h_.Series("dralens_device_state", {{"device", device}, {"state", "prepared"}}), 1);
  EXPECT_EQ(h_.Series("dralens_device_consumers", {{"device", device}}), 1);

  ASSERT_EQ(h_.UnprepareOne(claim), "");
  EXPECT_EQ(Instances(0), 0u);
  EXPECT_FALSE(MigOn(0));
  EXPECT_THAT(h_.checkpoint().claims, IsEmpty());
}

}  // namespace
}  // namespace dralens::driver::prepare
