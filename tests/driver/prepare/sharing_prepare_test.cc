// Sharing in the preparer: opaque configs decide how a device is shared, the SharingPlanner's
// decision is recorded in the checkpoint and applied (time slice, MPS daemon and its CDI
// edits), consumable-capacity shares coexist within the device's memory, and every refusal or
// failure leaves nothing behind.
#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/discovery/simulated/simulated_device_source.h"
#include "driver/discovery/simulated/simulated_profile.h"
#include "driver/prepare/claim_preparer.h"
#include "driver/sharing/mps.h"
#include "driver/slices/slice_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/telemetry/exemplar.h"
#include "tests/driver/prepare/prepare_test_util.h"

namespace dralens::driver::prepare {
namespace {

using nlohmann::json;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using testing::Slurp;

constexpr char kDriver[] = "gpu.dralens.dev";
constexpr char kNode[] = "node-s";
constexpr char kNs[] = "ml";

// Two whole H100s (gpu-0, gpu-1) and one in MIG mode with a 3g.40gb device.
constexpr char kProfile[] = R"({
  "name": "sharing-test",
  "gpus": [
    {"board": "h100-80gb", "count": 2},
    {"board": "h100-80gb", "migEnabled": true, "migDevices": [{"profile": "3g.40gb", "start": 0}]}
  ]
})";

json TimeSlicing(const std::string& interval) {
  return {
      {"apiVersion", "resource.dralens.dev/v1beta1"},
      {"kind", "GpuConfig"},
      {"sharing", {{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", interval}}}}}};
}

json Mps(int threads, const std::string& pinned) {
  return {{"apiVersion", "resource.dralens.dev/v1beta1"},
          {"kind", "GpuConfig"},
          {"sharing",
           {{"strategy", "MPS"},
            {"mpsConfig",
             {{"defaultActiveThreadPercentage", threads},
              {"defaultPinnedDeviceMemoryLimit", pinned}}}}}};
}

// One allocation result of a test claim.
struct Alloc {
  std::string device;
  std::optional<std::string> share_id = std::nullopt;
  std::optional<std::string> memory = std::nullopt;  // consumedCapacity["memory"]
};

class SharingPrepareTest : public ::testing::Test {
 protected:
  SharingPrepareTest() : h_(testing::Options(kNode, kProfile)), inventory_(h_.inventory()) {}

  void Restart() { h_.Restart(); }

  // Creates claim `name` with one request "gpu" allocated `allocs`, and `config` unless null:
  // opaque parameters for our driver (FromClaim), or an array taken as the whole config list.
  ClaimRef MakeClaim(const std::string& name, const std::vector<Alloc>& allocs,
                     const json& config = nullptr) {
    json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"name", name}, {"namespace", kNs}}}};
    claim["spec"]["devices"]["requests"] = json::array({{{"name", "gpu"},
                                                         {"exactly",
                                                          {{"deviceClassName", "gpu.dralens.dev"},
                                                           {"allocationMode", "ExactCount"},
                                                           {"count", allocs.size()}}}}});
    auto created = h_.client().Create(k8s::kResourceClaims, kNs, claim);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) {
      return {};
    }
    json results = json::array();
    for (const Alloc& a : allocs) {
      json r = {{"request", "gpu"}, {"driver", kDriver}, {"pool", kNode}, {"device", a.device}};
      if (a.share_id.has_value()) {
        r["shareID"] = *a.share_id;
      }
      if (a.memory.has_value()) {
        r["consumedCapacity"] = {{"memory", *a.memory}};
      }
      results.push_back(r);
    }
    json obj = *created;
    obj["status"]["allocation"]["devices"]["results"] = results;
    if (config.is_array()) {
      obj["status"]["allocation"]["devices"]["config"] = config;
    } else if (!config.is_null()) {
      obj["status"]["allocation"]["devices"]["config"] =
          json::array({{{"source", "FromClaim"},
                        {"requests", json::array({"gpu"})},
                        {"opaque", {{"driver", kDriver}, {"parameters", config}}}}});
    }
    auto updated = h_.client().Update(k8s::kResourceClaims, kNs, obj, "status");
    EXPECT_TRUE(updated.ok()) << updated.status();
    return {kNs, (*created)["metadata"]["uid"].get<std::string>(), name};
  }

  PrepareResult Prepare(const ClaimRef& ref) { return h_.PrepareOne(ref); }
  std::string Unprepare(const ClaimRef& ref) { return h_.UnprepareOne(ref); }

  std::string Uuid(const std::string& device) {
    for (const model::GpuInfo& g : inventory_.gpus()) {
      if (absl::StrCat("gpu-", g.minor) == device) {
        return g.uuid;
      }
    }
    ADD_FAILURE() << "no device " << device;
    return "";
  }

  json Spec(const std::string& uid) { return json::parse(Slurp(h_.SpecPath(uid))); }

  // dralens_sharing_decisions_total{strategy, result, reason}.
  double Decisions(const std::string& strategy, const std::string& result,
                   const std::string& reason) {
    return testing::SeriesValue(h_.registry(), "dralens_sharing_decisions_total",
                                {{"strategy", strategy}, {"result", result}, {"reason", reason}})
        .value_or(0);
  }

  // dralens_node_claims_total{operation="prepare", result="error", reason}.
  double PrepareErrors(const std::string& reason) {
    return testing::SeriesValue(h_.registry(), "dralens_node_claims_total",
                                {{"operation", "prepare"}, {"result", "error"}, {"reason", reason}})
        .value_or(0);
  }

  testing::PrepareHarness h_;
  const model::Inventory inventory_;
  discovery::SimulatedDeviceSource* source_ = &h_.source();
  sharing::SimulatedMpsControl& mps_ = h_.mps();
};

