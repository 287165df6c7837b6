#include "driver/health/monitor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "tests/driver/health/test_gpus.h"

namespace dralens::driver::health {
namespace {

using discovery::HealthEvent;
using discovery::HealthEventKind;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr DeviceHealthStatus kHealthy = DeviceHealthStatus::kHealthy;
constexpr DeviceHealthStatus kUnhealthy = DeviceHealthStatus::kUnhealthy;

model::DeviceTaint Taint(const std::string& key, const std::string& value,
                         const std::string& effect, absl::Time added) {
  return model::DeviceTaint{key, value, effect, added};
}

class HealthMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = testing::MakeSource();
    ASSERT_NE(source_, nullptr);
    inventory_ = testing::Discover(*source_);
    ASSERT_THAT(inventory_.gpus(), SizeIs(3));
    ASSERT_THAT(inventory_.mig_devices(), SizeIs(3));
    gpu0_ = inventory_.gpus()[0].uuid;
    gpu1_ = inventory_.gpus()[1].uuid;
    for (const model::MigDevice& mig : inventory_.mig_devices()) {
      mig_names_.push_back(slices::MigDeviceName(mig));
    }
    options_.pool_name = "node-a";
  }

  HealthMonitor& Monitor() {
    if (monitor_ == nullptr) {
      monitor_ = std::make_unique<HealthMonitor>(options_, clock_);
      monitor_->SetInventory(inventory_);
    }
    return *monitor_;
  }

  std::map<std::string, DeviceHealthState> States() {
    std::map<std::string, DeviceHealthState> states;
    for (const DeviceHealthState& state : Monitor().Snapshot()) {
      states[state.device] = state;
    }
    return states;
  }

  HealthEvent Xid(const std::string& uuid, uint64_t xid, uint32_t gi = discovery::kNoMigInstance,
                  uint32_t ci = discovery::kNoMigInstance) {
    return HealthEvent{uuid, HealthEventKind::kXid, xid, gi, ci};
  }

  common::FakeClock clock_;
  std::unique_ptr<discovery::SimulatedDeviceSource> source_;
  model::Inventory inventory_;
  std::string gpu0_, gpu1_;
  std::vector<std::string> mig_names_;
  HealthMonitorOptions options_;
  std::unique_ptr<HealthMonitor> monitor_;
};

TEST(IsIgnoredXidTest, FollowsTheNvidiaList) {
  for (uint64_t xid : {13, 31, 43, 45, 68, 109}) {
    EXPECT_TRUE(IsIgnoredXid(xid)) << xid;
  }
  for (uint64_t xid : {0, 48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 999}) {
    EXPECT_FALSE(IsIgnoredXid(xid)) << xid;
  }
}

TEST_F(HealthMonitorTest, EveryPublishedDeviceStartsHealthy) {
  std::vector<DeviceHealthState> snapshot = Monitor().Snapshot();
  std::vector<std::string> names;
  for (const DeviceHealthState& state : snapshot) {
    names.push_back(state.device);
    EXPECT_EQ(state.pool, "node-a");
    EXPECT_EQ(state.health, kHealthy);
    EXPECT_EQ(state.message, "");
    EXPECT_EQ(state.last_updated, clock_.Now());
  }
  // GPU 0 is in MIG mode: only its MIG devices are devices, as static MIG publishes them.
  EXPECT_THAT(names, ElementsAre("gpu-1", "gpu-2", mig_names_[0], mig_names_[1], mig_names_[2]));
  EXPECT_THAT(Monitor().Taints(), IsEmpty());
}

TEST_F(HealthMonitorTest, DynamicMigTracksEveryGpuAndNoMigDevice) {
  options_.dynamic_mig = true;
  std::vector<std::string> names;
  for (const DeviceHealthState& state : Monitor().Snapshot()) {
    names.push_back(state.device);
  }
  EXPECT_THAT(names, ElementsAre("gpu-0", "gpu-1", "gpu-2"));
}

