#include "driver/discovery/simulated/simulated_device_source.h"

#include <regex>
#include <set>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::driver::discovery {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<SimulatedDeviceSource> Make(const char* profile, const char* node = "node-a") {
  auto spec = BuiltinSimulatedProfile(profile);
  EXPECT_TRUE(spec.ok());
  auto source = SimulatedDeviceSource::Create(*spec, node);
  EXPECT_TRUE(source.ok()) << source.status();
  return std::move(*source);
}

model::Inventory MustDiscover(DeviceSource& source) {
  auto inventory = source.Discover();
  EXPECT_TRUE(inventory.ok()) << inventory.status();
  return inventory.ok() ? *inventory : model::Inventory();
}

bool IsUuid(const std::string& value, const char* prefix) {
  return std::regex_match(
      value, std::regex(std::string(prefix) + "-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                                              "[0-9a-f]{12}"));
}

TEST(SimulatedDeviceSource, DgxH100Inventory) {
  auto source = Make("dgx-h100");
  const model::Inventory inventory = MustDiscover(*source);
  ASSERT_EQ(inventory.gpus().size(), 8u);
  EXPECT_TRUE(inventory.mig_devices().empty());
  EXPECT_EQ(inventory.driver_version(), "550.163.01");
  EXPECT_EQ(inventory.cuda_driver_version(), "12.4");
  std::set<std::string> uuids;
  std::set<std::string> buses;
  for (uint32_t i = 0; i < 8; ++i) {
    const model::GpuInfo& gpu = inventory.gpus()[i];
    EXPECT_EQ(gpu.minor, i);
    EXPECT_EQ(gpu.index, i);
    EXPECT_EQ(gpu.product_name, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(gpu.brand, "Nvidia");
    EXPECT_EQ(gpu.architecture, "Hopper");
    EXPECT_EQ(gpu.CudaComputeCapability(), "9.0");
    EXPECT_EQ(gpu.memory_bytes, 81559ULL << 20);
    EXPECT_TRUE(gpu.mig_capable);
    EXPECT_FALSE(gpu.mig_enabled());
    EXPECT_EQ(gpu.memory_slices, 8u);
    EXPECT_EQ(gpu.mig_profiles.size(), 7u);
    EXPECT_EQ(gpu.numa_node, i < 4 ? 0 : 1);
    EXPECT_TRUE(std::regex_match(gpu.pci_bus_id, std::regex("0000:[0-9a-f]{2}:00\\.0")))
        << gpu.pci_bus_id;
    EXPECT_TRUE(std::regex_match(gpu.pcie_root, std::regex("pci0000:[0-9a-f]{2}")));
    EXPECT_EQ(gpu.driver_version, "550.163.01");
    EXPECT_TRUE(IsUuid(gpu.uuid, "GPU")) << gpu.uuid;
    uuids.insert(gpu.uuid);
    buses.insert(gpu.pci_bus_id);
  }
  EXPECT_EQ(uuids.size(), 8u);
  EXPECT_EQ(buses.size(), 8u);
}

TEST(SimulatedDeviceSource, A100Inventory) {
  auto source = Make("a100-40gb");
  const model::Inventory inventory = MustDiscover(*source);
  ASSERT_EQ(inventory.gpus().size(), 8u);
  const model::GpuInfo& gpu = inventory.gpus()[0];
  EXPECT_EQ(gpu.product_name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(gpu.architecture, "Ampere");
  EXPECT_EQ(gpu.CudaComputeCapability(), "8.0");
  EXPECT_EQ(gpu.memory_bytes, 40960ULL << 20);
  ASSERT_NE(gpu.FindMigProfile("1g.5gb"), nullptr);
  EXPECT_EQ(gpu.FindMigProfile("1g.5gb")->memory_mib, 4864u);
  EXPECT_NE(gpu.FindMigProfile("7g.40gb"), nullptr);
}

TEST(SimulatedDeviceSource, MixedInventory) {
  auto source = Make("mixed");
  const model::Inventory inventory = MustDiscover(*source);
  ASSERT_EQ(inventory.gpus().size(), 8u);
  EXPECT_EQ(inventory.mig_devices().size(), 3u + 7u + 2u);
  EXPECT_TRUE(inventory.gpus()[0].mig_enabled());
  EXPECT_TRUE(inventory.gpus()[2].mig_enabled());
  EXPECT_FALSE(inventory.gpus()[4].mig_enabled());

  const auto gpu0 = inventory.MigDevicesOf(inventory.gpus()[0].uuid);
  ASSERT_EQ(gpu0.size(), 3u);
  EXPECT_EQ(gpu0[0]->profile.name, "3g.40gb");
  EXPECT_EQ(gpu0[0]->placement, (model::MigPlacement{0, 4}));
  EXPECT_EQ(gpu0[0]->gi_id, 1u);  // half-size class at start 0
  EXPECT_EQ(gpu0[1]->profile.name, "2g.20gb");
  EXPECT_EQ(gpu0[1]->gi_id, 5u);  // quarter class: 3 + 4/2
  EXPECT_EQ(gpu0[2]->profile.name, "1g.10gb");
  EXPECT_EQ(gpu0[2]->gi_id, 13u);  // eighth class: 7 + 6
  for (const model::MigDevice* mig : gpu0) {
    EXPECT_EQ(mig->ci_id, 0u);
    EXPECT_EQ(mig->parent_minor, 0u);
    EXPECT_EQ(mig->ProfileName(), mig->profile.name);
    EXPECT_TRUE(IsUuid(mig->uuid, "MIG")) << mig->uuid;
  }
  EXPECT_EQ(inventory.MigDevicesOf(inventory.gpus()[1].uuid).size(), 7u);
  EXPECT_TRUE(inventory.MigDevicesOf(inventory.gpus()[2].uuid).empty());
  for (const model::MigPlaceable& p : inventory.PlaceableCountsOf(inventory.gpus()[0].uuid)) {
    EXPECT_EQ(p.count, 0u) << p.profile;  // 3g + 2g + 1g fill slices 0-6 and 7 is unusable
  }
  // GPU 3 holds 1g.20gb at 0 and 2: 3g.40gb fits once more (at 4).
  for (const model::MigPlaceable& p : inventory.PlaceableCountsOf(inventory.gpus()[3].uuid)) {
    if (p.profile == "3g.40gb") {
      EXPECT_EQ(p.count, 1u);
    }
    if (p.profile == "1g.20gb") {
      EXPECT_EQ(p.count, 2u);
    }
  }
}

TEST(SimulatedDeviceSource, DeterministicUuids) {
  auto a = Make("mixed", "node-a");
  auto b = Make("mixed", "node-a");
  auto c = Make("mixed", "node-b");
  const model::Inventory ia = MustDiscover(*a);
  const model::Inventory ib = MustDiscover(*b);
  const model::Inventory ic = MustDiscover(*c);
  EXPECT_EQ(ia, ib);
  EXPECT_NE(ia.gpus()[0].uuid, ic.gpus()[0].uuid);
  EXPECT_NE(ia.mig_devices()[0].uuid, ic.mig_devices()[0].uuid);
  EXPECT_EQ(DeterministicUuid("GPU", "x"), DeterministicUuid("GPU", "x"));
  EXPECT_NE(DeterministicUuid("GPU", "x"), DeterministicUuid("GPU", "y"));
  EXPECT_TRUE(IsUuid(DeterministicUuid("MIG", "seed"), "MIG"));

  // Same calls, same UUIDs; a re-created device gets a new one.
  const std::string gpu = ia.gpus()[2].uuid;
  auto first_a = a->CreateMigDevice(gpu, "1g.10gb", 0);
  auto first_b = b->CreateMigDevice(gpu, "1g.10gb", 0);
  ASSERT_TRUE(first_a.ok() && first_b.ok());
  EXPECT_EQ(first_a->uuid, first_b->uuid);
  ASSERT_TRUE(a->DestroyMigDevice(first_a->uuid).ok());
  auto again = a->CreateMigDevice(gpu, "1g.10gb", 0);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->uuid, first_a->uuid);
}

TEST(SimulatedDeviceSource, CreateAndDestroyFollowNvmlSemantics) {
  auto source = Make("mixed");
  const model::Inventory before = MustDiscover(*source);
  const std::string empty_mig = before.gpus()[2].uuid;
  const std::string full_gpu = before.gpus()[4].uuid;

  // MIG mode disabled: NVML_ERROR_NOT_SUPPORTED.
  auto no_mig = source->CreateMigDevice(full_gpu, "1g.10gb", 0);
  EXPECT_EQ(no_mig.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(no_mig.status().message(), HasSubstr("NVML_ERROR_NOT_SUPPORTED"));

  // Invalid placement: NVML_ERROR_INVALID_ARGUMENT.
  auto bad_start = source->CreateMigDevice(empty_mig, "2g.20gb", 6);
  EXPECT_EQ(bad_start.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_start.status().message(), HasSubstr("NVML_ERROR_INVALID_ARGUMENT"));

  auto three = source->CreateMigDevice(empty_mig, "3g.40gb", 4);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->gi_id, 2u);
  EXPECT_EQ(three->placement, (model::MigPlacement{4, 4}));
  EXPECT_EQ(three->parent_uuid, empty_mig);
  EXPECT_EQ(three->parent_minor, 2u);

  // Overlap: NVML_ERROR_INSUFFICIENT_RESOURCES.
  auto overlap = source->CreateMigDevice(empty_mig, "1g.10gb", 5);
  EXPECT_EQ(overlap.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(overlap.status().message(), HasSubstr("NVML_ERROR_INSUFFICIENT_RESOURCES"));

  // Profile limit: 1g.10gb+me allows one instance.
  ASSERT_TRUE(source->CreateMigDevice(empty_mig, "1g.10gb+me", 0).ok());
  auto second_me = source->CreateMigDevice(empty_mig, "1g.10gb+me", 1);
  EXPECT_THAT(second_me.status().message(), HasSubstr("NVML_ERROR_INSUFFICIENT_RESOURCES"));

  // Unknown GPU / profile.
  EXPECT_EQ(source->CreateMigDevice("GPU-nope", "1g.10gb", 0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(source->CreateMigDevice(empty_mig, "1g.5gb", 0).status().code(),
            absl::StatusCode::kNotFound);

  const model::Inventory after = MustDiscover(*source);
  const model::InventoryDiff diff = model::Diff(before, after);
  EXPECT_EQ(diff.added_mig_devices.size(), 2u);
  EXPECT_TRUE(diff.removed_mig_devices.empty());
  ASSERT_NE(after.FindMigDeviceByUuid(three->uuid), nullptr);

  // Destroy: by UUID, then unknown ones are NotFound.
  ASSERT_TRUE(source->DestroyMigDevice(three->uuid).ok());
  const absl::Status gone = source->DestroyMigDevice(three->uuid);
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.message(), HasSubstr("NVML_ERROR_NOT_FOUND"));
  EXPECT_EQ(source->DestroyMigInstance(empty_mig, 2, 0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(source->DestroyMigInstance(full_gpu, 1, 0).code(), absl::StatusCode::kUnimplemented);
  // The freed slices are usable again.
  EXPECT_TRUE(source->CreateMigDevice(empty_mig, "3g.40gb", 4).ok());

  // By (GPU, GI, CI) on a pre-created device.
  const model::MigDevice& pre = *after.MigDevicesOf(after.gpus()[0].uuid)[0];
  ASSERT_TRUE(source->DestroyMigInstance(pre.parent_uuid, pre.gi_id, pre.ci_id).ok());
  EXPECT_EQ(MustDiscover(*source).FindMigDeviceByUuid(pre.uuid), nullptr);
}

TEST(SimulatedDeviceSource, MigModeToggle) {
  auto source = Make("mixed");
  const model::Inventory inventory = MustDiscover(*source);
  const std::string busy = inventory.gpus()[0].uuid;
  const std::string full = inventory.gpus()[4].uuid;
  const absl::Status in_use = source->SetMigMode(busy, false);
  EXPECT_EQ(in_use.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(in_use.message(), HasSubstr("NVML_ERROR_IN_USE"));
  EXPECT_EQ(*source->GetMigMode(full),
            (MigModeState{model::MigMode::kDisabled, model::MigMode::kDisabled}));
  ASSERT_TRUE(source->SetMigMode(full, true).ok());  // Hopper: immediate
  EXPECT_TRUE(MustDiscover(*source).FindGpuByUuid(full)->mig_enabled());
  EXPECT_EQ(*source->GetMigMode(full),
            (MigModeState{model::MigMode::kEnabled, model::MigMode::kEnabled}));
  EXPECT_TRUE(source->CreateMigDevice(full, "7g.80gb", 0).ok());

  auto a100 = Make("a100-40gb");
  const std::string gpu = MustDiscover(*a100).gpus()[0].uuid;
  ASSERT_TRUE(a100->SetMigMode(gpu, true).ok());  // Ampere: pending until a reset
  const model::Inventory inventory_after = MustDiscover(*a100);
  const model::GpuInfo* after = inventory_after.FindGpuByUuid(gpu);
  EXPECT_FALSE(after->mig_enabled());
  EXPECT_EQ(after->mig_mode_pending, model::MigMode::kEnabled);
  EXPECT_EQ(*a100->GetMigMode(gpu),
            (MigModeState{model::MigMode::kDisabled, model::MigMode::kEnabled}));
  EXPECT_EQ(a100->GetMigMode("GPU-nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(SimulatedDeviceSource, AGpuResetTakesTheInstancesAndAppliesThePendingMode) {
  // Hopper: the instances go, MIG mode stays as it was applied.
  auto h100 = Make("dgx-h100");
  const std::string gpu = MustDiscover(*h100).gpus()[0].uuid;
  ASSERT_TRUE(h100->SetMigMode(gpu, true).ok());
  auto created = h100->CreateMigDevice(gpu, "3g.40gb", 0);
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(h100->SetTimeSlice(MustDiscover(*h100).gpus()[1].uuid, TimeSlice::kLong).ok());
  ASSERT_TRUE(h100->InjectGpuReset(gpu).ok());
  EXPECT_TRUE(MustDiscover(*h100).mig_devices().empty());
  EXPECT_TRUE(MustDiscover(*h100).FindGpuByUuid(gpu)->mig_enabled());
  // Destroying the vanished instance answers as NVML does: not found.
  EXPECT_EQ(h100->DestroyMigInstance(gpu, created->gi_id, created->ci_id).code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(h100->SetMigMode(gpu, false).ok());
  // MIG mode off: NOT_SUPPORTED.
  EXPECT_EQ(h100->DestroyMigInstance(gpu, created->gi_id, created->ci_id).code(),
            absl::StatusCode::kUnimplemented);

  // Ampere: the pending mode takes effect at the reset, and only then.
  auto a100 = Make("a100-40gb");
  const std::string amp = MustDiscover(*a100).gpus()[0].uuid;
  ASSERT_TRUE(a100->SetMigMode(amp, true).ok());
  EXPECT_EQ(a100->CreateMigDevice(amp, "1g.5gb", 0).status().code(),
            absl::StatusCode::kUnimplemented);
  ASSERT_TRUE(a100->InjectGpuReset(amp).ok());
  EXPECT_TRUE(MustDiscover(*a100).FindGpuByUuid(amp)->mig_enabled());
  EXPECT_TRUE(a100->CreateMigDevice(amp, "1g.5gb", 0).ok());
  EXPECT_EQ(a100->InjectGpuReset("GPU-nope").code(), absl::StatusCode::kNotFound);
}

TEST(SimulatedDeviceSource, TimeSliceNeedsMigModeOff) {
  auto source = Make("dgx-h100");
  const std::string gpu = MustDiscover(*source).gpus()[2].uuid;
  ASSERT_TRUE(source->SetMigMode(gpu, true).ok());
  const absl::Status refused = source->SetTimeSlice(gpu, TimeSlice::kShort);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(refused.message(), HasSubstr("MIG mode"));
  ASSERT_TRUE(source->SetMigMode(gpu, false).ok());
  EXPECT_TRUE(source->SetTimeSlice(gpu, TimeSlice::kShort).ok());
}

TEST(SimulatedDeviceSource, TimeSlice) {
  auto source = Make("dgx-h100");
  const std::string gpu = MustDiscover(*source).gpus()[3].uuid;
  EXPECT_EQ(source->TimeSliceForTest(gpu), TimeSlice::kDefault);
  ASSERT_TRUE(source->SetTimeSlice(gpu, TimeSlice::kLong).ok());
  EXPECT_EQ(source->TimeSliceForTest(gpu), TimeSlice::kLong);
  EXPECT_EQ(source->SetTimeSlice(gpu, static_cast<TimeSlice>(7)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(source->SetTimeSlice("GPU-nope", TimeSlice::kShort).code(),
            absl::StatusCode::kNotFound);
}

TEST(SimulatedDeviceSource, FaultInjection) {
  auto source = Make("mixed");
  const std::string gpu = MustDiscover(*source).gpus()[2].uuid;
  source->FailNextCalls(SimulatedOp::kCreateMigDevice, 2,
                        absl::UnavailableError("injected: driver busy"));
  for (int i = 0; i < 2; ++i) {
    auto failed = source->CreateMigDevice(gpu, "1g.10gb", 0);
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(failed.status().message(), HasSubstr("injected: driver busy"));
  }
  EXPECT_TRUE(source->CreateMigDevice(gpu, "1g.10gb", 0).ok());  // third call succeeds
  EXPECT_EQ(source->CallCountForTest(SimulatedOp::kCreateMigDevice), 3);

  source->FailNextCalls(SimulatedOp::kDiscover, 1, absl::Status());
  auto failed = source->Discover();
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnknown);
  EXPECT_THAT(failed.status().message(), HasSubstr("injected failure of Discover"));
  EXPECT_TRUE(source->Discover().ok());
}

TEST(SimulatedDeviceSource, HealthEvents) {
  auto source = Make("mixed");
  const model::Inventory inventory = MustDiscover(*source);
  const std::string gpu0 = inventory.gpus()[0].uuid;
  const std::string gpu5 = inventory.gpus()[5].uuid;

  auto idle = source->WaitForEvent(absl::ZeroDuration());
  ASSERT_TRUE(idle.ok());
  EXPECT_FALSE(idle->has_value());

  ASSERT_TRUE(source->InjectXid(gpu0, 48, 1, 0).ok());
  EXPECT_EQ(source->InjectXid("GPU-nope", 48).code(), absl::StatusCode::kNotFound);
  auto xid = source->WaitForEvent(absl::Seconds(1));
  ASSERT_TRUE(xid.ok() && xid->has_value());
  EXPECT_EQ(**xid, (HealthEvent{gpu0, HealthEventKind::kXid, 48, 1, 0}));

  ASSERT_TRUE(source->InjectGpuLost(gpu5).ok());
  auto lost = source->WaitForEvent(absl::Seconds(1));
  ASSERT_TRUE(lost.ok() && lost->has_value());
  EXPECT_EQ((*lost)->kind, HealthEventKind::kGpuLost);
  EXPECT_EQ((*lost)->gpu_uuid, gpu5);
  EXPECT_EQ(ToString((*lost)->kind), "gpu_lost");

  // A lost GPU leaves the inventory and every operation on it fails with GPU_IS_LOST.
  const model::Inventory after = MustDiscover(*source);
  EXPECT_EQ(after.gpus().size(), 7u);
  EXPECT_EQ(after.FindGpuByUuid(gpu5), nullptr);
  const absl::Status status = source->SetTimeSlice(gpu5, TimeSlice::kShort);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("NVML_ERROR_GPU_IS_LOST"));
}

TEST(SimulatedDeviceSource, WaitWakesOnEventFromAnotherThread) {
  auto source = Make("dgx-h100");
  const std::string gpu = MustDiscover(*source).gpus()[1].uuid;
  std::thread injector([&] { ASSERT_TRUE(source->InjectXid(gpu, 79).ok()); });
  auto event = source->WaitForEvent(absl::Seconds(10));
  injector.join();
  ASSERT_TRUE(event.ok() && event->has_value());
  EXPECT_EQ((*event)->xid, 79u);
}

TEST(SimulatedDeviceSource, ConcurrentCreateNeverOverlaps) {
  auto source = Make("mixed");
  const std::string gpu = MustDiscover(*source).gpus()[2].uuid;
  std::vector<std::thread> threads;
  std::atomic<int> created{0};
  for (uint32_t start = 0; start < 7; ++start) {
    for (int copy = 0; copy < 2; ++copy) {
      threads.emplace_back([&, start] {
        if (source->CreateMigDevice(gpu, "1g.10gb", start).ok()) {
          ++created;
        }
      });
    }
  }
  for (std::thread& t : threads) {
    t.join();
  }
  EXPECT_EQ(created.load(), 7);
  EXPECT_EQ(MustDiscover(*source).MigDevicesOf(gpu).size(), 7u);
}

TEST(SimulatedDeviceSource, ExampleFixtureAsSource) {
  auto spec = LoadSimulatedProfile(std::string(DRALENS_SOURCE_DIR) +
                                   "/tests/fixtures/profiles/example.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto source = SimulatedDeviceSource::Create(*spec, "node");
  ASSERT_TRUE(source.ok()) << source.status();
  const model::Inventory inventory = MustDiscover(**source);
  ASSERT_EQ(inventory.gpus().size(), 4u);
  EXPECT_EQ(inventory.driver_version(), "580.65.06");
  EXPECT_EQ(inventory.gpus()[0].pci_bus_id, "0000:1b:00.0");
  EXPECT_EQ(inventory.gpus()[0].pcie_root, "pci0000:10");
  EXPECT_EQ(inventory.gpus()[3].product_name, "NVIDIA A30");
  EXPECT_EQ(inventory.gpus()[3].memory_slices, 4u);
  EXPECT_EQ(inventory.mig_devices().size(), 4u);
  const auto a30 = inventory.MigDevicesOf(inventory.gpus()[3].uuid);
  ASSERT_EQ(a30.size(), 1u);
  EXPECT_EQ(a30[0]->gi_id, 2u);  // A30 2g at 2:2 -> GI 2, as in the reference listing
}

}  // namespace
}  // namespace dralens::driver::discovery
