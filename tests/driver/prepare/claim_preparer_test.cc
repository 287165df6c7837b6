#include "driver/prepare/claim_preparer.h"

#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "driver/discovery/simulated/simulated_device_source.h"
#include "driver/discovery/simulated/simulated_profile.h"
#include "driver/prepare/crash_points.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/common/clock.h"
#include "src/k8s/client.h"
#include "tests/driver/prepare/prepare_test_util.h"

namespace dralens::driver::prepare {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using testing::Slurp;

constexpr char kDriver[] = "gpu.dralens.dev";
constexpr char kNode[] = "node-a";
constexpr char kNs[] = "ml";

// GPU 0 in MIG mode with one 1g.10gb device (gpu-0-mig-1g10gb-19-0); GPUs 1..16 whole.
constexpr char kProfile[] = R"({
  "name": "prepare-test",
  "gpus": [
    {"board": "h100-80gb", "migEnabled": true, "migDevices": [{"profile": "1g.10gb", "start": 0}]},
    {"board": "h100-80gb", "count": 16}
  ]
})";

struct Result {
  std::string request;  // "gpu" or "gpu/sub"
  std::string device;
  std::string driver = kDriver;
  std::string pool = kNode;
};

class ClaimPreparerTest : public ::testing::Test {
 protected:
  ClaimPreparerTest() : h_(testing::Options(kNode, kProfile)) {}

  void Restart(const std::string& boot_id = "boot-1") { h_.Restart(boot_id); }

  // Creates a claim and, unless `results` is empty, allocates it. Returns its ref.
  ClaimRef MakeClaim(const std::string& name, const std::vector<Result>& results,
                     bool allocate = true) {
    json requests = json::array();
    std::set<std::string> seen;
    for (const Result& r : results) {
      std::vector<std::string> parts = absl::StrSplit(r.request, '/');
      if (!seen.insert(parts[0]).second) {
        continue;
      }
      if (parts.size() == 2) {
        requests.push_back(
            {{"name", parts[0]},
             {"firstAvailable", {{{"name", parts[1]}, {"deviceClassName", "gpu.dralens.dev"}}}}});
      } else {
        requests.push_back(
            {{"name", parts[0]}, {"exactly", {{"deviceClassName", "gpu.dralens.dev"}}}});
      }
    }
    json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"name", name}, {"namespace", kNs}}},
                  {"spec", {{"devices", {{"requests", requests}}}}}};
    auto created = h_.client().Create(k8s::kResourceClaims, kNs, claim);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) {
      return {};
    }
    if (allocate) {
      json out = json::array();
      for (const Result& r : results) {
        out.push_back(
            {{"request", r.request}, {"driver", r.driver}, {"pool", r.pool}, {"device", r.device}});
      }
      json obj = *created;
      obj["status"] = {{"allocation", {{"devices", {{"results", out}}}}}};
      auto updated = h_.client().Update(k8s::kResourceClaims, kNs, obj, "status");
      EXPECT_TRUE(updated.ok()) << updated.status();
    }
    return ClaimRef{kNs, (*created)["metadata"]["uid"].get<std::string>(), name};
  }

  std::string SpecPath(const std::string& uid) const { return h_.SpecPath(uid); }
  PrepareResult PrepareOne(const ClaimRef& ref) { return h_.PrepareOne(ref); }
  int Gets() { return h_.client().Calls("get", "resourceclaims"); }
  double Transitions(ClaimState from, ClaimState to) {
    return h_
        .Series("dralens_node_claim_transitions_total",
                {{"from", std::string(LabelOf(from))}, {"to", std::string(LabelOf(to))}})
        .value_or(-1);
  }

  testing::PrepareHarness h_;
};

TEST_F(ClaimPreparerTest, EmptyBatches) {
  EXPECT_THAT(h_.Prepare({}), IsEmpty());
  EXPECT_THAT(h_.Unprepare({}), IsEmpty());
  EXPECT_EQ(Gets(), 0);
}

