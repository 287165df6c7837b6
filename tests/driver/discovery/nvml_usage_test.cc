// NvmlDeviceSource::SampleUsage against the fake libnvidia-ml.so.1: utilisation rates for full
// GPUs, GPM activity for MIG devices, memory used for both, and what is left out.
#include <map>
#include <string>

#include "driver/discovery/nvml/nvml_device_source.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/driver/discovery/fake_nvml_control.h"

namespace dralens::driver::discovery {
namespace {

using testing::kA100;
using testing::kH100;
using NvmlUsageTest = testing::NvmlFixture;

constexpr char kSmallMig[] = "MIG-12345678-1234-1234-1234-123456789abc";  // GI 7, 1g.10gb
constexpr char kBigMig[] = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";    // GI 2, 3g.40gb
constexpr unsigned kWholeGpu = ~0u;

std::map<std::string, DeviceUsage> ByUuid(const std::vector<DeviceUsage>& usage) {
  std::map<std::string, DeviceUsage> out;
  for (const DeviceUsage& u : usage) {
    EXPECT_TRUE(out.emplace(u.uuid, u).second) << "sampled twice: " << u.uuid;
  }
  return out;
}

TEST_F(NvmlUsageTest, FullGpuReportsUtilizationRatesAndMemoryUsed) {
  auto source = Make();
  ASSERT_NE(source, nullptr);
  fake_.SetUsage(1, kWholeGpu, 37, 1024);
  auto usage = source->SampleUsage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  auto by = ByUuid(*usage);
  ASSERT_TRUE(by.contains(kA100));
  const DeviceUsage& a100 = by[kA100];
  EXPECT_EQ(a100.method, UsageMethod::kDeviceUtilization);
  ASSERT_TRUE(a100.utilization.has_value());
  EXPECT_DOUBLE_EQ(*a100.utilization, 0.37);
  EXPECT_EQ(a100.memory_used_bytes, 1024ULL << 20);
  EXPECT_EQ(a100.memory_total_bytes, 40960ULL << 20);
  EXPECT_EQ(fake_.MutationCount(), 0) << "sampling must not change any GPU setting";
}

TEST_F(NvmlUsageTest, GpuInMigModeReportsMemoryOnlyAndItsMigDevicesGpmActivity) {
  auto source = Make();
  ASSERT_NE(source, nullptr);
  fake_.SetUsage(0, 7, 80, 512);
  fake_.SetUsage(0, 2, 2, 4096);

  // The first round has no earlier GPM sample to compare with.
  auto first = source->SampleUsage();
  ASSERT_TRUE(first.ok()) << first.status();
  auto by = ByUuid(*first);
  ASSERT_EQ(by.size(), 4u);  // A100, H100 and its two MIG devices
  EXPECT_EQ(by[kH100].method, UsageMethod::kMemoryOnly);
  EXPECT_EQ(by[kH100].utilization, std::nullopt) << "NVML answers NOT_SUPPORTED in MIG mode";
  EXPECT_EQ(by[kSmallMig].method, UsageMethod::kGpm);
  EXPECT_EQ(by[kSmallMig].utilization, std::nullopt);
  EXPECT_EQ(by[kSmallMig].memory_used_bytes, 512ULL << 20);
  EXPECT_EQ(by[kSmallMig].memory_total_bytes, 9984ULL << 20);

  auto second = source->SampleUsage();
  ASSERT_TRUE(second.ok()) << second.status();
  by = ByUuid(*second);
  ASSERT_TRUE(by[kSmallMig].utilization.has_value());
  EXPECT_DOUBLE_EQ(*by[kSmallMig].utilization, 0.80);
  ASSERT_TRUE(by[kBigMig].utilization.has_value());
  EXPECT_DOUBLE_EQ(*by[kBigMig].utilization, 0.02);
  EXPECT_EQ(by[kBigMig].memory_used_bytes, 4096ULL << 20);

  fake_.SetUsage(0, 7, 3, 512);
  auto third = source->SampleUsage();
  ASSERT_TRUE(third.ok()) << third.status();
  by = ByUuid(*third);
  EXPECT_DOUBLE_EQ(by[kSmallMig].utilization.value_or(-1), 0.03);
}

TEST_F(NvmlUsageTest, GpmSamplesAreFreedWhenTheirMigDeviceGoesAndAtTheEnd) {
  auto source = Make();
  ASSERT_NE(source, nullptr);
  ASSERT_TRUE(source->SampleUsage().ok());
  ASSERT_TRUE(source->SampleUsage().ok());
  EXPECT_EQ(fake_.GpmSamplesAlive(), 2) << "one kept per MIG device";
  ASSERT_TRUE(source->DestroyMigDevice(kSmallMig).ok());
  auto usage = source->SampleUsage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_FALSE(ByUuid(*usage).contains(kSmallMig));
  EXPECT_EQ(fake_.GpmSamplesAlive(), 1);
  source.reset();
  EXPECT_EQ(fake_.GpmSamplesAlive(), 0);
}

TEST_F(NvmlUsageTest, WithoutGpmMigDevicesReportMemoryOnly) {
  fake_.SetGpmSupported(0, false);
  auto source = Make();
  ASSERT_NE(source, nullptr);
  fake_.SetUsage(0, 7, 80, 512);
  ASSERT_TRUE(source->SampleUsage().ok());
  auto usage = source->SampleUsage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  auto by = ByUuid(*usage);
  EXPECT_EQ(by[kSmallMig].method, UsageMethod::kMemoryOnly);
  EXPECT_EQ(by[kSmallMig].utilization, std::nullopt);
  EXPECT_EQ(by[kSmallMig].memory_used_bytes, 512ULL << 20);
  EXPECT_EQ(fake_.GpmSamplesAlive(), 0);
}

TEST_F(NvmlUsageTest, GpusOutsideTheCgroupOrLostAreLeftOut) {
  auto source = Make();
  ASSERT_NE(source, nullptr);
  fake_.SetDenied(1, true);
  auto usage = source->SampleUsage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  auto by = ByUuid(*usage);
  EXPECT_FALSE(by.contains(kA100));
  EXPECT_TRUE(by.contains(kH100));

  fake_.SetGpuLost(0, true);
  usage = source->SampleUsage();
  EXPECT_EQ(usage.status().code(), absl::StatusCode::kUnavailable)
      << "nothing readable: the first error (GPU 0 lost) is returned";
  EXPECT_THAT(usage.status().message(), ::testing::HasSubstr("NVML_ERROR_GPU_IS_LOST"));
}

}  // namespace
}  // namespace dralens::driver::discovery
