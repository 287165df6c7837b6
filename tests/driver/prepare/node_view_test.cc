// The node view: device, MIG and claim series follow the ledger's committed state, carry the
// keys other exporters join on, and a claim restored from the checkpoint after a restart shows
// its series like any other.
#include "driver/prepare/node_view.h"

#include <map>
#include <string>

#include "driver/slices/slice_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status.h"
#include "tests/driver/prepare/prepare_test_util.h"

namespace dralens::driver::prepare {
namespace {

using ::testing::SizeIs;

constexpr char kDriver[] = "gpu.dralens.dev";
constexpr char kNode[] = "node-v";
constexpr char kNs[] = "ml";

// GPU 0 in MIG mode with two 1g.10gb devices; GPUs 1 and 2 whole.
constexpr char kProfile[] = R"({
  "name": "view-test",
  "gpus": [
    {"board": "h100-80gb", "migEnabled": true,
     "migDevices": [{"profile": "1g.10gb", "start": 0}, {"profile": "1g.10gb", "start": 1}]},
    {"board": "h100-80gb", "count": 2}
  ]
})";

class NodeViewTest : public ::testing::Test {
 protected:
  NodeViewTest() : h_(testing::Options(kNode, kProfile)) {}

  ClaimRef MakeClaim(const std::string& name, const std::string& device) {
    return testing::CreateClaim(h_.client(), kNs, name, "gpu", kDriver, kDriver, kNode, device);
  }
  std::map<std::string, std::string> InfoOf(const ClaimRef& ref, const std::string& device) {
    return {{"namespace", kNs},
            {"claim", ref.name},
            {"uid", ref.uid},
            {"device", device},
            {"pool", kNode},
            {"driver", kDriver},
            {"dra_claim_name", ref.name},
            {"dra_claim_namespace", kNs},
            {"dra_driver_name", kDriver},
            {"dra_pool_name", kNode},
            {"dra_device_name", device}};
  }
  const model::MigDevice& Mig(size_t i) { return h_.inventory().mig_devices().at(i); }

  testing::PrepareHarness h_;
};

TEST_F(NodeViewTest, AClaimInfoSeriesCarriesThePreparedClaimAndGoesWithIt) {
  const ClaimRef gpu = MakeClaim("train", "gpu-1");
  const std::string mig_name = slices::MigDeviceName(Mig(1));
  const ClaimRef mig = MakeClaim("slice", mig_name);
  EXPECT_EQ(testing::SeriesCount(h_.registry(), "dralens_node_claim_info"), 0);
  ASSERT_EQ(h_.PrepareOne(gpu).error, "");
  ASSERT_EQ(h_.PrepareOne(mig).error, "");

  // A full GPU: dcgm-exporter's UUID is the GPU's, no GPU instance.
  std::map<std::string, std::string> labels = InfoOf(gpu, "gpu-1");
  labels["UUID"] = h_.inventory().FindGpuByMinor(1)->uuid;
  labels["GPU_I_ID"] = "";
  EXPECT_EQ(h_.Series("dralens_node_claim_info", labels), 1);
  // A MIG device: the parent's UUID and the instance id.
  labels = InfoOf(mig, mig_name);
  labels["UUID"] = Mig(1).parent_uuid;
  labels["GPU_I_ID"] = std::to_string(Mig(1).gi_id);
  EXPECT_EQ(h_.Series("dralens_node_claim_info", labels), 1);
  EXPECT_EQ(testing::SeriesCount(h_.registry(), "dralens_node_claim_info"), 2);

  ASSERT_EQ(h_.UnprepareOne(gpu), "");
  EXPECT_EQ(testing::SeriesCount(h_.registry(), "dralens_node_claim_info", {{"uid", gpu.uid}}), 0);
  EXPECT_EQ(testing::SeriesCount(h_.registry(), "dralens_node_claim_info", {{"uid", mig.uid}}), 1);
  ASSERT_EQ(h_.UnprepareOne(mig), "");
  EXPECT_EQ(testing::SeriesCount(h_.registry(), "dralens_node_claim_info"), 0);
}

