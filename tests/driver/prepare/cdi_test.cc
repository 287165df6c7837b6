#include "driver/prepare/cdi.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/driver/prepare/prepare_test_util.h"

namespace dralens::driver::prepare {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using testing::Slurp;
using testing::Spit;
using testing::TempDir;

constexpr char kUid[] = "0f6b1c1e-8a52-4d4b-9d39-2b8f3c7a9e01";

std::vector<CdiDeviceInput> GpuAndMig() {
  return {
      CdiDeviceInput{.device = "gpu-3", .gpu_minor = 3, .mig = std::nullopt},
      CdiDeviceInput{.device = "gpu-0-mig-1g10gb-19-0",
                     .gpu_minor = 0,
                     .mig = CdiDeviceInput::Mig{.gi_id = 1, .ci_id = 0}},
  };
}

// Runs tests/schema/validate_cdi.py on `path`; returns its exit status.
int ValidateWithSchema(const std::string& path) {
  std::string cmd = absl::StrCat("/usr/bin/python3 ", DRALENS_SOURCE_DIR,
                                 "/tests/schema/validate_cdi.py --schema-dir ", DRALENS_SCHEMA_DIR,
                                 " ", path, " 2>/dev/null");
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(CdiNamesTest, Names) {
  EXPECT_EQ(CdiDeviceName(kUid, "gpu-0"), absl::StrCat(kUid, "-gpu-0"));
  EXPECT_EQ(CdiDeviceId(kUid, "gpu-0"), absl::StrCat("k8s.gpu.dralens.dev/claim=", kUid, "-gpu-0"));
  EXPECT_EQ(CdiSpecFileName(kUid), absl::StrCat("k8s.gpu.dralens.dev-claim_", kUid, ".json"));
}

TEST(CdiNamesTest, RefusesPathTraversal) {
  for (const char* bad : {"", "../etc", "..", "a/b", "a/../../b", "/abs", ".hidden", "a..b", "a b",
                          "a\\b", "uid\n"}) {
    EXPECT_FALSE(ValidateClaimUid(bad).ok()) << bad;
    EXPECT_FALSE(ValidateCdiDeviceName(bad).ok()) << bad;
  }
  EXPECT_TRUE(ValidateClaimUid(kUid).ok());
  EXPECT_TRUE(ValidateCdiDeviceName("gpu-0-mig-1g10gb-19-0").ok());
  EXPECT_THAT(ValidateClaimUid("../../etc/passwd").message(), HasSubstr("claim UID"));
}

TEST(CdiSpecTest, GpuAndMigDevices) {
  CdiHostInfo host;
  host.nvidia_caps_major = 508;
  absl::StatusOr<CdiSpec> spec = BuildClaimCdiSpec(kUid, GpuAndMig(), host);
  ASSERT_TRUE(spec.ok()) << spec.status();
  json got = CdiSpecToJson(*spec);
  json want = json::parse(absl::StrCat(R"({
    "cdiVersion": "0.6.0",
    "kind": "k8s.gpu.dralens.dev/claim",
    "devices": [
      {"name": ")",
                                       kUid, R"(-gpu-3",
       "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia3"}]}},
      {"name": ")",
                                       kUid, R"(-gpu-0-mig-1g10gb-19-0",
       "containerEdits": {"deviceNodes": [
         {"path": "/dev/nvidia0"},
         {"path": "/dev/nvidia-caps/nvidia-cap12", "type": "c", "major": 508, "minor": 12,
          "fileMode": 292},
         {"path": "/dev/nvidia-caps/nvidia-cap13", "type": "c", "major": 508, "minor": 13,
          "fileMode": 292}]}}
    ],
    "containerEdits": {
      "env": ["NVIDIA_VISIBLE_DEVICES=void"],
      "deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"},
                      {"path": "/dev/nvidia-uvm-tools"}]
    }
  })"));
  EXPECT_EQ(got, want) << got.dump(2);
}

TEST(CdiSpecTest, PureAndDeduplicated) {
  std::vector<CdiDeviceInput> in = GpuAndMig();
  in.push_back(in[0]);
  absl::StatusOr<CdiSpec> a = BuildClaimCdiSpec(kUid, in, {});
  absl::StatusOr<CdiSpec> b = BuildClaimCdiSpec(kUid, in, {});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(a->devices.size(), 2u);
  // Without the caps major only the path is written; the runtime copies the host node.
  EXPECT_EQ(CdiSpecToJson(*a)["devices"][1]["containerEdits"]["deviceNodes"][1],
            json::parse(R"({"path": "/dev/nvidia-caps/nvidia-cap12"})"));
}

