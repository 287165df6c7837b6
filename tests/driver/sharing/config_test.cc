#include "driver/sharing/config.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::driver::sharing {
namespace {

using ::nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

json Gpu(json sharing = nullptr) {
  json j = {{"apiVersion", kConfigApiVersion}, {"kind", kGpuConfigKind}};
  if (!sharing.is_null()) {
    j["sharing"] = std::move(sharing);
  }
  return j;
}

json Mig(json sharing = nullptr) {
  json j = Gpu(std::move(sharing));
  j["kind"] = kMigDeviceConfigKind;
  return j;
}

json Mps(json mps_config) { return {{"strategy", "MPS"}, {"mpsConfig", std::move(mps_config)}}; }

// The error message of decoding `params`, or "" when it decodes.
std::string Error(const json& params) {
  absl::StatusOr<DeviceConfig> c = DecodeDeviceConfig(params);
  if (c.ok()) {
    return "";
  }
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  return std::string(c.status().message());
}

TEST(DecodeDeviceConfig, GpuWithoutSharingIsExclusive) {
  absl::StatusOr<DeviceConfig> c = DecodeDeviceConfig(Gpu());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kind, ConfigKind::kGpuConfig);
  EXPECT_EQ(c->sharing.mode, SharingMode::kNone);
}

