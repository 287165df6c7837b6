// ResourceClaim status.devices: our entries appear when a claim is prepared (without the
// kubelet's answer waiting for them), validate against the official OpenAPI document, leave
// other drivers' entries alone, and go when the claim is unprepared; an API server that drops
// the field is tolerated.
#include "driver/prepare/claim_status.h"

#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/driver/prepare/prepare_test_util.h"
#include "tests/testing/eventually.h"

namespace dralens::driver::prepare {
namespace {

using nlohmann::json;
using ::testing::SizeIs;

constexpr char kDriver[] = "gpu.dralens.dev";
constexpr char kNode[] = "node-a";
constexpr char kNs[] = "ml";
constexpr char kPython[] = "/usr/bin/python3";

// `validate_openapi.py` over `object` as `schema`: "" when valid, else its complaints.
std::string OpenApiProblems(const std::string& schema, const json& object) {
  const std::string openapi =
      absl::StrCat(DRALENS_SCHEMA_DIR, "/k8s-resource.k8s.io-v1-openapi.json");
  testing::TempDir dir;
  const std::string path = dir.Join("object.json");
  std::ofstream(path) << object.dump(2);
  const std::string command =
      absl::StrCat(kPython, " '", DRALENS_SOURCE_DIR, "/tests/schema/validate_openapi.py' ",
                   "--openapi '", openapi, "' ", schema, " '", path, "' 2>&1");
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return "popen failed";
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) {
    out.append(buf, n);
  }
  const int status = ::pclose(pipe);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "" : (out.empty() ? "failed" : out);
}

CheckpointClaim Prepared(std::vector<CheckpointDevice> devices) {
  CheckpointClaim c;
  c.state = ClaimState::kPrepareCompleted;
  c.namespace_name = kNs;
  c.name = "train";
  c.devices = std::move(devices);
  return c;
}

CheckpointDevice Device(const std::string& name, model::DeviceType type, const std::string& uuid) {
  return CheckpointDevice{.request_names = {"gpu"},
                          .pool = kNode,
                          .device = name,
                          .cdi_device_ids = {},
                          .share_id = std::nullopt,
                          .type = type,
                          .uuid = uuid};
}

TEST(DeviceStatusEntriesTest, OneReadyEntryPerDeviceWithUuidProfileAndStrategy) {
  CheckpointDevice gpu = Device("gpu-1", model::DeviceType::kGpu, "GPU-1");
  CheckpointDevice::Sharing time_sliced;
  time_sliced.strategy = sharing::SharingStrategy::kTimeSlicing;
  gpu.sharing = time_sliced;
  CheckpointDevice mig = Device("gpu-0-mig-1g10gb-19-0", model::DeviceType::kMig, "MIG-0");
  DeviceIndex owned;
  OwnedDevice owned_mig;
  owned_mig.name = "gpu-0-mig-1g10gb-19-0";
  owned_mig.type = model::DeviceType::kMig;
  owned_mig.uuid = "MIG-0";
  owned_mig.mig_profile = "1g.10gb";
  owned[owned_mig.name] = owned_mig;
  const absl::Time now = absl::FromUnixSeconds(1764064800);  // 2025-11-25T10:00:00Z
  json entries = DeviceStatusEntries(Prepared({gpu, mig}), owned, kDriver, kNode, 3, now);
  ASSERT_THAT(entries, SizeIs(2));
  EXPECT_EQ(entries[0]["driver"], kDriver);
  EXPECT_EQ(entries[0]["pool"], kNode);
  EXPECT_EQ(entries[0]["device"], "gpu-1");
  EXPECT_EQ(entries[0]["data"], json({{"uuid", "GPU-1"}, {"sharingStrategy", "time_slicing"}}));
  const json& ready = entries[0]["conditions"][0];
  EXPECT_EQ(ready["type"], "Ready");
  EXPECT_EQ(ready["status"], "True");
  EXPECT_EQ(ready["reason"], "Prepared");
  EXPECT_EQ(ready["observedGeneration"], 3);
  EXPECT_EQ(ready["lastTransitionTime"], "2025-11-25T10:00:00Z");
  EXPECT_EQ(entries[1]["data"],
            json({{"uuid", "MIG-0"}, {"migProfile", "1g.10gb"}, {"sharingStrategy", "exclusive"}}));
  EXPECT_FALSE(entries[1].contains("shareID"));
}

TEST(MergeDeviceStatusTest, OnlyOurDriverAndPoolAreReplaced) {
  const json theirs = {{"driver", "net.example.com"}, {"pool", kNode}, {"device", "eth0"}};
  const json other_pool = {{"driver", kDriver}, {"pool", "node-b"}, {"device", "gpu-0"}};
  const json stale = {{"driver", kDriver}, {"pool", kNode}, {"device", "gpu-9"}};
  const json ours = {{"driver", kDriver}, {"pool", kNode}, {"device", "gpu-1"}};
  EXPECT_EQ(MergeDeviceStatus(json::array({theirs, stale, other_pool}), kDriver, kNode,
                              json::array({ours})),
            json::array({theirs, other_pool, ours}));
  EXPECT_EQ(MergeDeviceStatus(json::array({theirs, ours}), kDriver, kNode, json::array()),
            json::array({theirs}));
  EXPECT_EQ(MergeDeviceStatus(nullptr, kDriver, kNode, json::array({ours})), json::array({ours}));
}

class ClaimStatusTest : public ::testing::Test {
 protected:
  ClaimStatusTest()
      : h_(testing::Options(kNode, "", /*dynamic_mig=*/false, /*claim_status=*/true)) {}