TEST(CdiSpecTest, RejectsUnsafeNamesAndEmpty) {
  EXPECT_FALSE(BuildClaimCdiSpec("../x", GpuAndMig(), {}).ok());
  std::vector<CdiDeviceInput> bad = {
      CdiDeviceInput{.device = "../../etc/cdi/evil", .gpu_minor = 0, .mig = std::nullopt}};
  absl::StatusOr<CdiSpec> spec = BuildClaimCdiSpec(kUid, bad, {});
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("device name"));
  EXPECT_FALSE(BuildClaimCdiSpec(kUid, {}, {}).ok());
}

TEST(CdiHostInfoTest, ParsesProcFiles) {
  const char* devices =
      "Character devices:\n  1 mem\n195 nvidia\n508 nvidia-caps\n510 nvidia-uvm\n\n"
      "Block devices:\n  8 sd\n";
  EXPECT_EQ(ParseCharDeviceMajor(devices, "nvidia-caps"), 508u);
  EXPECT_EQ(ParseCharDeviceMajor(devices, "nvidia-uvm"), 510u);
  EXPECT_EQ(ParseCharDeviceMajor(devices, "sd"), std::nullopt);
  std::map<std::string, uint32_t> minors =
      ParseMigMinors("config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi1/access 99\nbad\n");
  EXPECT_EQ(minors.at("gpu0/gi1/access"), 99u);
  CdiHostInfo host;
  host.mig_minors = minors;
  // Listed minors win; the rest follow the driver's fixed table.
  EXPECT_EQ(MigCapMinors(host, 0, 1, 0), std::make_pair(99u, 13u));
  EXPECT_EQ(MigCapMinors({}, 3, 3, 3), std::make_pair(3u + 405 + 27, 439u));
  EXPECT_EQ(MigCapMinors({}, 6, 11, 7).second, 920u);

  TempDir dir;
  Spit(dir.Join("devices"), devices);
  CdiHostInfo read = ReadCdiHostInfo(dir.Join("devices"), dir.Join("missing"));
  EXPECT_EQ(read.nvidia_caps_major, 508u);
  EXPECT_TRUE(read.mig_minors.empty());
}

TEST(FileCdiWriterTest, WriteValidateRemove) {
  TempDir dir;
  FileCdiWriter writer(dir.Join("cdi"));
  CdiHostInfo host;
  host.nvidia_caps_major = 508;
  absl::StatusOr<CdiSpec> spec = BuildClaimCdiSpec(kUid, GpuAndMig(), host);
  ASSERT_TRUE(spec.ok());
  absl::StatusOr<std::string> name = writer.Write(kUid, *spec);
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(*name, CdiSpecFileName(kUid));
  const std::string path = dir.Join("cdi/" + *name);
  EXPECT_EQ(writer.PathFor(kUid), path);
  EXPECT_EQ(json::parse(Slurp(path)), CdiSpecToJson(*spec));
  EXPECT_EQ(ValidateWithSchema(path), 0);

  ASSERT_TRUE(writer.Remove(kUid).ok());
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(writer.Remove(kUid).ok());  // idempotent
}

TEST(FileCdiWriterTest, SchemaRejectsABrokenSpec) {
  TempDir dir;
  json broken = CdiSpecToJson(*BuildClaimCdiSpec(kUid, GpuAndMig(), {}));
  broken["devices"][0].erase("containerEdits");
  broken["devices"][1]["containerEdits"]["deviceNodes"][0].erase("path");
  Spit(dir.Join("broken.json"), broken.dump());
  EXPECT_EQ(ValidateWithSchema(dir.Join("broken.json")), 1);
}

TEST(FileCdiWriterTest, RefusesTraversalBeforeTouchingDisk) {
  TempDir dir;
  FileCdiWriter writer(dir.Join("cdi"));
  absl::StatusOr<std::string> written = writer.Write("../escape", CdiSpec{});
  ASSERT_FALSE(written.ok());
  EXPECT_THAT(written.status().message(), HasSubstr("claim UID"));
  EXPECT_FALSE(writer.Remove("../../x").ok());
  EXPECT_FALSE(std::filesystem::exists(dir.Join("escape")));
  EXPECT_FALSE(std::filesystem::exists(dir.Join("k8s.gpu.dralens.dev-claim_..")));
}

}  // namespace
}  // namespace dralens::driver::prepare
