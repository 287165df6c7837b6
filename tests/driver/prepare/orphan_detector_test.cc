// OrphanDetector over a real claim preparation (PrepareHarness): which prepared claims are
// orphaned, their metrics and ages on the injected clock, API errors, and the opt-in unprepare
// through the kubelet's path.
#include "driver/prepare/orphan_detector.h"

#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/k8s/client.h"
#include "tests/driver/prepare/prepare_test_util.h"
#include "tests/testing/eventually.h"

namespace dralens::driver::prepare {
namespace {

using ::testing::IsEmpty;

constexpr char kNs[] = "ml";
constexpr char kNode[] = "node-a";
constexpr char kDriver[] = "gpu.dralens.dev";

class OrphanDetectorTest : public ::testing::Test {
 protected:
  ClaimRef Prepared(const std::string& name, const std::string& device) {
    ClaimRef ref =
        testing::CreateClaim(h_.client(), kNs, name, "gpu", kDriver, kDriver, kNode, device);
    PrepareResult result = h_.PrepareOne(ref);
    EXPECT_EQ(result.error, "") << name;
    return ref;
  }

  OrphanDetector& Detector(std::optional<absl::Duration> unprepare_after = std::nullopt) {
    OrphanDetectorOptions options;
    options.driver_name = kDriver;
    options.pool_name = kNode;
    options.interval = absl::Minutes(1);
    options.unprepare_after = unprepare_after;
    options.poll_interval = absl::Milliseconds(2);
    detector_ = std::make_unique<OrphanDetector>(options, h_.client(), h_.ledger(), h_.preparer(),
                                                 h_.clock(), h_.registry());
    return *detector_;
  }

  // Rewrites the claim's allocation to `device` of `pool` ("" device: no allocation).
  void Reallocate(const ClaimRef& ref, const std::string& pool, const std::string& device) {
    auto claim = h_.client().Get(k8s::kResourceClaims, kNs, ref.name);
    ASSERT_TRUE(claim.ok()) << claim.status();
    nlohmann::json obj = *claim;
    if (device.empty()) {
      obj["status"].erase("allocation");
    } else {
      obj["status"]["allocation"]["devices"]["results"] = nlohmann::json::array(
          {{{"request", "gpu"}, {"driver", kDriver}, {"pool", pool}, {"device", device}}});
    }
    ASSERT_TRUE(h_.client().Update(k8s::kResourceClaims, kNs, obj, "status").ok());
  }

  std::optional<double> Orphaned(const std::string& reason) {
    return h_.Series("dralens_node_orphaned_claims", {{"reason", reason}});
  }
  std::optional<double> Age(const ClaimRef& ref) {
    return h_.Series("dralens_node_orphaned_claim_age_seconds",
                     {{"namespace", kNs}, {"claim", ref.name}, {"uid", ref.uid}});
  }

