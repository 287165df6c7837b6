#include "driver/discovery/device_source.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::driver::discovery {
namespace {

using ::testing::HasSubstr;

TEST(MakeDeviceSource, SimulatedBuiltin) {
  auto source = MakeDeviceSource("simulated", "dgx-h100", "node-1");
  ASSERT_TRUE(source.ok()) << source.status();
  auto inventory = (*source)->Discover();
  ASSERT_TRUE(inventory.ok());
  EXPECT_EQ(inventory->gpus().size(), 8u);
}

TEST(MakeDeviceSource, SimulatedFile) {
  auto source = MakeDeviceSource(
      "simulated", std::string(DRALENS_SOURCE_DIR) + "/tests/fixtures/profiles/example.json");
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->Discover()->gpus().size(), 4u);
}

TEST(MakeDeviceSource, Errors) {
  auto unknown_kind = MakeDeviceSource("dcgm", "");
  EXPECT_EQ(unknown_kind.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown_kind.status().message(), HasSubstr("dcgm"));
  auto unknown_profile = MakeDeviceSource("simulated", "no-such-profile");
  EXPECT_EQ(unknown_profile.status().code(), absl::StatusCode::kNotFound);
  DeviceSourceOptions options;
  options.kind = "nvml";
  options.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  auto nvml = MakeDeviceSource(options);
  EXPECT_THAT(nvml.status().message(), HasSubstr("/nonexistent/libnvidia-ml.so.1"));
}

TEST(MakeDeviceSource, Names) {
  EXPECT_EQ(ToString(HealthEventKind::kXid), "xid");
  EXPECT_EQ(ToString(TimeSlice::kMedium), "Medium");
}

}  // namespace
}  // namespace dralens::driver::discovery
