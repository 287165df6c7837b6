// The pure planner: which allocation results are ours, what each device becomes in the answer,
// the checkpoint and the CDI spec, and every way a claim is refused.
#include "driver/prepare/claim_plan.h"

#include <string>

#include "driver/discovery/simulated/simulated_device_source.h"
#include "driver/discovery/simulated/simulated_profile.h"
#include "driver/prepare/failure_reason.h"
#include "driver/slices/slice_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::driver::prepare {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr char kDriver[] = "gpu.dralens.dev";
constexpr char kPool[] = "node-p";

// GPU 0 in MIG mode with a 1g.10gb device; GPU 1 whole.
constexpr char kProfile[] = R"({
  "name": "plan-test",
  "gpus": [
    {"board": "h100-80gb", "migEnabled": true, "migDevices": [{"profile": "1g.10gb", "start": 0}]},
    {"board": "h100-80gb"}
  ]
})";

model::Inventory Inventory() {
  auto profile = discovery::ParseSimulatedProfileJson(kProfile);
  EXPECT_TRUE(profile.ok()) << profile.status();
  auto source = discovery::SimulatedDeviceSource::Create(*profile, kPool);
  EXPECT_TRUE(source.ok()) << source.status();
  auto inventory = (*source)->Discover();
  EXPECT_TRUE(inventory.ok()) << inventory.status();
  return *inventory;
}

model::DeviceRequestAllocationResult Result(const std::string& request, const std::string& device,
                                            const std::string& driver = kDriver,
                                            const std::string& pool = kPool) {
  model::DeviceRequestAllocationResult r;
  r.request = request;
  r.driver = driver;
  r.pool = pool;
  r.device = device;
  return r;
}

model::ResourceClaim Claim(std::vector<model::DeviceRequestAllocationResult> results,
                           bool allocated = true) {
  model::ResourceClaim claim;
  claim.metadata.namespace_name = "ml";
  claim.metadata.name = "train";
  claim.metadata.uid = "0f6b1c1e-8a52-4d4b-9d39-2b8f3c7a9e01";
  if (allocated) {
    claim.status.allocation.emplace();
    claim.status.allocation->devices.results = std::move(results);
  }
  return claim;
}

TEST(IndexDevicesTest, NamesAsTheSlicesPublishThem) {
  const model::Inventory inventory = Inventory();
  std::map<std::string, OwnedDevice> devices = IndexDevices(inventory);
  const model::MigDevice& mig = inventory.mig_devices().at(0);
  const std::string mig_name = slices::MigDeviceName(mig);
  ASSERT_EQ(devices.count("gpu-1"), 1u);
  ASSERT_EQ(devices.count(mig_name), 1u);
  EXPECT_EQ(devices.at("gpu-1").type, model::DeviceType::kGpu);
  EXPECT_EQ(devices.at("gpu-1").uuid, inventory.FindGpuByMinor(1)->uuid);
  EXPECT_EQ(devices.at(mig_name).type, model::DeviceType::kMig);
  EXPECT_EQ(devices.at(mig_name).mig_profile, "1g.10gb");
  EXPECT_EQ(devices.at(mig_name).gpu_minor, 0u);
  ASSERT_TRUE(devices.at(mig_name).mig.has_value());
  EXPECT_EQ(devices.at(mig_name).mig->gi_id, mig.gi_id);
  // Without dynamic MIG no placement is a device; with it, GPU 1 offers every profile x
  // placement (GPU 0 too: MIG-capable).
  for (const auto& [name, d] : devices) {
    EXPECT_FALSE(d.dynamic.has_value()) << name;
  }
  std::map<std::string, OwnedDevice> dynamic = IndexDevices(inventory, /*dynamic_mig=*/true);
  int placements = 0;
  for (const auto& [name, d] : dynamic) {
    if (d.dynamic.has_value()) {
      ++placements;
      EXPECT_EQ(d.type, model::DeviceType::kMig) << name;
      EXPECT_TRUE(d.uuid.empty()) << name;  // created on prepare
    }
  }
  EXPECT_GT(placements, 0);
}

TEST(StripSubRequestTest, OnlyTheParentRequest) {
  EXPECT_EQ(StripSubRequest("gpu/big"), "gpu");
  EXPECT_EQ(StripSubRequest("gpu"), "gpu");
}