TEST_F(SharingPrepareTest, TimeSlicedClaimsShareAGpuAndTheLastOneResetsTheInterval) {
  const std::string uuid = Uuid("gpu-0");
  ClaimRef a = MakeClaim("ts-a", {{"gpu-0"}}, TimeSlicing("Long"));
  ClaimRef b = MakeClaim("ts-b", {{"gpu-0"}}, TimeSlicing("Long"));
  ASSERT_EQ(Prepare(a).error, "");
  EXPECT_EQ(source_->TimeSliceForTest(uuid), discovery::TimeSlice::kLong);
  ASSERT_EQ(Prepare(b).error, "");
  EXPECT_EQ(Decisions("time_slicing", "granted", "none"), 2);

  // The decision is in the checkpoint, so it survives a restart and binds later claims.
  Restart();
  Checkpoint cp = h_.checkpoint();
  ASSERT_TRUE(cp.claims.at(a.uid).devices.at(0).sharing.has_value());
  EXPECT_EQ(cp.claims.at(a.uid).devices.at(0).sharing->strategy,
            sharing::SharingStrategy::kTimeSlicing);
  EXPECT_EQ(cp.claims.at(a.uid).devices.at(0).sharing->config.interval,
            discovery::TimeSlice::kLong);

  // A GPU has one interval: another one is refused rather than changed under the holders.
  ClaimRef c = MakeClaim("ts-c", {{"gpu-0"}}, TimeSlicing("Short"));
  PrepareResult refused = Prepare(c);
  EXPECT_THAT(refused.error, HasSubstr("interval Long"));
  EXPECT_THAT(refused.error, HasSubstr("ml/ts-a"));
  EXPECT_EQ(Decisions("time_slicing", "refused", "mixed_strategy"), 1);
  EXPECT_EQ(source_->TimeSliceForTest(uuid), discovery::TimeSlice::kLong);

  // The first holder leaves: the other still time-slices, so the interval stays.
  ASSERT_EQ(Unprepare(a), "");
  EXPECT_EQ(source_->TimeSliceForTest(uuid), discovery::TimeSlice::kLong);
  ASSERT_EQ(Unprepare(b), "");
  EXPECT_EQ(source_->TimeSliceForTest(uuid), discovery::TimeSlice::kDefault);
}

TEST_F(SharingPrepareTest, AnExclusiveClaimIsRefusedAnOccupiedDeviceAndNamesTheHolder) {
  ClaimRef a = MakeClaim("ts", {{"gpu-1"}}, TimeSlicing("Medium"));
  ClaimRef b = MakeClaim("whole", {{"gpu-1"}});
  ASSERT_EQ(Prepare(a).error, "");
  PrepareResult r = Prepare(b);
  EXPECT_THAT(r.error, HasSubstr("ml/ts"));
  EXPECT_THAT(r.error, HasSubstr("asks for exclusive use"));
  EXPECT_EQ(Decisions("exclusive", "refused", "device_busy"), 1);
  EXPECT_EQ(PrepareErrors("device_busy"), 1);
  EXPECT_FALSE(std::filesystem::exists(h_.dir().Join("cdi/" + CdiSpecFileName(b.uid))));
  EXPECT_EQ(h_.checkpoint().claims.count(b.uid), 0u);
}