TEST_F(NodeViewTest, RestoredClaimsKeepTheirDeviceSeries) {
  const ClaimRef gpu = MakeClaim("train", "gpu-2");
  const std::string mig_name = slices::MigDeviceName(Mig(0));
  const ClaimRef mig = MakeClaim("slice", mig_name);
  ASSERT_EQ(h_.PrepareOne(gpu).error, "");
  ASSERT_EQ(h_.PrepareOne(mig).error, "");

  h_.Restart();  // a new process: new registry, state from the checkpoint only

  EXPECT_EQ(h_.Series("dralens_device_state", {{"device", "gpu-2"}, {"state", "prepared"}}), 1);
  EXPECT_EQ(h_.Series("dralens_device_state", {{"device", "gpu-2"}, {"state", "free"}}), 0);
  EXPECT_EQ(h_.Series("dralens_device_consumers", {{"device", "gpu-2"}}), 1);
  EXPECT_EQ(h_.Series("dralens_device_state", {{"device", mig_name}, {"state", "prepared"}}), 1);
  EXPECT_EQ(h_.Series("dralens_mig_devices",
                      {{"parent", "gpu-0"}, {"profile", "1g.10gb"}, {"state", "prepared"}}),
            1);
  EXPECT_EQ(h_.Series("dralens_mig_devices",
                      {{"parent", "gpu-0"}, {"profile", "1g.10gb"}, {"state", "free"}}),
            1);
  EXPECT_EQ(h_.Series("dralens_node_prepared_claims", {}), 2);
  EXPECT_EQ(h_.Series("dralens_node_prepared_devices", {{"type", "gpu"}}), 1);
  EXPECT_EQ(h_.Series("dralens_node_prepared_devices", {{"type", "mig"}}), 1);
  EXPECT_EQ(h_.Series("dralens_node_claims", {{"state", "prepare_completed"}}), 2);
  EXPECT_EQ(testing::SeriesCount(h_.registry(), "dralens_node_claim_info", {{"uid", gpu.uid}}), 1);
  EXPECT_EQ(testing::SeriesCount(h_.registry(), "dralens_node_claim_info", {{"uid", mig.uid}}), 1);

  // And they go when the restored claims are unprepared.
  ASSERT_EQ(h_.UnprepareOne(gpu), "");
  EXPECT_EQ(h_.Series("dralens_device_state", {{"device", "gpu-2"}, {"state", "free"}}), 1);
  EXPECT_EQ(testing::SeriesCount(h_.registry(), "dralens_node_claim_info", {{"uid", gpu.uid}}), 0);
}

TEST_F(NodeViewTest, ADeviceSharedByTwoClaimsCountsOnce) {
  // Two shares of one GPU (consumable capacity): two claims, one device.
  for (const char* name : {"share-a", "share-b"}) {
    nlohmann::json claim = {{"apiVersion", "resource.k8s.io/v1"},
                            {"kind", "ResourceClaim"},
                            {"metadata", {{"namespace", kNs}, {"name", name}}}};
    claim["spec"]["devices"]["requests"] =
        nlohmann::json::array({{{"name", "gpu"}, {"exactly", {{"deviceClassName", kDriver}}}}});
    auto created = h_.client().Create(k8s::kResourceClaims, kNs, claim);
    ASSERT_TRUE(created.ok());
    nlohmann::json obj = *created;
    obj["status"]["allocation"]["devices"]["results"] =
        nlohmann::json::array({{{"request", "gpu"},
                                {"driver", kDriver},
                                {"pool", kNode},
                                {"device", "gpu-1"},
                                {"shareID", std::string("share-") + name},
                                {"consumedCapacity", {{"memory", "10Gi"}}}}});
    ASSERT_TRUE(h_.client().Update(k8s::kResourceClaims, kNs, obj, "status").ok());
    ClaimRef ref{kNs, obj["metadata"]["uid"].get<std::string>(), name};
    ASSERT_EQ(h_.PrepareOne(ref).error, "");
  }
  EXPECT_EQ(h_.Series("dralens_node_prepared_claims", {}), 2);
  EXPECT_EQ(h_.Series("dralens_node_prepared_devices", {{"type", "gpu"}}), 1);
  EXPECT_EQ(h_.Series("dralens_device_consumers", {{"device", "gpu-1"}}), 2);
  EXPECT_EQ(testing::SeriesCount(h_.registry(), "dralens_node_claim_info", {{"device", "gpu-1"}}),
            2);
}

// The inventory of kProfile, as the simulated source discovers it.
absl::StatusOr<model::Inventory> Discover() {
  ASSIGN_OR_RETURN(discovery::SimulatedProfile profile,
                   discovery::ParseSimulatedProfileJson(kProfile));
  ASSIGN_OR_RETURN(auto source, discovery::SimulatedDeviceSource::Create(profile, kNode));
  return source->Discover();
}

