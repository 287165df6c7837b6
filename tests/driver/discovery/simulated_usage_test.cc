// SimulatedDeviceSource::SampleUsage: the loads the demo sets, reported as NVML reports them.
#include <map>
#include <string>

#include "driver/discovery/simulated/simulated_device_source.h"
#include "driver/discovery/simulated/simulated_profile.h"
#include "gtest/gtest.h"

namespace dralens::driver::discovery {
namespace {

std::map<std::string, DeviceUsage> Sample(SimulatedDeviceSource& source) {
  auto usage = source.SampleUsage();
  EXPECT_TRUE(usage.ok()) << usage.status();
  std::map<std::string, DeviceUsage> out;
  for (const DeviceUsage& u : usage.value_or(std::vector<DeviceUsage>())) {
    out.emplace(u.uuid, u);
  }
  return out;
}

std::unique_ptr<SimulatedDeviceSource> Make(const std::string& profile) {
  auto p = BuiltinSimulatedProfile(profile);
  EXPECT_TRUE(p.ok()) << p.status();
  auto source = SimulatedDeviceSource::Create(*p, "node-a");
  EXPECT_TRUE(source.ok()) << source.status();
  return source.ok() ? std::move(*source) : nullptr;
}

TEST(SimulatedUsageTest, AGpuWithoutLoadIsIdleAndALoadedOneReportsItsLoad) {
  auto source = Make("a100-40gb");
  ASSERT_NE(source, nullptr);
  auto inventory = source->Discover();
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  const std::string gpu = inventory->gpus().front().uuid;

  auto by = Sample(*source);
  ASSERT_TRUE(by.contains(gpu));
  EXPECT_EQ(by[gpu].method, UsageMethod::kDeviceUtilization);
  EXPECT_EQ(by[gpu].utilization, 0.0);
  EXPECT_EQ(by[gpu].memory_used_bytes, 0u);
  EXPECT_EQ(by[gpu].memory_total_bytes, inventory->gpus().front().memory_bytes);

  ASSERT_TRUE(source->SetLoad(gpu, "pod-a", 0.5, 3ULL << 30).ok());
  ASSERT_TRUE(source->SetLoad(gpu, "pod-b", 0.25, 1ULL << 30).ok());
  by = Sample(*source);
  EXPECT_EQ(by[gpu].utilization, 0.75) << "two processes time-slicing the GPU";
  EXPECT_EQ(by[gpu].memory_used_bytes, 4ULL << 30);
  ASSERT_TRUE(source->SetLoad(gpu, "pod-b", 0.75, 1ULL << 30).ok());
  EXPECT_EQ(Sample(*source)[gpu].utilization, 1.0) << "at most the whole GPU";

  source->ClearLoad(gpu, "pod-a");
  EXPECT_EQ(Sample(*source)[gpu].utilization, 0.75);
  source->ClearLoad(gpu, "pod-b");
  EXPECT_EQ(Sample(*source)[gpu].utilization, 0.0);
  EXPECT_EQ(source->SetLoad("GPU-nope", "pod-a", 0.5, 0).code(), absl::StatusCode::kNotFound);
}

TEST(SimulatedUsageTest, HopperMigDevicesReportGpmActivityFromTheirSecondRound) {
  auto source = Make("dgx-h100");
  ASSERT_NE(source, nullptr);
  auto inventory = source->Discover();
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  const std::string gpu = inventory->gpus().front().uuid;
  ASSERT_TRUE(source->SetMigMode(gpu, true).ok());
  auto mig = source->CreateMigDevice(gpu, "1g.10gb", 0);
  ASSERT_TRUE(mig.ok()) << mig.status();
  ASSERT_TRUE(source->SetLoad(mig->uuid, "pod-a", 0.02, 1ULL << 30).ok());

  auto by = Sample(*source);
  EXPECT_EQ(by[gpu].method, UsageMethod::kMemoryOnly);
  EXPECT_EQ(by[gpu].utilization, std::nullopt);
  EXPECT_EQ(by[gpu].memory_used_bytes, 1ULL << 30) << "the parent's memory is its instances'";
  EXPECT_EQ(by[mig->uuid].method, UsageMethod::kGpm);
  EXPECT_EQ(by[mig->uuid].utilization, std::nullopt) << "no earlier GPM sample";
  by = Sample(*source);
  EXPECT_EQ(by[mig->uuid].utilization, 0.02);

  ASSERT_TRUE(source->InjectGpuLost(gpu).ok());
  EXPECT_FALSE(Sample(*source).contains(gpu));
}

}  // namespace
}  // namespace dralens::driver::discovery