TEST_F(ClaimPreparerTest, PrepareWritesSpecAndCheckpoint) {
  ClaimRef ref = MakeClaim("train", {{"gpu/big", "gpu-1"}, {"small", "gpu-0-mig-1g10gb-19-0"}});
  PrepareResult r = PrepareOne(ref);
  ASSERT_EQ(r.error, "");
  ASSERT_THAT(r.devices, SizeIs(2));
  EXPECT_THAT(r.devices[0].request_names, ElementsAre("gpu"));
  EXPECT_EQ(r.devices[0].pool_name, kNode);
  EXPECT_EQ(r.devices[0].device_name, "gpu-1");
  EXPECT_THAT(r.devices[0].cdi_device_ids,
              ElementsAre(absl::StrCat("k8s.gpu.dralens.dev/claim=", ref.uid, "-gpu-1")));
  EXPECT_EQ(r.devices[1].device_name, "gpu-0-mig-1g10gb-19-0");
  EXPECT_THAT(r.devices[1].request_names, ElementsAre("small"));

  json spec = json::parse(Slurp(SpecPath(ref.uid)));
  EXPECT_EQ(spec["kind"], "k8s.gpu.dralens.dev/claim");
  ASSERT_EQ(spec["devices"].size(), 2u);
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"], "/dev/nvidia1");
  EXPECT_EQ(spec["devices"][1]["containerEdits"]["deviceNodes"][0]["path"], "/dev/nvidia0");

  Checkpoint cp = h_.checkpoint();
  ASSERT_EQ(cp.claims.count(ref.uid), 1u);
  EXPECT_EQ(cp.claims[ref.uid].state, ClaimState::kPrepareCompleted);
  EXPECT_EQ(h_.ledger().StateOf(ref.uid), ClaimState::kPrepareCompleted);
  EXPECT_EQ(Transitions(ClaimState::kUnprepared, ClaimState::kPrepareStarted), 1);
  // What is on disk matches memory.
  auto loaded = h_.store().Load();
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->checkpoint, cp);
}

TEST_F(ClaimPreparerTest, RePrepareAnswersFromCheckpointWithoutGet) {
  ClaimRef ref = MakeClaim("again", {{"gpu", "gpu-2"}});
  PrepareResult first = PrepareOne(ref);
  ASSERT_EQ(first.error, "");
  EXPECT_EQ(Gets(), 1);
  PrepareResult second = PrepareOne(ref);
  EXPECT_EQ(second.error, "");
  EXPECT_EQ(second.devices, first.devices);
  EXPECT_EQ(Gets(), 1);
  // Also after a restart.
  Restart();
  PrepareResult third = PrepareOne(ref);
  EXPECT_EQ(third.devices, first.devices);
  EXPECT_EQ(Gets(), 1);
}

TEST_F(ClaimPreparerTest, DuplicatesInABatchGetOneEntry) {
  ClaimRef ref = MakeClaim("dup", {{"gpu", "gpu-3"}});
  auto out = h_.Prepare({ref, ref, ref});
  ASSERT_THAT(out, SizeIs(1));
  EXPECT_EQ(out[ref.uid].error, "");
  EXPECT_EQ(Gets(), 1);
  auto un = h_.Unprepare({ref, ref});
  ASSERT_THAT(un, SizeIs(1));
  EXPECT_EQ(un[ref.uid], "");
}

TEST_F(ClaimPreparerTest, UnprepareRemovesSpecAndEntryAndIsIdempotent) {
  ClaimRef ref = MakeClaim("un", {{"gpu", "gpu-4"}});
  ASSERT_EQ(PrepareOne(ref).error, "");
  ASSERT_TRUE(std::filesystem::exists(SpecPath(ref.uid)));
  auto out = h_.Unprepare({ref});
  ASSERT_THAT(out, SizeIs(1));
  EXPECT_EQ(out[ref.uid], "");
  EXPECT_FALSE(std::filesystem::exists(SpecPath(ref.uid)));
  EXPECT_THAT(h_.checkpoint().claims, IsEmpty());
  EXPECT_EQ(h_.ledger().StateOf(ref.uid), ClaimState::kUnprepared);
  EXPECT_EQ(h_.Unprepare({ref})[ref.uid], "");
  // The device is free again for another claim.
  ClaimRef next = MakeClaim("un-next", {{"gpu", "gpu-4"}});
  EXPECT_EQ(PrepareOne(next).error, "");
}