  testing::PrepareHarness h_;
  std::unique_ptr<OrphanDetector> detector_;
};

TEST_F(OrphanDetectorTest, ClassifiesEveryPreparedClaim) {
  ClaimRef kept = Prepared("kept", "gpu-0");
  ClaimRef gone = Prepared("gone", "gpu-1");
  ClaimRef replaced = Prepared("replaced", "gpu-2");
  ClaimRef deallocated = Prepared("deallocated", "gpu-3");
  ClaimRef moved = Prepared("moved", "gpu-4");
  ClaimRef elsewhere = Prepared("elsewhere", "gpu-5");
  OrphanDetector& d = Detector();

  // Nothing wrong yet: the series exist at zero, no age series.
  OrphanCheckResult first = d.Check();
  EXPECT_EQ(first.checked, 6);
  EXPECT_THAT(first.orphans, IsEmpty());
  EXPECT_EQ(Orphaned("gone"), 0);
  EXPECT_EQ(testing::SeriesCount(h_.registry(), "dralens_node_orphaned_claim_age_seconds", {}), 0);

  ASSERT_TRUE(h_.client().Delete(k8s::kResourceClaims, kNs, "gone", {}).ok());
  ASSERT_TRUE(h_.client().Delete(k8s::kResourceClaims, kNs, "replaced", {}).ok());
  testing::CreateClaim(h_.client(), kNs, "replaced", "gpu", kDriver, kDriver, kNode, "gpu-2");
  Reallocate(deallocated, "", "");
  Reallocate(moved, kNode, "gpu-6");         // same node, another device
  Reallocate(elsewhere, "node-b", "gpu-5");  // another node's pool
  OrphanCheckResult second = d.Check();
  EXPECT_EQ(second.errors, 0);
  std::map<std::string, std::string> reasons;
  for (const Orphan& o : second.orphans) {
    reasons[o.name] = o.reason;
  }
  EXPECT_EQ(reasons, (std::map<std::string, std::string>{{"gone", "gone"},
                                                         {"replaced", "replaced"},
                                                         {"deallocated", "not_allocated"},
                                                         {"moved", "not_allocated"},
                                                         {"elsewhere", "not_allocated"}}));
  EXPECT_EQ(Orphaned("gone"), 1);
  EXPECT_EQ(Orphaned("replaced"), 1);
  EXPECT_EQ(Orphaned("not_allocated"), 3);
  EXPECT_EQ(Age(gone), 0);
  EXPECT_FALSE(Age(kept).has_value());
  EXPECT_EQ(h_.Series("dralens_node_orphan_checks_total", {{"result", "ok"}}), 2);

  // Ages grow on the clock; nothing is unprepared when the option is off.
  h_.clock().Advance(absl::Minutes(90));
  d.Check();
  EXPECT_EQ(Age(gone), 90 * 60);
  EXPECT_EQ(h_.checkpoint().claims.size(), 6u);

  // A claim the API cannot tell about keeps its status and age; the check counts as an error.
  h_.client().FailNext("get", "resourceclaims", absl::UnavailableError("down"));
  h_.clock().Advance(absl::Minutes(1));
  OrphanCheckResult failing = d.Check();
  EXPECT_EQ(failing.errors, 1);
  EXPECT_EQ(failing.orphans.size(), 5u);
  EXPECT_EQ(h_.Series("dralens_node_orphan_checks_total", {{"result", "error"}}), 1);

  // Unprepared by the kubelet after all, or allocated here again: no longer an orphan.
  EXPECT_EQ(h_.UnprepareOne(gone), "");
  Reallocate(moved, kNode, "gpu-4");
  d.Check();
  EXPECT_FALSE(Age(gone).has_value());
  EXPECT_FALSE(Age(moved).has_value());
  EXPECT_EQ(Orphaned("gone"), 0);
  EXPECT_EQ(Orphaned("not_allocated"), 2);
  EXPECT_EQ(d.Orphans().size(), 3u);
}

TEST_F(OrphanDetectorTest, UnpreparesAfterTheGraceAsTheKubeletWould) {
  ClaimRef kept = Prepared("kept", "gpu-0");
  ClaimRef gone = Prepared("gone", "gpu-1");
  const std::string spec = h_.SpecPath(gone.uid);
  ASSERT_TRUE(std::filesystem::exists(spec));
  OrphanDetector& d = Detector(absl::Minutes(10));
  ASSERT_TRUE(h_.client().Delete(k8s::kResourceClaims, kNs, "gone", {}).ok());

  EXPECT_EQ(d.Check().unprepared, 0);
  h_.clock().Advance(absl::Minutes(9));
  EXPECT_EQ(d.Check().unprepared, 0);
  EXPECT_TRUE(std::filesystem::exists(spec));

  h_.clock().Advance(absl::Minutes(1));
  OrphanCheckResult result = d.Check();
  EXPECT_EQ(result.unprepared, 1);
  EXPECT_THAT(result.orphans, IsEmpty());
  // The kubelet's unprepare path: the CDI spec and the checkpoint entry are gone, the ledger
  // counted the transitions, the device is free for the next claim.
  EXPECT_FALSE(std::filesystem::exists(spec));
  EXPECT_EQ(h_.checkpoint().claims.count(gone.uid), 0u);
  EXPECT_EQ(h_.checkpoint().claims.count(kept.uid), 1u);
  EXPECT_EQ(h_.Series("dralens_node_claim_transitions_total",
                      {{"from", "prepare_completed"}, {"to", "unpreparing"}}),
            1);
  EXPECT_EQ(h_.Series("dralens_node_orphans_unprepared_total", {{"result", "ok"}}), 1);
  EXPECT_FALSE(Age(gone).has_value());
  EXPECT_EQ(Orphaned("gone"), 0);
  ClaimRef next = Prepared("next", "gpu-1");
  EXPECT_EQ(h_.checkpoint().claims.count(next.uid), 1u);
}

TEST_F(OrphanDetectorTest, LoopChecksAtStartAndThenEveryInterval) {
  ClaimRef gone = Prepared("gone", "gpu-1");
  ASSERT_TRUE(h_.client().Delete(k8s::kResourceClaims, kNs, "gone", {}).ok());
  OrphanDetector& d = Detector();
  const int gets = h_.client().Calls("get", "resourceclaims");
  d.Run();
  // At start, without the clock moving.
  ASSERT_TRUE(dralens::testing::Eventually([&] { return d.Orphans().size() == 1; }));
  EXPECT_EQ(h_.client().Calls("get", "resourceclaims"), gets + 1);
  h_.clock().Advance(absl::Minutes(1));
  ASSERT_TRUE(dralens::testing::Eventually(
      [&] { return h_.client().Calls("get", "resourceclaims") == gets + 2; }));
  d.Stop();
  EXPECT_EQ(Age(gone), 60);
}

}  // namespace
}  // namespace dralens::driver::prepare