  json Claim(const ClaimRef& ref) {
    auto got = h_.client().Get(k8s::kResourceClaims, kNs, ref.name);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : json();
  }
  json Devices(const ClaimRef& ref) {
    json claim = Claim(ref);
    return claim.value("/status/devices"_json_pointer, json::array());
  }
  double Writes(const std::string& operation, const std::string& result) {
    return h_
        .Series("dralens_node_claim_status_writes_total",
                {{"operation", operation}, {"result", result}})
        .value_or(-1);
  }
  bool Flush() { return h_.preparation().FlushStatusForTest(absl::Seconds(30)); }

  testing::PrepareHarness h_;
};

TEST_F(ClaimStatusTest, EntriesAppearOnPrepareValidateAndGoOnUnprepare) {
  ClaimRef ref =
      testing::CreateClaim(h_.client(), kNs, "train", "gpu", kDriver, kDriver, kNode, "gpu-2");
  // Another driver's entry on the same claim (its device in the allocation too).
  json claim = Claim(ref);
  claim["status"]["allocation"]["devices"]["results"].push_back(
      {{"request", "gpu"}, {"driver", "net.example.com"}, {"pool", kNode}, {"device", "eth0"}});
  claim["status"]["devices"] = json::array({{{"driver", "net.example.com"},
                                             {"pool", kNode},
                                             {"device", "eth0"},
                                             {"data", {{"ip", "10.0.0.2"}}}}});
  ASSERT_TRUE(h_.client().Update(k8s::kResourceClaims, kNs, claim, "status").ok());

  const int gets = h_.client().Calls("get", "resourceclaims");
  ASSERT_EQ(h_.PrepareOne(ref).error, "");
  ASSERT_TRUE(Flush());
  // The claim the preparer fetched was written back: no GET besides the preparer's.
  EXPECT_EQ(h_.client().Calls("get", "resourceclaims"), gets + 1);
  EXPECT_EQ(h_.client().Calls("update", "resourceclaims/status"), 3);  // allocation, theirs, ours
  json devices = Devices(ref);
  ASSERT_THAT(devices, SizeIs(2)) << devices.dump();
  EXPECT_EQ(devices[0]["driver"], "net.example.com");
  EXPECT_EQ(devices[1]["device"], "gpu-2");
  EXPECT_EQ(devices[1]["conditions"][0]["type"], "Ready");
  EXPECT_EQ(devices[1]["data"]["uuid"], h_.inventory().FindGpuByMinor(2)->uuid);
  EXPECT_EQ(Writes("publish", "ok"), 1);
  // The whole claim, our entry included, is a valid resource.k8s.io/v1 ResourceClaim.
  EXPECT_EQ(OpenApiProblems("io.k8s.api.resource.v1.ResourceClaim", Claim(ref)), "");

  ASSERT_EQ(h_.UnprepareOne(ref), "");
  ASSERT_TRUE(Flush());
  devices = Devices(ref);
  ASSERT_THAT(devices, SizeIs(1)) << devices.dump();
  EXPECT_EQ(devices[0]["driver"], "net.example.com");
  EXPECT_EQ(Writes("clear", "ok"), 1);
}

TEST_F(ClaimStatusTest, AConflictReadsTheClaimAgainAndWrites) {
  ClaimRef ref =
      testing::CreateClaim(h_.client(), kNs, "busy", "gpu", kDriver, kDriver, kNode, "gpu-3");
  // Someone writes the claim between our GET and our PUT: the first PUT conflicts.
  h_.client().FailNext(
      "update", "resourceclaims/status",
      k8s::StatusFromHttp(409, R"({"kind":"Status","reason":"Conflict"})", "", ""));
  ASSERT_EQ(h_.PrepareOne(ref).error, "");
  ASSERT_TRUE(Flush());
  ASSERT_THAT(Devices(ref), SizeIs(1));
  EXPECT_EQ(Writes("publish", "ok"), 1);
  EXPECT_EQ(h_.client().Calls("update", "resourceclaims/status"), 3);  // allocation, 409, ours
}

TEST_F(ClaimStatusTest, AServerThatDropsTheFieldIsToleratedAndCounted) {
  h_.client().SetDropClaimDeviceStatus(true);
  testing::LogCapture logs;
  ClaimRef a = testing::CreateClaim(h_.client(), kNs, "a", "gpu", kDriver, kDriver, kNode, "gpu-4");
  ClaimRef b = testing::CreateClaim(h_.client(), kNs, "b", "gpu", kDriver, kDriver, kNode, "gpu-5");
  ASSERT_EQ(h_.PrepareOne(a).error, "");
  ASSERT_EQ(h_.PrepareOne(b).error, "");
  ASSERT_TRUE(Flush());
  EXPECT_THAT(Devices(a), SizeIs(0));
  EXPECT_EQ(Writes("publish", "dropped"), 2);
  EXPECT_EQ(Writes("publish", "error"), 0);
  EXPECT_TRUE(logs.Contains("stored no status.devices"));
  // Claims work as before.
  EXPECT_EQ(h_.UnprepareOne(a), "");
  ASSERT_TRUE(Flush());
  EXPECT_EQ(Writes("clear", "ok"), 1);  // nothing of ours to remove
}

TEST_F(ClaimStatusTest, AClaimDeletedBeforeTheWriteIsGone) {
  ClaimRef ref =
      testing::CreateClaim(h_.client(), kNs, "short", "gpu", kDriver, kDriver, kNode, "gpu-6");
  h_.client().FailNext(
      "update", "resourceclaims/status",
      k8s::StatusFromHttp(404, R"({"kind":"Status","reason":"NotFound"})", "", ""));
  ASSERT_EQ(h_.PrepareOne(ref).error, "");
  ASSERT_TRUE(Flush());
  EXPECT_EQ(Writes("publish", "gone"), 1);
}

TEST_F(ClaimStatusTest, TransientErrorsAreRetriedThenGivenUp) {
  ClaimRef ref =
      testing::CreateClaim(h_.client(), kNs, "flaky", "gpu", kDriver, kDriver, kNode, "gpu-7");
  h_.client().FailNext("update", "resourceclaims/status", k8s::StatusFromHttp(503, "", "", ""),
                       /*times=*/2);
  ASSERT_EQ(h_.PrepareOne(ref).error, "");
  ASSERT_TRUE(Flush());
  EXPECT_EQ(Writes("publish", "ok"), 1);
  ASSERT_THAT(Devices(ref), SizeIs(1));

  // Down for longer than the writer tries: given up, counted, the claim still prepared.
  ClaimRef down =
      testing::CreateClaim(h_.client(), kNs, "down", "gpu", kDriver, kDriver, kNode, "gpu-1");
  h_.client().FailNext("update", "resourceclaims/status", k8s::StatusFromHttp(503, "", "", ""),
                       /*times=*/100);
  ASSERT_EQ(h_.PrepareOne(down).error, "");
  ASSERT_TRUE(Flush());
  EXPECT_EQ(Writes("publish", "error"), 1);
  EXPECT_EQ(h_.checkpoint().claims.at(down.uid).state, ClaimState::kPrepareCompleted);
}

}  // namespace
}  // namespace dralens::driver::prepare