TEST_F(ClaimPreparerTest, UnprepareOfUnknownClaimSucceeds) {
  ClaimRef ghost{kNs, "6e0a3f2c-0000-4000-8000-000000000000", "ghost"};
  auto out = h_.Unprepare({ghost});
  ASSERT_THAT(out, SizeIs(1));
  EXPECT_EQ(out[ghost.uid], "");
  EXPECT_EQ(Gets(), 0);
}

// A claim prepared before the checkpoint was lost: the kubelet's unprepare finds no entry,
// and the spec left on disk goes with it.
TEST_F(ClaimPreparerTest, UnprepareOfUnknownClaimRemovesItsLeftoverSpec) {
  ClaimRef lost{kNs, "6e0a3f2c-0000-4000-8000-0000000000aa", "lost"};
  std::filesystem::create_directories(std::filesystem::path(SpecPath(lost.uid)).parent_path());
  std::ofstream(SpecPath(lost.uid)) << "{}";
  ASSERT_TRUE(std::filesystem::exists(SpecPath(lost.uid)));
  auto out = h_.Unprepare({lost});
  EXPECT_EQ(out[lost.uid], "");
  EXPECT_FALSE(std::filesystem::exists(SpecPath(lost.uid)));
}

TEST_F(ClaimPreparerTest, ReplacedClaimIsRefused) {
  ClaimRef ref = MakeClaim("replaced", {{"gpu", "gpu-5"}});
  ClaimRef stale = ref;
  stale.uid = "00000000-1111-2222-3333-444444444444";
  PrepareResult r = PrepareOne(stale);
  EXPECT_THAT(r.error, HasSubstr("claim was replaced"));
  EXPECT_THAT(r.error, HasSubstr(stale.uid));
  EXPECT_FALSE(std::filesystem::exists(SpecPath(stale.uid)));
  EXPECT_THAT(h_.checkpoint().claims, IsEmpty());
}

TEST_F(ClaimPreparerTest, MissingAndUnallocatedClaims) {
  ClaimRef pending = MakeClaim("pending", {{"gpu", "gpu-6"}}, /*allocate=*/false);
  ClaimRef missing{kNs, "6e0a3f2c-0000-4000-8000-000000000001", "does-not-exist"};
  auto out = h_.Prepare({pending, missing});
  ASSERT_THAT(out, SizeIs(2));
  EXPECT_THAT(out[pending.uid].error, HasSubstr("is not allocated"));
  EXPECT_THAT(out[missing.uid].error, HasSubstr("ml/does-not-exist"));
  EXPECT_THAT(h_.checkpoint().claims, IsEmpty());
}

TEST_F(ClaimPreparerTest, ForeignDeviceIsAPerClaimError) {
  ClaimRef bad = MakeClaim("foreign", {{"gpu", "gpu-99"}});
  ClaimRef good = MakeClaim("fine", {{"gpu", "gpu-7"}});
  auto out = h_.Prepare({bad, good});
  ASSERT_THAT(out, SizeIs(2));
  EXPECT_THAT(out[bad.uid].error, HasSubstr("gpu-99"));
  EXPECT_THAT(out[bad.uid].error, HasSubstr("does not have"));
  EXPECT_EQ(out[good.uid].error, "");
}

TEST_F(ClaimPreparerTest, OtherDriversAreSkipped) {
  ClaimRef ref = MakeClaim("mixed", {{"gpu", "gpu-8"}, {"nic", "eth0", "net.example.com", kNode}});
  PrepareResult r = PrepareOne(ref);
  ASSERT_EQ(r.error, "");
  ASSERT_THAT(r.devices, SizeIs(1));
  EXPECT_EQ(r.devices[0].device_name, "gpu-8");
  EXPECT_EQ(json::parse(Slurp(SpecPath(ref.uid)))["devices"].size(), 1u);
}

TEST_F(ClaimPreparerTest, OurDeviceInAnotherNodesPoolIsRefused) {
  ClaimRef ref = MakeClaim("remote", {{"gpu", "gpu-8"}, {"remote", "gpu-8", kDriver, "node-b"}});
  PrepareResult r = PrepareOne(ref);
  EXPECT_THAT(r.error, HasSubstr("pool \"node-b\""));
  EXPECT_THAT(r.devices, IsEmpty());
  EXPECT_FALSE(std::filesystem::exists(SpecPath(ref.uid)));
  EXPECT_EQ(h_.checkpoint().claims.count(ref.uid), 0u);
}