TEST(DecodeDeviceConfig, GpuTimeSlicingWithInterval) {
  absl::StatusOr<DeviceConfig> c = DecodeDeviceConfig(
      Gpu({{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", "Long"}}}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sharing.mode, SharingMode::kTimeSlicing);
  EXPECT_EQ(c->sharing.interval, discovery::TimeSlice::kLong);
}

TEST(DecodeDeviceConfig, TimeSlicingWithoutIntervalIsDefault) {
  absl::StatusOr<DeviceConfig> c = DecodeDeviceConfig(Gpu({{"strategy", "TimeSlicing"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sharing.interval, discovery::TimeSlice::kDefault);
  c = DecodeDeviceConfig(Gpu({{"strategy", "TimeSlicing"}, {"timeSlicingConfig", json::object()}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sharing.interval, discovery::TimeSlice::kDefault);
}

TEST(DecodeDeviceConfig, GpuMpsWithAllFields) {
  absl::StatusOr<DeviceConfig> c = DecodeDeviceConfig(
      Gpu(Mps({{"defaultActiveThreadPercentage", 50},
               {"defaultPinnedDeviceMemoryLimit", "10Gi"},
               {"defaultPerDevicePinnedMemoryLimit", {{"0", "2Gi"}, {"GPU-abc", 1073741824}}},
               {"multiUser", true}})));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sharing.mode, SharingMode::kMps);
  const MpsConfig& m = c->sharing.mps;
  EXPECT_EQ(m.default_active_thread_percentage, 50);
  EXPECT_EQ(m.default_pinned_device_memory_limit, *common::Quantity::Parse("10Gi"));
  ASSERT_EQ(m.default_per_device_pinned_memory_limit.size(), 2u);
  EXPECT_EQ(m.default_per_device_pinned_memory_limit.at("0"), *common::Quantity::Parse("2Gi"));
  EXPECT_EQ(m.default_per_device_pinned_memory_limit.at("GPU-abc"),
            *common::Quantity::Parse("1Gi"));
  EXPECT_EQ(m.multi_user, true);
}

TEST(DecodeDeviceConfig, MigTimeSlicingAndMps) {
  absl::StatusOr<DeviceConfig> c = DecodeDeviceConfig(Mig({{"strategy", "TimeSlicing"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kind, ConfigKind::kMigDeviceConfig);
  EXPECT_EQ(c->sharing.mode, SharingMode::kTimeSlicing);
  EXPECT_EQ(c->sharing.interval, discovery::TimeSlice::kDefault);

  c = DecodeDeviceConfig(Mig(Mps({{"defaultActiveThreadPercentage", 100}})));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sharing.mode, SharingMode::kMps);
  EXPECT_EQ(c->sharing.mps.default_active_thread_percentage, 100);
}

TEST(DecodeDeviceConfig, NullOptionalFieldsAreAbsent) {
  json p = Gpu();
  p["sharing"] = nullptr;
  absl::StatusOr<DeviceConfig> c = DecodeDeviceConfig(p);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sharing.mode, SharingMode::kNone);
}

TEST(DecodeDeviceConfig, MigCannotSetInterval) {
  EXPECT_EQ(
      Error(Mig({{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", "Long"}}}})),
      "sharing.timeSlicingConfig: unknown field");
}

TEST(DecodeDeviceConfig, UnknownFieldsNamed) {
  json top = Gpu();
  top["extra"] = 1;
  EXPECT_EQ(Error(top), "extra: unknown field");
  EXPECT_EQ(Error(Gpu({{"strategy", "MPS"}, {"bogus", true}})), "sharing.bogus: unknown field");
  EXPECT_EQ(
      Error(Gpu({{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"intervall", "Long"}}}})),
      "sharing.timeSlicingConfig.intervall: unknown field");
  EXPECT_EQ(Error(Gpu(Mps({{"defaultActiveThreadPercent", 5}}))),
            "sharing.mpsConfig.defaultActiveThreadPercent: unknown field");
}

TEST(DecodeDeviceConfig, WrongTypesNamed) {
  EXPECT_EQ(Error(Gpu("TimeSlicing")), "sharing: must be an object, got string");
  EXPECT_EQ(Error(Gpu({{"strategy", 1}})), "sharing.strategy: must be a string, got number");
  EXPECT_EQ(Error(Gpu({{"strategy", "TimeSlicing"}, {"timeSlicingConfig", "Long"}})),
            "sharing.timeSlicingConfig: must be an object, got string");
  EXPECT_EQ(Error(Gpu({{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", 3}}}})),
            "sharing.timeSlicingConfig.interval: must be a string, got number");
  EXPECT_EQ(Error(Gpu(Mps({{"defaultActiveThreadPercentage", "50"}}))),
            "sharing.mpsConfig.defaultActiveThreadPercentage: must be an integer, got string");
  EXPECT_EQ(Error(Gpu(Mps({{"defaultActiveThreadPercentage", 50.5}}))),
            "sharing.mpsConfig.defaultActiveThreadPercentage: must be an integer, got 50.5");
  EXPECT_EQ(Error(Gpu(Mps({{"multiUser", "yes"}}))),
            "sharing.mpsConfig.multiUser: must be a boolean, got string");
  EXPECT_EQ(Error(Gpu(Mps({{"defaultPinnedDeviceMemoryLimit", true}}))),
            "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: must be a quantity string, got "
            "boolean");
  EXPECT_EQ(Error(Gpu(Mps({{"defaultPerDevicePinnedMemoryLimit", json::array()}}))),
            "sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit: must be an object, got array");
  EXPECT_EQ(Error(Gpu(Mps("x"))), "sharing.mpsConfig: must be an object, got string");
  EXPECT_EQ(Error(json::array()), "parameters: must be an object, got array");
}

TEST(DecodeDeviceConfig, BadEnumValues) {
  EXPECT_EQ(
      Error(Gpu({{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", "Huge"}}}})),
      "sharing.timeSlicingConfig.interval: must be one of Default, Short, Medium, Long, got "
      "\"Huge\"");
  EXPECT_EQ(Error(Gpu({{"strategy", "Exclusive"}})),
            "sharing.strategy: must be TimeSlicing or MPS, got \"Exclusive\"");
  EXPECT_EQ(Error(Gpu(json::object())), "sharing.strategy: required (TimeSlicing or MPS)");
}

TEST(DecodeDeviceConfig, PercentageRange) {
  EXPECT_EQ(Error(Gpu(Mps({{"defaultActiveThreadPercentage", 0}}))),
            "sharing.mpsConfig.defaultActiveThreadPercentage: must be 1..100, got 0");
  EXPECT_EQ(Error(Gpu(Mps({{"defaultActiveThreadPercentage", 101}}))),
            "sharing.mpsConfig.defaultActiveThreadPercentage: must be 1..100, got 101");
  EXPECT_EQ(Error(Gpu(Mps({{"defaultActiveThreadPercentage", 150}}))),
            "sharing.mpsConfig.defaultActiveThreadPercentage: must be 1..100, got 150");
  EXPECT_EQ(Error(Gpu(Mps({{"defaultActiveThreadPercentage", -5}}))),
            "sharing.mpsConfig.defaultActiveThreadPercentage: must be 1..100, got -5");
  EXPECT_EQ(Error(Gpu(Mps({{"defaultActiveThreadPercentage", 1}}))), "");
}

TEST(DecodeDeviceConfig, BadQuantities) {
  EXPECT_THAT(Error(Gpu(Mps({{"defaultPinnedDeviceMemoryLimit", "10Qi"}}))),
              StartsWith("sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: quantity"));
  EXPECT_EQ(Error(Gpu(Mps({{"defaultPinnedDeviceMemoryLimit", "512Ki"}}))),
            "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: must be at least 1Mi, got 512Ki");
  EXPECT_EQ(Error(Gpu(Mps({{"defaultPinnedDeviceMemoryLimit", "-1Gi"}}))),
            "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: must be at least 1Mi, got -1Gi");
  EXPECT_THAT(Error(Gpu(Mps({{"defaultPerDevicePinnedMemoryLimit", {{"0", "lots"}}}}))),
              StartsWith("sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[\"0\"]: quantity"));
  EXPECT_EQ(Error(Gpu(Mps({{"defaultPerDevicePinnedMemoryLimit", {{"../x", "1Gi"}}}}))),
            "sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[\"../x\"]: key must be a device "
            "UUID (GPU-... or MIG-...) or a device index");
}

TEST(DecodeDeviceConfig, OversizeParameters) {
  json p = Gpu({{"strategy", "TimeSlicing"}});
  p["padding"] = std::string(kMaxParametersBytes, 'x');
  EXPECT_THAT(Error(p),
              AllOf(StartsWith("parameters: "), HasSubstr("more than the limit of 10240")));
}

TEST(DecodeDeviceConfig, ApiVersionAndKind) {
  json p = Gpu();
  p["apiVersion"] = "resource.nvidia.com/v1beta1";
  EXPECT_EQ(Error(p),
            "apiVersion: must be resource.dralens.dev/v1beta1, got "
            "\"resource.nvidia.com/v1beta1\"");
  p.erase("apiVersion");
  EXPECT_EQ(Error(p), "apiVersion: required (resource.dralens.dev/v1beta1)");
  p = Gpu();
  p["kind"] = "VfioDeviceConfig";
  EXPECT_EQ(Error(p), "kind: must be GpuConfig or MigDeviceConfig, got \"VfioDeviceConfig\"");
  p.erase("kind");
  EXPECT_EQ(Error(p), "kind: required (GpuConfig or MigDeviceConfig)");
  p["kind"] = 7;
  EXPECT_EQ(Error(p), "kind: must be a string, got number");
}

TEST(DecodeDeviceConfig, StrategyConfigMismatch) {
  EXPECT_EQ(Error(Gpu({{"strategy", "TimeSlicing"}, {"mpsConfig", json::object()}})),
            "sharing.mpsConfig: not allowed with strategy TimeSlicing");
  EXPECT_EQ(Error(Gpu({{"strategy", "MPS"}, {"timeSlicingConfig", {{"interval", "Long"}}}})),
            "sharing.timeSlicingConfig: not allowed with strategy MPS");
  EXPECT_EQ(Error(Mig({{"strategy", "TimeSlicing"}, {"mpsConfig", json::object()}})),
            "sharing.mpsConfig: not allowed with strategy TimeSlicing");
}

// --- resolution --------------------------------------------------------------------------

constexpr char kDriver[] = "gpu.dralens.dev";

model::DeviceAllocationConfiguration Entry(std::string source, std::vector<std::string> requests,
                                           json params, std::string driver = kDriver) {
  model::DeviceAllocationConfiguration c;
  c.source = std::move(source);
  c.requests = std::move(requests);
  c.opaque = model::OpaqueDeviceConfiguration{std::move(driver), std::move(params)};
  return c;
}

json TimeSliced(absl::string_view interval) {
  return Gpu({{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", interval}}}});
}

discovery::TimeSlice IntervalFor(const std::vector<model::DeviceAllocationConfiguration>& configs,
                                 const AllocatedDevice& device) {
  absl::StatusOr<DeviceConfig> c = ResolveDeviceConfig(configs, kDriver, device);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) {
    return discovery::TimeSlice::kDefault;
  }
  EXPECT_EQ(c->sharing.mode, SharingMode::kTimeSlicing);
  return c->sharing.interval;
}

TEST(ConfigAppliesToRequest, SubrequestMatching) {
  EXPECT_TRUE(ConfigAppliesToRequest({}, "gpu"));
  EXPECT_TRUE(ConfigAppliesToRequest({"gpu"}, "gpu"));
  EXPECT_FALSE(ConfigAppliesToRequest({"gpu"}, "gpus"));
  EXPECT_TRUE(ConfigAppliesToRequest({"small"}, "small/slice"));
  EXPECT_TRUE(ConfigAppliesToRequest({"small/slice"}, "small/slice"));
  EXPECT_FALSE(ConfigAppliesToRequest({"small/whole"}, "small/slice"));
  EXPECT_FALSE(ConfigAppliesToRequest({"small/slice"}, "small"));
}

TEST(ResolveDeviceConfig, NothingAppliesMeansExclusive) {
  absl::StatusOr<DeviceConfig> c = ResolveDeviceConfig({}, kDriver, {"gpu", DeviceType::kMig});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kind, ConfigKind::kMigDeviceConfig);
  EXPECT_EQ(c->sharing.mode, SharingMode::kNone);
}

TEST(ResolveDeviceConfig, ClaimOverridesClassWhateverTheListOrder) {
  // Claim entry listed first: class entries still count as earlier.
  std::vector<model::DeviceAllocationConfiguration> configs = {
      Entry("FromClaim", {}, TimeSliced("Long")), Entry("FromClass", {}, TimeSliced("Short"))};
  EXPECT_EQ(IntervalFor(configs, {"gpu", DeviceType::kGpu}), discovery::TimeSlice::kLong);
}

TEST(ResolveDeviceConfig, LaterEntryOverridesWholeConfig) {
  std::vector<model::DeviceAllocationConfiguration> configs = {
      Entry("FromClass", {}, TimeSliced("Short")), Entry("FromClaim", {}, TimeSliced("Medium")),
      Entry("FromClaim", {"gpu"}, Gpu(Mps({{"defaultActiveThreadPercentage", 20}})))};
  absl::StatusOr<DeviceConfig> c = ResolveDeviceConfig(configs, kDriver, {"gpu", DeviceType::kGpu});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sharing.mode, SharingMode::kMps);
  // Whole object replaced: the interval of the earlier entry does not leak in.
  EXPECT_EQ(c->sharing.interval, discovery::TimeSlice::kDefault);
  EXPECT_EQ(c->sharing.mps.default_active_thread_percentage, 20);
}

TEST(ResolveDeviceConfig, RequestFiltering) {
  std::vector<model::DeviceAllocationConfiguration> configs = {
      Entry("FromClaim", {}, TimeSliced("Short")),
      Entry("FromClaim", {"train"}, TimeSliced("Long")),
      Entry("FromClaim", {"small/slice"}, TimeSliced("Medium"))};
  EXPECT_EQ(IntervalFor(configs, {"train", DeviceType::kGpu}), discovery::TimeSlice::kLong);
  EXPECT_EQ(IntervalFor(configs, {"infer", DeviceType::kGpu}), discovery::TimeSlice::kShort);
  EXPECT_EQ(IntervalFor(configs, {"small/slice", DeviceType::kGpu}), discovery::TimeSlice::kMedium);
  EXPECT_EQ(IntervalFor(configs, {"small/whole", DeviceType::kGpu}), discovery::TimeSlice::kShort);
  // A main-request entry covers its subrequests.
  configs.push_back(Entry("FromClaim", {"train"}, TimeSliced("Default")));
  EXPECT_EQ(IntervalFor(configs, {"train/a", DeviceType::kGpu}), discovery::TimeSlice::kDefault);
}

TEST(ResolveDeviceConfig, OtherDriversSkippedEvenIfInvalidForUs) {
  std::vector<model::DeviceAllocationConfiguration> configs = {
      Entry("FromClaim", {}, TimeSliced("Short")),
      Entry("FromClaim", {}, json{{"anything", "goes"}}, "gpu.nvidia.com")};
  model::DeviceAllocationConfiguration no_opaque;
  no_opaque.source = "FromClaim";
  configs.push_back(no_opaque);
  EXPECT_EQ(IntervalFor(configs, {"gpu", DeviceType::kGpu}), discovery::TimeSlice::kShort);
}

TEST(ResolveDeviceConfig, WrongKindForNamedRequestIsError) {
  std::vector<model::DeviceAllocationConfiguration> configs = {
      Entry("FromClass", {}, TimeSliced("Short")),
      Entry("FromClaim", {"small"}, TimeSliced("Long"))};
  absl::StatusOr<DeviceConfig> c =
      ResolveDeviceConfig(configs, kDriver, {"small/slice", DeviceType::kMig});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "config[1] (FromClaim): GpuConfig cannot apply to mig device of request "
            "\"small/slice\"");

  configs = {Entry("FromClaim", {"gpu"}, Mig({{"strategy", "MPS"}}))};
  c = ResolveDeviceConfig(configs, kDriver, {"gpu", DeviceType::kGpu});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("MigDeviceConfig cannot apply to gpu device"));
}

TEST(ResolveDeviceConfig, WrongKindForAllRequestsIsSkipped) {
  std::vector<model::DeviceAllocationConfiguration> configs = {
      Entry("FromClass", {}, Mig({{"strategy", "MPS"}})),
      Entry("FromClass", {}, TimeSliced("Medium"))};
  absl::StatusOr<DeviceConfig> mig = ResolveDeviceConfig(configs, kDriver, {"a", DeviceType::kMig});
  ASSERT_TRUE(mig.ok()) << mig.status();
  EXPECT_EQ(mig->kind, ConfigKind::kMigDeviceConfig);
  EXPECT_EQ(mig->sharing.mode, SharingMode::kMps);
  EXPECT_EQ(IntervalFor(configs, {"a", DeviceType::kGpu}), discovery::TimeSlice::kMedium);
}

TEST(ResolveDeviceConfig, InvalidEntryOfOurDriverFailsWithItsIndex) {
  std::vector<model::DeviceAllocationConfiguration> configs = {
      Entry("FromClaim", {"other"}, Gpu({{"strategy", "Nope"}})),
      Entry("FromClaim", {}, TimeSliced("Short"))};
  absl::StatusOr<DeviceConfig> c = ResolveDeviceConfig(configs, kDriver, {"gpu", DeviceType::kGpu});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "config[0] (FromClaim): sharing.strategy: must be TimeSlicing or MPS, got \"Nope\"");

  configs = {Entry("FromSomewhere", {}, TimeSliced("Short"))};
  c = ResolveDeviceConfig(configs, kDriver, {"gpu", DeviceType::kGpu});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("source must be FromClass or FromClaim"));
}

TEST(DeviceType, ParseAndPrint) {
  EXPECT_EQ(*ParseDeviceType("gpu"), DeviceType::kGpu);
  EXPECT_EQ(*ParseDeviceType("mig"), DeviceType::kMig);
  EXPECT_FALSE(ParseDeviceType("vfio").ok());
  EXPECT_EQ(ToString(DeviceType::kMig), "mig");
  EXPECT_EQ(ToString(ConfigKind::kMigDeviceConfig), "MigDeviceConfig");
}

TEST(EncodeSharing, RoundTripsThroughTheStrictDecoder) {
  SharingConfig none;
  EXPECT_TRUE(EncodeSharing(none).is_null());
  SharingConfig sliced;
  sliced.mode = SharingMode::kTimeSlicing;
  sliced.interval = discovery::TimeSlice::kMedium;
  SharingConfig mps;
  mps.mode = SharingMode::kMps;
  mps.mps.default_active_thread_percentage = 40;
  mps.mps.default_pinned_device_memory_limit = *common::Quantity::Parse("2Gi");
  mps.mps.default_per_device_pinned_memory_limit.emplace("0", *common::Quantity::Parse("1Gi"));
  mps.mps.multi_user = true;
  for (const SharingConfig& s : {none, sliced, mps}) {
    absl::StatusOr<SharingConfig> back =
        DecodeSharingBlock(EncodeSharing(s), ConfigKind::kGpuConfig);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, s) << EncodeSharing(s).dump();
  }
  EXPECT_EQ(EncodeSharing(sliced).dump(),
            R"({"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Medium"}})");
  // The block decoder is as strict as the config decoder.
  EXPECT_FALSE(DecodeSharingBlock(nlohmann::json::parse(R"({"strategy":"MPS","x":1})"),
                                  ConfigKind::kGpuConfig)
                   .ok());
}

}  // namespace
}  // namespace dralens::driver::sharing