TEST_F(HealthMonitorTest, CriticalXidMakesTheGpuUnhealthyAndTaintsItNoSchedule) {
  HealthMonitor& monitor = Monitor();
  const absl::Time start = clock_.Now();
  const uint64_t before = monitor.Version();
  clock_.Advance(absl::Seconds(10));
  monitor.Apply(Xid(gpu1_, 48));

  EXPECT_GT(monitor.Version(), before);
  auto states = States();
  EXPECT_EQ(states["gpu-1"].health, kUnhealthy);
  EXPECT_THAT(states["gpu-1"].message, HasSubstr("Xid 48"));
  EXPECT_EQ(states["gpu-1"].last_updated, clock_.Now());
  EXPECT_EQ(states["gpu-2"].health, kHealthy);
  EXPECT_EQ(states["gpu-2"].last_updated, start);
  for (const std::string& mig : mig_names_) {
    EXPECT_EQ(states[mig].health, kHealthy) << mig;
  }
  auto taints = monitor.Taints();
  ASSERT_THAT(taints, SizeIs(1));
  EXPECT_THAT(taints["gpu-1"],
              ElementsAre(Taint("gpu.dralens.dev/xid", "48", "NoSchedule", clock_.Now())));
}

TEST_F(HealthMonitorTest, IgnoredXidIsRecordedButStaysHealthyWithEffectNone) {
  HealthMonitor& monitor = Monitor();
  monitor.Apply(Xid(gpu1_, 13));
  auto states = States();
  EXPECT_EQ(states["gpu-1"].health, kHealthy);
  EXPECT_THAT(states["gpu-1"].message, HasSubstr("Xid 13"));
  EXPECT_THAT(monitor.Taints()["gpu-1"],
              ElementsAre(Taint("gpu.dralens.dev/xid", "13", "None", clock_.Now())));
}

TEST_F(HealthMonitorTest, AnUnmonitoredGpuStaysHealthyAndIsTaintedUnmonitored) {
  HealthMonitor& monitor = Monitor();
  monitor.Apply(HealthEvent{gpu1_, HealthEventKind::kUnmonitored, 0, discovery::kNoMigInstance,
                            discovery::kNoMigInstance});
  auto states = States();
  EXPECT_EQ(states["gpu-1"].health, kHealthy);
  EXPECT_THAT(states["gpu-1"].message, HasSubstr("cannot be monitored"));
  EXPECT_THAT(monitor.Taints()["gpu-1"],
              ElementsAre(Taint("gpu.dralens.dev/unmonitored", "", "None", clock_.Now())));
  EXPECT_EQ(monitor.Taints().count("gpu-0"), 0u);
}

TEST_F(HealthMonitorTest, AdditionalIgnoredXidsAreNotCritical) {
  options_.additional_ignored_xids = {48};
  Monitor().Apply(Xid(gpu1_, 48));
  EXPECT_EQ(States()["gpu-1"].health, kHealthy);
  EXPECT_EQ(Monitor().Taints()["gpu-1"][0].effect, "None");
}

TEST_F(HealthMonitorTest, RepeatedXidIsNoChange) {
  HealthMonitor& monitor = Monitor();
  monitor.Apply(Xid(gpu1_, 48));
  const uint64_t version = monitor.Version();
  const absl::Time first = clock_.Now();
  clock_.Advance(absl::Minutes(1));
  monitor.Apply(Xid(gpu1_, 48));
  EXPECT_EQ(monitor.Version(), version);
  EXPECT_EQ(States()["gpu-1"].last_updated, first);
  EXPECT_EQ(monitor.Taints()["gpu-1"][0].time_added, first);
}

TEST_F(HealthMonitorTest, TaintsAreCappedWithNoScheduleFirst) {
  HealthMonitor& monitor = Monitor();
  for (uint64_t xid : {13, 31, 43, 45, 48, 74}) {
    monitor.Apply(Xid(gpu1_, xid));
  }
  std::vector<std::string> taints;
  // Keep the map alive: a range-for over a member of a temporary would read freed memory.
  const auto all = monitor.Taints();
  for (const model::DeviceTaint& taint : all.at("gpu-1")) {
    taints.push_back(taint.value + ":" + taint.effect);
  }
  EXPECT_THAT(taints, ElementsAre("48:NoSchedule", "74:NoSchedule", "13:None", "31:None"));
  // The message still names every Xid.
  EXPECT_THAT(States()["gpu-1"].message, HasSubstr("Xid 45"));
}