TEST_F(ClaimPreparerTest, DeviceDoublePrepareIsRefused) {
  ClaimRef a = MakeClaim("holder", {{"gpu", "gpu-9"}});
  ClaimRef b = MakeClaim("intruder", {{"gpu", "gpu-9"}});
  ASSERT_EQ(PrepareOne(a).error, "");
  PrepareResult r = PrepareOne(b);
  EXPECT_THAT(r.error, HasSubstr("gpu-9"));
  EXPECT_THAT(r.error, HasSubstr("ml/holder"));
  EXPECT_THAT(r.error, HasSubstr("ml/intruder"));
  EXPECT_FALSE(std::filesystem::exists(SpecPath(b.uid)));
  EXPECT_EQ(h_.checkpoint().claims.count(b.uid), 0u);
}

TEST_F(ClaimPreparerTest, SameDeviceInOneBatchOnlyOneWins) {
  ClaimRef a = MakeClaim("race-a", {{"gpu", "gpu-10"}});
  ClaimRef b = MakeClaim("race-b", {{"gpu", "gpu-10"}});
  auto out = h_.Prepare({a, b});
  ASSERT_THAT(out, SizeIs(2));
  EXPECT_EQ((out[a.uid].error.empty() ? 1 : 0) + (out[b.uid].error.empty() ? 1 : 0), 1);
}

TEST_F(ClaimPreparerTest, PrepareStartedLeftBehindIsRolledBackAndRedone) {
  ClaimRef ref = MakeClaim("crashed", {{"gpu", "gpu-11"}});
  // What a crash after "PrepareStarted" and a partial CDI write leaves: a stale entry (with
  // a device the claim no longer has) and a stale spec.
  Checkpoint cp;
  CheckpointClaim stale;
  stale.state = ClaimState::kPrepareStarted;
  stale.namespace_name = kNs;
  stale.name = "crashed";
  stale.devices.push_back(CheckpointDevice{.request_names = {"gpu"},
                                           .pool = kNode,
                                           .device = "gpu-12",
                                           .cdi_device_ids = {},
                                           .share_id = std::nullopt,
                                           .type = model::DeviceType::kGpu,
                                           .uuid = ""});
  stale.cdi_spec_file = CdiSpecFileName(ref.uid);
  cp.claims[ref.uid] = stale;
  ASSERT_TRUE(h_.store().Save(cp).ok());
  std::filesystem::create_directories(h_.dir().Join("cdi"));
  testing::Spit(SpecPath(ref.uid), "{\"stale\": true}");
  Restart();
  EXPECT_EQ(h_.ledger().StateOf(ref.uid), ClaimState::kPrepareStarted);

  PrepareResult r = PrepareOne(ref);
  ASSERT_EQ(r.error, "");
  ASSERT_THAT(r.devices, SizeIs(1));
  EXPECT_EQ(r.devices[0].device_name, "gpu-11");
  json spec = json::parse(Slurp(SpecPath(ref.uid)));
  EXPECT_FALSE(spec.contains("stale"));
  Checkpoint now = h_.checkpoint();
  EXPECT_EQ(now.claims[ref.uid].state, ClaimState::kPrepareCompleted);
  EXPECT_EQ(now.claims[ref.uid].devices[0].device, "gpu-11");
  EXPECT_EQ(Transitions(ClaimState::kPrepareStarted, ClaimState::kUnprepared), 1);
  // gpu-12 is not held by the rolled-back entry any more.
  ClaimRef other = MakeClaim("other", {{"gpu", "gpu-12"}});
  EXPECT_EQ(PrepareOne(other).error, "");
}

