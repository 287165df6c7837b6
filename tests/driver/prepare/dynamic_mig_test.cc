// Dynamic MIG in the preparer: a claim for a published placement creates the instance on
// prepare and destroys it on unprepare; failures and crashes leave no instance behind.
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "driver/discovery/simulated/simulated_device_source.h"
#include "driver/discovery/simulated/simulated_profile.h"
#include "driver/prepare/claim_preparer.h"
#include "driver/slices/slice_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/telemetry/exemplar.h"
#include "tests/driver/prepare/prepare_test_util.h"

namespace dralens::driver::prepare {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using testing::Slurp;

constexpr char kDriver[] = "gpu.dralens.dev";
constexpr char kNode[] = "node-m";
constexpr char kNs[] = "ml";

class DynamicMigTest : public ::testing::Test {
 protected:
  DynamicMigTest()
      : h_(testing::Options(kNode, "", /*dynamic_mig=*/true)), inventory_(h_.inventory()) {}

  void Restart() { h_.Restart(); }

  // The published name of `profile` at `start` on GPU `minor`.
  std::string Placement(uint32_t minor, const std::string& profile, uint32_t start) {
    const model::GpuInfo& gpu = *inventory_.FindGpuByMinor(minor);
    for (const model::MigProfile& p : gpu.mig_profiles) {
      if (p.name == profile) {
        return slices::DynamicMigDeviceName(gpu, p, start);
      }
    }
    ADD_FAILURE() << "no profile " << profile;
    return "";
  }

  ClaimRef MakeClaim(const std::string& name, const std::string& device) {
    return testing::CreateClaim(h_.client(), kNs, name, "slice", "mig.dralens.dev", kDriver, kNode,
                                device);
  }

  // The MIG instances that exist on GPU `minor` right now.
  std::vector<model::MigDevice> Instances(uint32_t minor) {
    auto now = h_.source().Discover();
    EXPECT_TRUE(now.ok()) << now.status();
    std::vector<model::MigDevice> out;
    for (const model::MigDevice* d : now->MigDevicesOf(inventory_.FindGpuByMinor(minor)->uuid)) {
      out.push_back(*d);
    }
    return out;
  }

  // dralens_mig_operations_total{operation, result}.
  double MigOperations(const std::string& operation, const std::string& result) {
    return h_.Series("dralens_mig_operations_total", {{"operation", operation}, {"result", result}})
        .value_or(0);
  }

  // The value of the `name` series whose labels include `want`, or nullopt when none exists.
  std::optional<double> Gauge(const std::string& name,
                              const std::map<std::string, std::string>& want) {
    return h_.Series(name, want);
  }