TEST_F(HealthMonitorTest, GpuLostTaintsTheGpuAndItsMigDevices) {
  HealthMonitor& monitor = Monitor();
  monitor.Apply(HealthEvent{gpu0_, HealthEventKind::kGpuLost, 79});
  auto states = States();
  auto taints = monitor.Taints();
  for (const std::string& mig : mig_names_) {
    EXPECT_EQ(states[mig].health, kUnhealthy) << mig;
    EXPECT_THAT(states[mig].message, HasSubstr("GPU lost"));
    EXPECT_THAT(taints[mig],
                ElementsAre(Taint("gpu.dralens.dev/gpu-lost", "", "NoSchedule", clock_.Now())));
  }
  EXPECT_EQ(states["gpu-1"].health, kHealthy);
  EXPECT_EQ(states["gpu-2"].health, kHealthy);
  EXPECT_THAT(taints, SizeIs(3));
}

TEST_F(HealthMonitorTest, XidWithGiCiHitsOnlyThatMigDevice) {
  HealthMonitor& monitor = Monitor();
  const model::MigDevice& target = inventory_.mig_devices()[1];
  monitor.Apply(Xid(gpu0_, 94, target.gi_id, target.ci_id));
  auto states = States();
  EXPECT_EQ(states[mig_names_[1]].health, kUnhealthy);
  EXPECT_EQ(states[mig_names_[0]].health, kHealthy);
  EXPECT_EQ(states[mig_names_[2]].health, kHealthy);
  EXPECT_THAT(monitor.Taints(), SizeIs(1));

  // A GI without a CI covers the compute instances of that GI.
  const model::MigDevice& other = inventory_.mig_devices()[2];
  monitor.Apply(Xid(gpu0_, 95, other.gi_id));
  EXPECT_EQ(States()[mig_names_[2]].health, kUnhealthy);
  EXPECT_EQ(States()[mig_names_[0]].health, kHealthy);
}

TEST_F(HealthMonitorTest, GpuWideXidHitsEveryMigDeviceAndUnknownGiIsGpuWide) {
  HealthMonitor& monitor = Monitor();
  monitor.Apply(Xid(gpu0_, 48, /*gi=*/77, /*ci=*/0));
  auto states = States();
  for (const std::string& mig : mig_names_) {
    EXPECT_EQ(states[mig].health, kUnhealthy) << mig;
  }
  EXPECT_EQ(states["gpu-1"].health, kHealthy);
}

TEST_F(HealthMonitorTest, EmptyUuidAppliesToEveryGpu) {
  HealthMonitor& monitor = Monitor();
  monitor.Apply(HealthEvent{"", HealthEventKind::kGpuLost, 0});
  for (const DeviceHealthState& state : monitor.Snapshot()) {
    EXPECT_EQ(state.health, kUnhealthy) << state.device;
  }
  EXPECT_THAT(monitor.Taints(), SizeIs(5));
}

TEST_F(HealthMonitorTest, UnknownGpuIsDropped) {
  HealthMonitor& monitor = Monitor();
  const uint64_t version = monitor.Version();
  monitor.Apply(Xid("GPU-not-here", 48));
  EXPECT_EQ(monitor.Version(), version);
  EXPECT_THAT(monitor.Taints(), IsEmpty());
}

TEST_F(HealthMonitorTest, FaultsStickAcrossRediscoveryAndReachNewMigDevices) {
  HealthMonitor& monitor = Monitor();
  monitor.Apply(Xid(gpu1_, 48));
  monitor.Apply(Xid(gpu0_, 74));
  const uint64_t version = monitor.Version();

  // The same inventory again (a periodic rediscovery) changes nothing.
  monitor.SetInventory(testing::Discover(*source_));
  EXPECT_EQ(monitor.Version(), version);
  EXPECT_EQ(States()["gpu-1"].health, kUnhealthy);

  // A MIG device created on the faulty GPU inherits its GPU-wide fault.
  auto created = source_->CreateMigDevice(gpu0_, "1g.10gb", 6);
  ASSERT_TRUE(created.ok()) << created.status();
  monitor.SetInventory(testing::Discover(*source_));
  auto states = States();
  ASSERT_TRUE(states.contains(slices::MigDeviceName(*created)));
  EXPECT_EQ(states[slices::MigDeviceName(*created)].health, kUnhealthy);
  EXPECT_EQ(states["gpu-1"].health, kUnhealthy);
}