TEST_F(ClaimPreparerTest, SixteenClaimsOnDistinctDevicesInParallel) {
  // Move the MIG GPU's claims out of the way: GPUs 1..16 are whole.
  std::vector<ClaimRef> refs;
  for (int i = 1; i <= 16; ++i) {
    refs.push_back(MakeClaim(absl::StrCat("par-", i), {{"gpu", absl::StrCat("gpu-", i)}}));
  }
  auto out = h_.Prepare(refs);
  ASSERT_THAT(out, SizeIs(16));
  for (const ClaimRef& ref : refs) {
    EXPECT_EQ(out[ref.uid].error, "") << ref.name;
    EXPECT_TRUE(std::filesystem::exists(SpecPath(ref.uid))) << ref.name;
  }
  Checkpoint cp = h_.checkpoint();
  EXPECT_THAT(cp.claims, SizeIs(16));
  // The file holds every claim: no write was lost to a race.
  auto loaded = h_.store().Load();
  ASSERT_TRUE(loaded.ok());
  EXPECT_THAT(loaded->checkpoint.claims, SizeIs(16));
  EXPECT_EQ(h_.ledger().CountInState(ClaimState::kPrepareCompleted), 16);
  auto un = h_.Unprepare(refs);
  for (const ClaimRef& ref : refs) {
    EXPECT_EQ(un[ref.uid], "");
  }
  EXPECT_THAT(testing::ListDir(h_.dir().Join("cdi")), IsEmpty());
}

TEST_F(ClaimPreparerTest, UnsafeUidIsRefusedWithoutGet) {
  ClaimRef evil{kNs, "../../etc", "evil"};
  PrepareResult r = PrepareOne(evil);
  EXPECT_THAT(r.error, HasSubstr("claim UID"));
  EXPECT_EQ(Gets(), 0);
  EXPECT_THAT(h_.Unprepare({evil})[evil.uid], HasSubstr("claim UID"));
}

// Kill -9 at each step of prepare (a forked child _exits 137 there), then restart in this
// process: the claim ends prepared exactly once with a valid spec, or is cleanly unprepared.
TEST_F(ClaimPreparerTest, CrashAtEachStepRecovers) {
  GTEST_FLAG_SET(death_test_style, "fast");
  int n = 0;
  for (const char* step : {"after-started", "after-cdi", "after-completed"}) {
    ClaimRef ref = MakeClaim(absl::StrCat("crash-", n), {{"gpu", absl::StrCat("gpu-", 13 + n)}});
    ++n;
    EXPECT_EXIT(
        {
          setenv(kCrashAtEnv, step, 1);
          h_.Prepare({ref});
        },
        ::testing::ExitedWithCode(137), "")
        << step;
    Restart();
    PrepareResult r = PrepareOne(ref);
    EXPECT_EQ(r.error, "") << step;
    EXPECT_TRUE(std::filesystem::exists(SpecPath(ref.uid))) << step;
    EXPECT_EQ(h_.checkpoint().claims[ref.uid].state, ClaimState::kPrepareCompleted) << step;
  }
  ClaimRef ref = MakeClaim("crash-un", {{"gpu", "gpu-16"}});
  ASSERT_EQ(PrepareOne(ref).error, "");
  EXPECT_EXIT(
      {
        setenv(kCrashAtEnv, "unprepare-after-cdi-removed", 1);
        h_.Unprepare({ref});
      },
      ::testing::ExitedWithCode(137), "");
  Restart();
  EXPECT_EQ(h_.Unprepare({ref})[ref.uid], "");
  EXPECT_FALSE(std::filesystem::exists(SpecPath(ref.uid)));
  EXPECT_EQ(h_.checkpoint().claims.count(ref.uid), 0u);
  EXPECT_EQ(h_.ledger().StateOf(ref.uid), ClaimState::kUnprepared);
}

TEST_F(ClaimPreparerTest, RebootDiscardsPreparedClaims) {
  ClaimRef ref = MakeClaim("before-reboot", {{"gpu", "gpu-1"}});
  ASSERT_EQ(PrepareOne(ref).error, "");
  Restart("boot-2");
  EXPECT_EQ(h_.preparation().load_result().origin, LoadedCheckpoint::Origin::kDiscardedReboot);
  EXPECT_THAT(h_.checkpoint().claims, IsEmpty());
  EXPECT_EQ(h_.ledger().StateOf(ref.uid), ClaimState::kUnprepared);
  // The decision was written: the next start loads an empty, current checkpoint.
  auto loaded = h_.store().Load();
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->origin, LoadedCheckpoint::Origin::kLoaded);
}

}  // namespace
}  // namespace dralens::driver::prepare