TEST_F(SharingPrepareTest, MpsStartsOneDaemonAndItsClientsGetEnvironmentAndMounts) {
  const std::string uuid = Uuid("gpu-0");
  ClaimRef a = MakeClaim("mps-a", {{"gpu-0"}}, Mps(50, "10Gi"));
  ClaimRef b = MakeClaim("mps-b", {{"gpu-0"}}, Mps(50, "10Gi"));
  ASSERT_EQ(Prepare(a).error, "");
  ASSERT_EQ(Prepare(b).error, "");
  EXPECT_EQ(Decisions("mps", "granted", "none"), 2);

  // One daemon, started once with the claim's limits and the first claim's directories.
  std::optional<sharing::MpsDaemonSettings> running = mps_.Running(uuid);
  ASSERT_TRUE(running.has_value());
  EXPECT_EQ(running->active_thread_percentage, 50);
  EXPECT_EQ(running->pinned_memory_limit_mib, 10 * 1024);
  const std::string pipe = h_.dir().Join(absl::StrCat("mps/", a.uid, "/pipe"));
  EXPECT_EQ(running->paths.pipe_dir, pipe);
  EXPECT_TRUE(std::filesystem::is_directory(pipe));
  EXPECT_TRUE(std::filesystem::is_directory(h_.dir().Join(absl::StrCat("mps/", a.uid, "/log"))));

  // Both claims' CDI devices carry the client environment and the daemon's directories.
  for (const ClaimRef& ref : {a, b}) {
    json device = Spec(ref.uid)["devices"][0]["containerEdits"];
    EXPECT_THAT(device["env"], Contains("CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"));
    EXPECT_THAT(device["env"], Contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"));
    EXPECT_THAT(device["env"], Contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M"));
    ASSERT_TRUE(device.contains("mounts")) << device.dump();
    EXPECT_EQ(device["mounts"][0]["hostPath"], pipe);
    EXPECT_EQ(device["mounts"][0]["containerPath"], "/tmp/nvidia-mps");
  }
  // The spec with mounts is still valid CDI.
  const std::string validate = absl::StrCat(
      "/usr/bin/python3 ", DRALENS_SOURCE_DIR, "/tests/schema/validate_cdi.py --schema-dir ",
      DRALENS_SCHEMA_DIR, " ", h_.dir().Join("cdi/" + CdiSpecFileName(a.uid)));
  EXPECT_EQ(std::system(validate.c_str()), 0);

  // Other MPS settings cannot join the running daemon.
  ClaimRef c = MakeClaim("mps-c", {{"gpu-0"}}, Mps(25, "10Gi"));
  EXPECT_THAT(Prepare(c).error, HasSubstr("one MPS control daemon serves a device"));
  EXPECT_EQ(Decisions("mps", "refused", "mixed_strategy"), 1);

  // The owner leaves first: the daemon keeps serving the other claim from the same pipe.
  ASSERT_EQ(Unprepare(a), "");
  EXPECT_TRUE(mps_.Running(uuid).has_value());
  EXPECT_TRUE(std::filesystem::is_directory(pipe));
  ASSERT_EQ(Unprepare(b), "");
  EXPECT_FALSE(mps_.Running(uuid).has_value());
  EXPECT_FALSE(std::filesystem::exists(h_.dir().Join(absl::StrCat("mps/", a.uid))));
}

TEST_F(SharingPrepareTest, AFailedMpsStartRollsBackAndCountsAnApplyError) {
  mps_.FailNextStartForTest(absl::UnavailableError("nvidia-cuda-mps-control did not start"));
  ClaimRef a = MakeClaim("mps", {{"gpu-1"}}, Mps(30, "1Gi"));
  PrepareResult r = Prepare(a);
  EXPECT_THAT(r.error, HasSubstr("did not start"));
  EXPECT_EQ(PrepareErrors("sharing_error"), 1);
  EXPECT_EQ(Decisions("mps", "refused", "apply_error"), 1);
  EXPECT_EQ(Decisions("mps", "granted", "none"), 0);
  EXPECT_EQ(h_.checkpoint().claims.count(a.uid), 0u);
  EXPECT_THAT(testing::ListDir(h_.dir().Join("cdi")), IsEmpty());
  EXPECT_FALSE(std::filesystem::exists(h_.dir().Join(absl::StrCat("mps/", a.uid))));
  // The retry succeeds.
  EXPECT_EQ(Prepare(a).error, "");
}

TEST_F(SharingPrepareTest, ConsumableSharesCoexistWithinTheGpusMemory) {
  ClaimRef a = MakeClaim("share-a", {{"gpu-1", "4f5c6a0e-0000-4000-8000-000000000001", "30Gi"}});
  ClaimRef b = MakeClaim("share-b", {{"gpu-1", "4f5c6a0e-0000-4000-8000-000000000002", "30Gi"}});
  PrepareResult ra = Prepare(a);
  PrepareResult rb = Prepare(b);
  ASSERT_EQ(ra.error, "");
  ASSERT_EQ(rb.error, "");
  // shareID is echoed to the kubelet (v1 Device.share_id).
  ASSERT_THAT(ra.devices, SizeIs(1));
  EXPECT_EQ(ra.devices[0].share_id, "4f5c6a0e-0000-4000-8000-000000000001");
  EXPECT_EQ(rb.devices[0].share_id, "4f5c6a0e-0000-4000-8000-000000000002");
  EXPECT_EQ(Decisions("consumable", "granted", "none"), 2);

  // A third 30Gi does not fit an 80 GB H100 next to the first two.
  ClaimRef c = MakeClaim("share-c", {{"gpu-1", "4f5c6a0e-0000-4000-8000-000000000003", "30Gi"}});
  EXPECT_THAT(Prepare(c).error, HasSubstr("would consume 90Gi"));
  EXPECT_EQ(Decisions("consumable", "refused", "over_capacity"), 1);
  // An exclusive claim cannot join shares either.
  ClaimRef d = MakeClaim("whole", {{"gpu-1"}});
  EXPECT_THAT(Prepare(d).error, HasSubstr("consumable capacity"));

  // Once one share leaves, the third fits.
  ASSERT_EQ(Unprepare(a), "");
  EXPECT_EQ(Prepare(c).error, "");
}

TEST_F(SharingPrepareTest, OneClaimWithTwoSharesOfOneGpu) {
  ClaimRef a = MakeClaim("two-shares", {{"gpu-0", "4f5c6a0e-0000-4000-8000-00000000000a", "10Gi"},
                                        {"gpu-0", "4f5c6a0e-0000-4000-8000-00000000000b", "10Gi"}});
  PrepareResult r = Prepare(a);
  ASSERT_EQ(r.error, "");
  EXPECT_THAT(r.devices, SizeIs(2));
  EXPECT_EQ(Decisions("consumable", "granted", "none"), 2);
  EXPECT_THAT(Spec(a.uid)["devices"], SizeIs(1));  // one CDI device for the GPU
  EXPECT_EQ(Unprepare(a), "");
}

TEST_F(SharingPrepareTest, ASharedClaimIsPreparedOnceForAllItsPods) {
  ClaimRef a = MakeClaim("shared", {{"gpu-0"}});
  ASSERT_EQ(Prepare(a).error, "");
  const std::string spec = Slurp(h_.dir().Join("cdi/" + CdiSpecFileName(a.uid)));
  // The second pod's prepare reuses the prepared devices.
  PrepareResult again = Prepare(a);
  ASSERT_EQ(again.error, "");
  EXPECT_EQ(again.devices[0].cdi_device_ids[0],
            absl::StrCat("k8s.gpu.dralens.dev/claim=", a.uid, "-gpu-0"));
  EXPECT_EQ(Decisions("exclusive", "granted", "none"), 1);
  EXPECT_EQ(Decisions("shared_claim", "granted", "none"), 1);
  EXPECT_EQ(Slurp(h_.dir().Join("cdi/" + CdiSpecFileName(a.uid))), spec);
  ASSERT_EQ(Unprepare(a), "");
  EXPECT_THAT(testing::ListDir(h_.dir().Join("cdi")), IsEmpty());
}

TEST_F(SharingPrepareTest, ABadConfigFailsTheClaimNamingTheFieldAndRecordsNothing) {
  json bad = Mps(50, "10Gi");
  bad["sharing"]["mpsConfig"]["maxClients"] = 4;
  ClaimRef a = MakeClaim("bad", {{"gpu-0"}}, bad);
  PrepareResult r = Prepare(a);
  EXPECT_THAT(r.error, HasSubstr("sharing.mpsConfig.maxClients: unknown field"));
  EXPECT_EQ(PrepareErrors("invalid_config"), 1);
  EXPECT_EQ(h_.checkpoint().claims.count(a.uid), 0u);
  EXPECT_FALSE(mps_.Running(Uuid("gpu-0")).has_value());

  // A GpuConfig named for a MIG device's request does not apply to it.
  ASSERT_THAT(inventory_.mig_devices(), SizeIs(1));
  ClaimRef m =
      MakeClaim("mig", {{slices::MigDeviceName(inventory_.mig_devices()[0])}}, TimeSlicing("Long"));
  EXPECT_THAT(Prepare(m).error, HasSubstr("GpuConfig cannot apply to mig device"));
}

TEST_F(SharingPrepareTest, ConfigsForOtherDriversAreSkipped) {
  const json configs = json::parse(R"([{"source": "FromClass", "opaque": {
      "driver": "gpu.nvidia.com", "parameters": {"anything": true}}}])");
  ClaimRef a = MakeClaim("other", {{"gpu-0"}}, configs);
  EXPECT_EQ(Prepare(a).error, "");
  EXPECT_EQ(Decisions("exclusive", "granted", "none"), 1);
}