TEST(PreparedClaimsOfTest, OnlyCompletedClaimsWithTheirDcgmKeys) {
  absl::StatusOr<model::Inventory> inventory = Discover();
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  const model::MigDevice& mig = inventory->mig_devices().at(0);

  Checkpoint cp;
  CheckpointClaim done;
  done.state = ClaimState::kPrepareCompleted;
  done.namespace_name = kNs;
  done.name = "done";
  CheckpointDevice whole{.request_names = {"gpu"},
                         .pool = kNode,
                         .device = "gpu-1",
                         .cdi_device_ids = {},
                         .share_id = std::nullopt,
                         .type = model::DeviceType::kGpu,
                         .uuid = "GPU-whole"};
  CheckpointDevice fixed = whole;
  fixed.device = slices::MigDeviceName(mig);
  fixed.type = model::DeviceType::kMig;
  fixed.uuid = mig.uuid;
  CheckpointDevice dynamic = fixed;
  dynamic.device = "gpu-2-mig-2g20gb-14-2";
  dynamic.uuid = "MIG-dynamic";
  dynamic.dynamic_mig = CheckpointDevice::DynamicMig{.parent_uuid = "GPU-parent",
                                                     .profile = "2g.20gb",
                                                     .placement_start = 2,
                                                     .gi_id = 5,
                                                     .ci_id = 0};
  done.devices = {whole, fixed, dynamic};
  cp.claims["uid-done"] = done;
  CheckpointClaim started = done;
  started.state = ClaimState::kPrepareStarted;
  cp.claims["uid-started"] = started;

  std::vector<model::PreparedClaim> claims = PreparedClaimsOf(cp, *inventory);
  ASSERT_THAT(claims, SizeIs(1));
  EXPECT_EQ(claims[0].uid, "uid-done");
  ASSERT_THAT(claims[0].devices, SizeIs(3));
  EXPECT_EQ(claims[0].devices[0].gpu_uuid, "GPU-whole");
  EXPECT_EQ(claims[0].devices[0].gpu_instance_id, std::nullopt);
  EXPECT_EQ(claims[0].devices[1].gpu_uuid, mig.parent_uuid);
  EXPECT_EQ(claims[0].devices[1].gpu_instance_id, mig.gi_id);
  EXPECT_EQ(claims[0].devices[2].gpu_uuid, "GPU-parent");
  EXPECT_EQ(claims[0].devices[2].gpu_instance_id, 5u);
}

// What a claim holds of its GPU, counted as the cluster role counts GPU-equivalents.
TEST(GpuFractionTest, WholeSharedStaticAndDynamicParts) {
  absl::StatusOr<model::Inventory> inventory = Discover();
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  const model::GpuInfo* whole_gpu = nullptr;
  for (const model::GpuInfo& gpu : inventory->gpus()) {
    if (!gpu.mig_enabled()) {
      whole_gpu = &gpu;
    }
  }
  ASSERT_NE(whole_gpu, nullptr);
  const model::MigDevice& mig = inventory->mig_devices().at(0);

  CheckpointDevice whole;
  whole.type = model::DeviceType::kGpu;
  whole.uuid = whole_gpu->uuid;
  EXPECT_EQ(GpuFraction(whole, *inventory), 1);
  // A consumable share: its memory over the GPU's.
  CheckpointDevice share = whole;
  share.sharing = CheckpointDevice::Sharing{};
  share.sharing->consumed_memory =
      common::Quantity::FromInt64(static_cast<int64_t>(whole_gpu->memory_bytes / 4));
  EXPECT_DOUBLE_EQ(GpuFraction(share, *inventory), 0.25);
  // Two 1g.10gb instances are published on the MIG GPU: each is half of what it is cut into.
  CheckpointDevice fixed;
  fixed.type = model::DeviceType::kMig;
  fixed.uuid = mig.uuid;
  EXPECT_DOUBLE_EQ(GpuFraction(fixed, *inventory), 0.5);
  // A dynamic placement: its memory slices over the GPU's eight.
  CheckpointDevice dynamic = fixed;
  dynamic.uuid = "";
  dynamic.dynamic_mig = CheckpointDevice::DynamicMig{.parent_uuid = mig.parent_uuid,
                                                     .profile = "3g.40gb",
                                                     .placement_start = 4,
                                                     .gi_id = std::nullopt,
                                                     .ci_id = std::nullopt};
  EXPECT_DOUBLE_EQ(GpuFraction(dynamic, *inventory), 4.0 / 8);
  // Unknown devices hold nothing that can be priced.
  fixed.uuid = "MIG-gone";
  EXPECT_EQ(GpuFraction(fixed, *inventory), 0);
  share.uuid = "GPU-gone";
  EXPECT_EQ(GpuFraction(share, *inventory), 0);
}

}  // namespace
}  // namespace dralens::driver::prepare
