#include "driver/discovery/simulated/simulated_profile.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::driver::discovery {
namespace {

using ::testing::HasSubstr;

std::string FixturePath(const char* name) {
  return std::string(DRALENS_SOURCE_DIR) + "/tests/fixtures/profiles/" + name;
}

TEST(SimulatedProfile, Builtins) {
  for (const std::string& name : BuiltinSimulatedProfileNames()) {
    auto profile = BuiltinSimulatedProfile(name);
    ASSERT_TRUE(profile.ok()) << name;
    EXPECT_TRUE(ValidateSimulatedProfile(*profile).ok()) << name;
    EXPECT_EQ(profile->name, name);
  }
  auto unknown = BuiltinSimulatedProfile("dgx-b200");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("a100-40gb, dgx-h100, h100x2, mixed"));
}

TEST(SimulatedProfile, ExampleFixtureLoads) {
  auto profile = LoadSimulatedProfile(FixturePath("example.json"));
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->name, "example");
  EXPECT_EQ(profile->driver_version, "580.65.06");
  EXPECT_EQ(profile->cuda_driver_version, "13.0");
  ASSERT_EQ(profile->gpus.size(), 4u);  // count 2 expands
  EXPECT_EQ(profile->gpus[0].board, "h100-80gb");
  EXPECT_TRUE(profile->gpus[0].mig_enabled);
  EXPECT_EQ(profile->gpus[0].mig_devices.size(), 3u);
  EXPECT_EQ(profile->gpus[0].pci_bus_id, "0000:1b:00.0");
  EXPECT_EQ(profile->gpus[1].board, "a100-80gb");
  EXPECT_EQ(profile->gpus[2].numa_node, 1);
  EXPECT_EQ(profile->gpus[3].board, "a30");
  EXPECT_TRUE(ValidateSimulatedProfile(*profile).ok());
}

TEST(SimulatedProfile, DefaultsApply) {
  auto profile = ParseSimulatedProfileJson(R"({"name":"n","gpus":[{"board":"a30"}]})");
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->driver_version, "550.163.01");
  EXPECT_EQ(profile->cuda_driver_version, "12.4");
  EXPECT_EQ(profile->brand, "Nvidia");
  EXPECT_FALSE(profile->gpus[0].mig_enabled);
  EXPECT_FALSE(profile->gpus[0].numa_node.has_value());
}

struct BadCase {
  const char* json;
  const char* message;
};

TEST(SimulatedProfile, StrictDecodingNamesTheProblem) {
  const BadCase cases[] = {
      {R"({"name":"n","gpus":[{"board":"a30"}],"extra":1})", "extra: unknown field"},
      {R"({"name":"n","gpus":[{"board":"a30","migDevice":[]}]})",
       "gpus[0].migDevice: unknown field"},
      {R"({"name":"n","gpus":[{"board":"a30","migEnabled":true,
           "migDevices":[{"profile":"1g.6gb","start":0,"size":1}]}]})",
       "gpus[0].migDevices[0].size: unknown field"},
      {R"({"name":"n","gpus":[{"board":"a30","count":"2"}]})",
       "gpus[0].count: expected an integer"},
      {R"({"name":"n","gpus":[{"board":"a30","count":0}]})", "gpus[0].count: 0 is out of range"},
      {R"({"name":"n","gpus":[{"board":"a30","migEnabled":"yes"}]})",
       "gpus[0].migEnabled: expected a boolean"},
      {R"({"name":"n","gpus":[{"board":"v100"}]})", "gpus[0].board: unknown board \"v100\""},
      {R"({"name":"n","gpus":[]})", "gpus: expected a non-empty array"},
      {R"({"gpus":[{"board":"a30"}]})", "name: required field missing"},
      {R"({"name":"n"})", "gpus: required field missing"},
      {R"({"name":"n","gpus":[{"count":1}]})", "gpus[0].board: required field missing"},
      {R"({"name":"n","gpus":[{"board":"a30","count":2,"pciBusId":"0000:01:00.0"}]})",
       "pciBusId: only allowed with count 1"},
      {R"({"name":"n","gpus":[{"board":"a30","migEnabled":true,
           "migDevices":[{"profile":"1g.6gb"}]}]})",
       "gpus[0].migDevices[0].start: required field missing"},
      {R"({"name":"n",)", "invalid JSON"},
      {R"([1,2])", "profile: expected an object"},
  };
  for (const BadCase& c : cases) {
    auto profile = ParseSimulatedProfileJson(c.json);
    EXPECT_EQ(profile.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(profile.status().message(), HasSubstr(c.message)) << c.json;
  }
}

TEST(SimulatedProfile, SemanticValidation) {
  const BadCase cases[] = {
      {R"({"name":"n","gpus":[{"board":"h100-80gb",
           "migDevices":[{"profile":"1g.10gb","start":0}]}]})",
       "migEnabled is false"},
      {R"({"name":"n","gpus":[{"board":"h100-80gb","migEnabled":true,
           "migDevices":[{"profile":"1g.5gb","start":0}]}]})",
       "profile \"1g.5gb\" is not offered by h100-80gb"},
      {R"({"name":"n","gpus":[{"board":"h100-80gb","migEnabled":true,
           "migDevices":[{"profile":"2g.20gb","start":6}]}]})",
       "not valid for profile 2g.20gb"},
      {R"({"name":"n","gpus":[{"board":"h100-80gb","migEnabled":true,
           "migDevices":[{"profile":"3g.40gb","start":0},{"profile":"1g.10gb","start":2}]}]})",
       "insufficient resources"},
  };
  for (const BadCase& c : cases) {
    auto profile = ParseSimulatedProfileJson(c.json);
    ASSERT_TRUE(profile.ok()) << profile.status();
    const absl::Status status = ValidateSimulatedProfile(*profile);
    EXPECT_FALSE(status.ok()) << c.json;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.json;
  }
}

TEST(SimulatedProfile, LoadReportsUnreadableFileAndBadFile) {
  auto missing = LoadSimulatedProfile("/nonexistent/profile.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/profile.json"));

  const std::string path = ::testing::TempDir() + "/bad_profile.json";
  {
    std::ofstream out(path);
    out << R"({"name":"n","gpus":[{"board":"a30","bogus":true}]})";
  }
  auto bad = LoadSimulatedProfile(path);
  EXPECT_THAT(bad.status().message(), HasSubstr(path));
  EXPECT_THAT(bad.status().message(), HasSubstr("gpus[0].bogus: unknown field"));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace dralens::driver::discovery