TEST_F(HealthMonitorTest, ReplacedInventoryResetsHealth) {
  HealthMonitor& monitor = Monitor();
  monitor.Apply(HealthEvent{"", HealthEventKind::kGpuLost, 79});
  ASSERT_THAT(monitor.Taints(), SizeIs(5));

  // Other GPUs (other UUIDs): their faults are not ours.
  auto other = testing::MakeSource("node-b");
  ASSERT_NE(other, nullptr);
  monitor.SetInventory(testing::Discover(*other));
  for (const DeviceHealthState& state : monitor.Snapshot()) {
    EXPECT_EQ(state.health, kHealthy) << state.device;
  }
  EXPECT_THAT(monitor.Taints(), IsEmpty());

  monitor.SetInventory(model::Inventory());
  EXPECT_THAT(monitor.Snapshot(), IsEmpty());
}

TEST_F(HealthMonitorTest, ClearFaultsResets) {
  HealthMonitor& monitor = Monitor();
  monitor.Apply(Xid(gpu1_, 48));
  monitor.ClearFaults();
  EXPECT_EQ(States()["gpu-1"].health, kHealthy);
  EXPECT_THAT(monitor.Taints(), IsEmpty());
}

TEST_F(HealthMonitorTest, OnChangeRunsOnChangesOnlyUntilRemoved) {
  HealthMonitor& monitor = Monitor();
  int calls = 0;
  uint64_t id = monitor.OnChange([&] { ++calls; });
  monitor.Apply(Xid(gpu1_, 48));
  monitor.Apply(Xid(gpu1_, 48));  // no change
  EXPECT_EQ(calls, 1);
  monitor.RemoveOnChange(id);
  monitor.Apply(Xid(gpu1_, 79));
  EXPECT_EQ(calls, 1);
}

// Events flow from the simulated source through WaitForEvent into the monitor's own thread,
// surviving WaitForEvent failures.
TEST_F(HealthMonitorTest, EventThreadConsumesInjectedFaults) {
  options_.event_wait = absl::Milliseconds(20);
  options_.error_backoff = absl::Milliseconds(1);
  HealthMonitor& monitor = Monitor();
  absl::Mutex mu;
  int changes = 0;
  monitor.OnChange([&] {
    absl::MutexLock lock(&mu);
    ++changes;
  });
  source_->FailNextCalls(discovery::SimulatedOp::kWaitForEvent, 2,
                         absl::InternalError("nvmlEventSetWait_v2 failed"));
  monitor.Start(*source_);

  ASSERT_TRUE(source_->InjectXid(gpu1_, 63).ok());
  {
    absl::MutexLock lock(&mu);
    auto one = [&]() { return changes >= 1; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&one), absl::Seconds(10)));
  }
  EXPECT_EQ(States()["gpu-1"].health, kUnhealthy);
  EXPECT_THAT(States()["gpu-1"].message, HasSubstr("Xid 63"));

  const model::MigDevice& target = inventory_.mig_devices()[0];
  ASSERT_TRUE(source_->InjectXid(gpu0_, 48, target.gi_id, target.ci_id).ok());
  ASSERT_TRUE(source_->InjectGpuLost(inventory_.gpus()[2].uuid).ok());
  {
    absl::MutexLock lock(&mu);
    auto three = [&]() { return changes >= 3; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&three), absl::Seconds(10)));
  }
  monitor.Stop();
  auto states = States();
  EXPECT_EQ(states[mig_names_[0]].health, kUnhealthy);
  EXPECT_EQ(states[mig_names_[1]].health, kHealthy);
  EXPECT_EQ(states["gpu-2"].health, kUnhealthy);
  EXPECT_EQ(monitor.Taints()["gpu-2"][0].key, "gpu.dralens.dev/gpu-lost");
  EXPECT_GE(source_->CallCountForTest(discovery::SimulatedOp::kWaitForEvent), 3);
}

}  // namespace
}  // namespace dralens::driver::health