  testing::PrepareHarness h_;
  const model::Inventory inventory_;
  discovery::SimulatedDeviceSource* source_ = &h_.source();
};

TEST_F(DynamicMigTest, PrepareCreatesTheInstanceAndUnprepareDestroysIt) {
  const std::string device = Placement(0, "1g.10gb", 3);
  const ClaimRef claim = MakeClaim("small", device);
  auto out = h_.Prepare({claim});
  ASSERT_EQ(out[claim.uid].error, "");
  ASSERT_THAT(out[claim.uid].devices, SizeIs(1));
  EXPECT_EQ(out[claim.uid].devices[0].device_name, device);

  std::vector<model::MigDevice> instances = Instances(0);
  ASSERT_THAT(instances, SizeIs(1));
  EXPECT_EQ(instances[0].profile.name, "1g.10gb");
  EXPECT_EQ(instances[0].placement.start, 3u);

  // The checkpoint knows the instance; the CDI spec carries its capability nodes.
  const Checkpoint checkpoint = h_.checkpoint();
  const CheckpointDevice& recorded = checkpoint.claims.at(claim.uid).devices.at(0);
  ASSERT_TRUE(recorded.dynamic_mig.has_value());
  EXPECT_EQ(recorded.dynamic_mig->gi_id, instances[0].gi_id);
  EXPECT_EQ(recorded.dynamic_mig->ci_id, instances[0].ci_id);
  EXPECT_EQ(recorded.uuid, instances[0].uuid);
  const std::string spec = Slurp(h_.dir().Join("cdi/" + CdiSpecFileName(claim.uid)));
  EXPECT_THAT(spec, HasSubstr("/dev/nvidia-caps/nvidia-cap"));
  EXPECT_THAT(spec, HasSubstr("/dev/nvidia0"));

  // A replay creates nothing new.
  ASSERT_EQ(h_.Prepare({claim})[claim.uid].error, "");
  EXPECT_THAT(Instances(0), SizeIs(1));

  ASSERT_EQ(h_.Unprepare({claim})[claim.uid], "");
  EXPECT_THAT(Instances(0), SizeIs(0));
  EXPECT_TRUE(h_.checkpoint().claims.empty());
  EXPECT_EQ(MigOperations("create", "ok"), 1);
  EXPECT_EQ(MigOperations("destroy", "ok"), 1);
}

TEST_F(DynamicMigTest, MigLayoutMetricsFollowTheInstances) {
  // MIG mode is off until the first claim: nothing to show yet.
  EXPECT_EQ(Gauge("dralens_mig_devices", {{"parent", "gpu-0"}}), std::nullopt);
  EXPECT_EQ(Gauge("dralens_mig_placeable", {{"parent", "gpu-0"}}), std::nullopt);

  const std::string device = Placement(0, "1g.10gb", 3);
  const ClaimRef claim = MakeClaim("small", device);
  ASSERT_EQ(h_.Prepare({claim})[claim.uid].error, "");
  EXPECT_EQ(Gauge("dralens_mig_devices",
                  {{"parent", "gpu-0"}, {"profile", "1g.10gb"}, {"state", "prepared"}}),
            1);
  EXPECT_EQ(Gauge("dralens_device_state", {{"device", device}, {"state", "prepared"}}), 1);
  // Seven 1g.10gb fit on an empty H100; one is taken.
  EXPECT_EQ(Gauge("dralens_mig_placeable", {{"parent", "gpu-0"}, {"profile", "1g.10gb"}}), 6);

  ASSERT_EQ(h_.Unprepare({claim})[claim.uid], "");
  EXPECT_EQ(Gauge("dralens_mig_devices", {{"parent", "gpu-0"}, {"profile", "1g.10gb"}}),
            std::nullopt);
  EXPECT_EQ(Gauge("dralens_device_state", {{"device", device}}), std::nullopt);
  // The last instance gone, the H100 left MIG mode again: nothing placeable to show.
  EXPECT_EQ(Gauge("dralens_mig_placeable", {{"parent", "gpu-0"}, {"profile", "1g.10gb"}}),
            std::nullopt);
}

TEST_F(DynamicMigTest, DisjointPlacementsCoexistAndAFailedCreateLeavesNothing) {
  const ClaimRef a = MakeClaim("a", Placement(1, "3g.40gb", 0));
  const ClaimRef b = MakeClaim("b", Placement(1, "3g.40gb", 4));
  auto out = h_.Prepare({a, b});
  EXPECT_EQ(out[a.uid].error, "");
  EXPECT_EQ(out[b.uid].error, "");
  EXPECT_THAT(Instances(1), SizeIs(2));

  // A placement overlapping a's (the scheduler's counters forbid it; the GPU refuses it too).
  const ClaimRef c = MakeClaim("c", Placement(1, "1g.10gb", 1));
  out = h_.Prepare({c});
  EXPECT_THAT(out[c.uid].error, HasSubstr("create MIG 1g.10gb"));
  EXPECT_EQ(MigOperations("create", "error"), 1);
  EXPECT_THAT(Instances(1), SizeIs(2));
  EXPECT_EQ(h_.checkpoint().claims.count(c.uid), 0u);
  EXPECT_FALSE(std::filesystem::exists(h_.dir().Join("cdi/" + CdiSpecFileName(c.uid))));
}

// A crash between creating the instance and recording its ids leaves PrepareStarted with the
// intent only: the retry destroys whatever sits at that placement, then prepares again.
TEST_F(DynamicMigTest, AStartedClaimsInstanceIsFoundByItsPlacementAndReplaced) {
  const std::string device = Placement(2, "2g.20gb", 2);
  const ClaimRef claim = MakeClaim("crashed", device);
  // What the checkpoint holds after the crash: the intent, no ids.
  Checkpoint cp = h_.checkpoint();
  CheckpointClaim entry;
  entry.state = ClaimState::kPrepareStarted;
  entry.namespace_name = kNs;
  entry.name = "crashed";
  entry.cdi_spec_file = CdiSpecFileName(claim.uid);
  CheckpointDevice d;
  d.request_names = {"slice"};
  d.pool = kNode;
  d.device = device;
  d.type = model::DeviceType::kMig;
  d.dynamic_mig = CheckpointDevice::DynamicMig{.parent_uuid = inventory_.FindGpuByMinor(2)->uuid,
                                               .profile = "2g.20gb",
                                               .placement_start = 2,
                                               .gi_id = std::nullopt,
                                               .ci_id = std::nullopt};
  entry.devices = {d};
  cp.claims[claim.uid] = entry;
  ASSERT_TRUE(h_.store().Save(cp).ok());
  // And the instance the crashed attempt had created (MIG mode on first, as the attempt did).
  ASSERT_TRUE(source_->SetMigMode(d.dynamic_mig->parent_uuid, true).ok());
  auto orphan = source_->CreateMigDevice(d.dynamic_mig->parent_uuid, "2g.20gb", 2);
  ASSERT_TRUE(orphan.ok()) << orphan.status();

  Restart();
  auto out = h_.Prepare({claim});
  ASSERT_EQ(out[claim.uid].error, "");
  std::vector<model::MigDevice> instances = Instances(2);
  ASSERT_THAT(instances, SizeIs(1));
  EXPECT_EQ(instances[0].placement.start, 2u);
  EXPECT_EQ(h_.checkpoint().claims.at(claim.uid).state, ClaimState::kPrepareCompleted);
}

TEST_F(DynamicMigTest, OrphanInstancesAreReclaimedAndOwnedOnesKept) {
  const ClaimRef claim = MakeClaim("kept", Placement(3, "1g.10gb", 0));
  ASSERT_EQ(h_.Prepare({claim})[claim.uid].error, "");
  auto orphan = source_->CreateMigDevice(inventory_.FindGpuByMinor(3)->uuid, "1g.10gb", 5);
  ASSERT_TRUE(orphan.ok()) << orphan.status();
  ASSERT_THAT(Instances(3), SizeIs(2));

  Restart();
  auto discovered = source_->Discover();
  ASSERT_TRUE(discovered.ok());
  auto reclaimed = h_.preparer().ReclaimOrphanMigInstances(*discovered);
  ASSERT_TRUE(reclaimed.ok()) << reclaimed.status();
  EXPECT_EQ(*reclaimed, 1);
  std::vector<model::MigDevice> left = Instances(3);
  ASSERT_THAT(left, SizeIs(1));
  EXPECT_EQ(left[0].placement.start, 0u);
  // The kept claim still unprepares cleanly.
  ASSERT_EQ(h_.Unprepare({claim})[claim.uid], "");
  EXPECT_THAT(Instances(3), SizeIs(0));
}

}  // namespace
}  // namespace dralens::driver::prepare