TEST(PlanClaimTest, OurResultsBecomeDevicesAndASpec) {
  const model::Inventory inventory = Inventory();
  const std::string mig_name = slices::MigDeviceName(inventory.mig_devices().at(0));
  model::ResourceClaim claim =
      Claim({Result("gpu/big", "gpu-1"), Result("nic", "eth0", "net.example.com"),
             Result("small", mig_name)});
  common::Quantity ten = *common::Quantity::Parse("10Gi");
  claim.status.allocation->devices.results[0].consumed_capacity["memory"] = ten;
  claim.status.allocation->devices.results[0].share_id = "share-1";
  absl::StatusOr<ClaimPlan> plan = PlanClaim(claim, kDriver, kPool, IndexDevices(inventory), {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_THAT(plan->devices, SizeIs(2));  // the other driver's result is skipped
  const CheckpointDevice& gpu = plan->devices[0];
  EXPECT_THAT(gpu.request_names, ElementsAre("gpu"));
  EXPECT_EQ(gpu.device, "gpu-1");
  EXPECT_EQ(gpu.type, model::DeviceType::kGpu);
  EXPECT_EQ(gpu.share_id, "share-1");
  EXPECT_THAT(gpu.cdi_device_ids,
              ElementsAre("k8s.gpu.dralens.dev/claim=0f6b1c1e-8a52-4d4b-9d39-2b8f3c7a9e01-gpu-1"));
  EXPECT_EQ(plan->devices[1].type, model::DeviceType::kMig);
  EXPECT_THAT(plan->requests, ElementsAre("gpu/big", "small"));
  EXPECT_EQ(plan->consumed_memory[0], ten);
  EXPECT_EQ(plan->consumed_memory[1], std::nullopt);
  ASSERT_TRUE(plan->cdi_spec.has_value());
  EXPECT_THAT(plan->cdi_spec->devices, SizeIs(2));
  EXPECT_THAT(plan->cdi_inputs, SizeIs(2));
}

TEST(RequestClassTest, TheClassOfTheRequestOrSubrequest) {
  model::ResourceClaim claim = Claim({});
  model::DeviceRequest exact;
  exact.name = "small";
  exact.exactly.emplace();
  exact.exactly->device_class_name = "mig.dralens.dev";
  model::DeviceRequest first;
  first.name = "gpu";
  for (const char* sub : {"big", "any"}) {
    model::DeviceSubRequest r;
    r.name = sub;
    r.device_class_name = std::string(sub) == "big" ? "h100" : "gpu";
    first.first_available.push_back(r);
  }
  claim.spec.devices.requests = {exact, first};
  EXPECT_EQ(RequestClass(claim, "small"), "mig.dralens.dev");
  EXPECT_EQ(RequestClass(claim, "gpu/any"), "gpu");
  EXPECT_EQ(RequestClass(claim, "gpu/big"), "h100");
  EXPECT_EQ(RequestClass(claim, "gpu/gone"), "");
  EXPECT_EQ(RequestClass(claim, "gpu"), "");
  EXPECT_EQ(RequestClass(claim, "nic"), "");

  // The plan keeps it with each device.
  const model::Inventory inventory = Inventory();
  claim.status.allocation.emplace();
  claim.status.allocation->devices.results = {
      Result("gpu/any", "gpu-1"),
      Result("small", slices::MigDeviceName(inventory.mig_devices()[0]))};
  absl::StatusOr<ClaimPlan> plan = PlanClaim(claim, kDriver, kPool, IndexDevices(inventory), {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_THAT(plan->devices, SizeIs(2));
  EXPECT_EQ(plan->devices[0].device_class, "gpu");
  EXPECT_EQ(plan->devices[1].device_class, "mig.dralens.dev");
}

TEST(PlanClaimTest, ADynamicMigClaimGetsItsSpecOnceTheInstanceExists) {
  const model::Inventory inventory = Inventory();
  std::map<std::string, OwnedDevice> devices = IndexDevices(inventory, /*dynamic_mig=*/true);
  std::string placement;
  for (const auto& [name, d] : devices) {
    if (d.dynamic.has_value() && d.dynamic->parent_uuid == inventory.FindGpuByMinor(1)->uuid) {
      placement = name;
      break;
    }
  }
  ASSERT_FALSE(placement.empty());
  absl::StatusOr<ClaimPlan> plan =
      PlanClaim(Claim({Result("slice", placement)}), kDriver, kPool, devices, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_THAT(plan->devices, SizeIs(1));
  ASSERT_TRUE(plan->devices[0].dynamic_mig.has_value());
  EXPECT_EQ(plan->devices[0].dynamic_mig->parent_uuid, inventory.FindGpuByMinor(1)->uuid);
  EXPECT_EQ(plan->devices[0].dynamic_mig->gi_id, std::nullopt);
  EXPECT_FALSE(plan->cdi_spec.has_value());
  EXPECT_THAT(plan->cdi_inputs, SizeIs(1));
}

TEST(PlanClaimTest, EveryRefusalNamesTheClaimAndCarriesItsReason) {
  const model::Inventory inventory = Inventory();
  const std::map<std::string, OwnedDevice> devices = IndexDevices(inventory);
  struct Case {
    model::ResourceClaim claim;
    FailureReason reason;
    std::string error;
  };
  for (const Case& c : {
           Case{Claim({}, /*allocated=*/false), FailureReason::kNotAllocated,
                "claim ml/train is not allocated"},
           Case{Claim({Result("gpu", "gpu-1", kDriver, "node-q")}), FailureReason::kForeignDevice,
                "this node serves pool \"node-p\""},
           Case{Claim({Result("gpu", "gpu-9")}), FailureReason::kForeignDevice,
                "which this node does not have"},
       }) {
    absl::StatusOr<ClaimPlan> plan = PlanClaim(c.claim, kDriver, kPool, devices, {});
    ASSERT_FALSE(plan.ok()) << c.error;
    EXPECT_EQ(ReasonOf(plan.status()), c.reason) << c.error;
    EXPECT_THAT(std::string(plan.status().message()), HasSubstr(c.error));
    EXPECT_THAT(std::string(plan.status().message()), HasSubstr("ml/train"));
  }
}

TEST(PlanClaimTest, AClaimWithNothingOfOursPlansNothing) {
  absl::StatusOr<ClaimPlan> plan = PlanClaim(Claim({Result("nic", "eth0", "net.example.com")}),
                                             kDriver, kPool, IndexDevices(Inventory()), {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->devices.empty());
  EXPECT_FALSE(plan->cdi_spec.has_value());
}

}  // namespace
}  // namespace dralens::driver::prepare