// A kill -9 or a GPU reset takes the daemons and the time slice with it: the restarted node
// applies the restored claims' settings again, and counts it.
TEST_F(SharingPrepareTest, ARestartAppliesTheSharingOfRestoredClaimsAgain) {
  const std::string ts_gpu = Uuid("gpu-0");
  const std::string mps_gpu = Uuid("gpu-1");
  ClaimRef ts = MakeClaim("ts", {{"gpu-0"}}, TimeSlicing("Long"));
  ClaimRef mps_a = MakeClaim("mps-a", {{"gpu-1"}}, Mps(40, "2Gi"));
  ClaimRef mps_b = MakeClaim("mps-b", {{"gpu-1"}}, Mps(40, "2Gi"));
  ClaimRef exclusive = MakeClaim("whole", {{"gpu-0"}});  // refused: gpu-0 is time-sliced
  for (const ClaimRef& ref : {ts, mps_a, mps_b}) {
    ASSERT_EQ(Prepare(ref).error, "") << ref.name;
  }
  ASSERT_NE(Prepare(exclusive).error, "");
  const std::optional<sharing::MpsDaemonSettings> daemon = mps_.Running(mps_gpu);
  ASSERT_TRUE(daemon.has_value());

  // What a crash leaves: the daemon is gone, the GPU's interval is back to its default.
  ASSERT_TRUE(source_->SetTimeSlice(ts_gpu, discovery::TimeSlice::kDefault).ok());
  ASSERT_TRUE(mps_.Stop(mps_gpu).ok());
  std::filesystem::remove_all(h_.dir().Join(absl::StrCat("mps/", mps_a.uid)));

  Restart();
  EXPECT_EQ(source_->TimeSliceForTest(ts_gpu), discovery::TimeSlice::kLong);
  EXPECT_EQ(mps_.Running(mps_gpu), daemon);
  EXPECT_TRUE(std::filesystem::is_directory(daemon->paths.pipe_dir));
  EXPECT_EQ(testing::SeriesValue(h_.registry(), "dralens_sharing_restores_total",
                                 {{"strategy", "time_slicing"}, {"result", "ok"}}),
            1);
  EXPECT_EQ(testing::SeriesValue(h_.registry(), "dralens_sharing_restores_total",
                                 {{"strategy", "mps"}, {"result", "ok"}}),
            2);

  // Settings still in force are left as they are (idempotent), and the claims unprepare as usual.
  Restart();
  EXPECT_EQ(mps_.Running(mps_gpu), daemon);
  ASSERT_EQ(Unprepare(mps_a), "");
  ASSERT_EQ(Unprepare(mps_b), "");
  EXPECT_FALSE(mps_.Running(mps_gpu).has_value());
  ASSERT_EQ(Unprepare(ts), "");
  EXPECT_EQ(source_->TimeSliceForTest(ts_gpu), discovery::TimeSlice::kDefault);

  // A failing re-apply is counted and does not stop the start.
  ClaimRef again = MakeClaim("ts-again", {{"gpu-0"}}, TimeSlicing("Short"));
  ASSERT_EQ(Prepare(again).error, "");
  source_->FailNextCalls(discovery::SimulatedOp::kSetTimeSlice, 1,
                         absl::InternalError("NVML_ERROR_UNKNOWN"));
  Restart();
  EXPECT_EQ(testing::SeriesValue(h_.registry(), "dralens_sharing_restores_total",
                                 {{"strategy", "time_slicing"}, {"result", "error"}}),
            1);
  EXPECT_EQ(h_.checkpoint().claims.count(again.uid), 1u);
}

}  // namespace
}  // namespace dralens::driver::prepare
