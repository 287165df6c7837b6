// The demo's workload generator against the embedded API server and two real node drivers (an
// H100 pair in dynamic-MIG mode and eight A100s): it makes the claim mix, never gives a device
// (or a shared counter) to two claims, prepares through the real sockets, leaves some claims
// pending and some allocated without a pod, and is reproducible for a seed.
#include "src/sim/workload.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/app/node_driver.h"
#include "src/common/clock.h"
#include "src/common/quantity.h"
#include "src/k8s/rest_client.h"
#include "src/model/codec.h"
#include "src/sim/api_server.h"
#include "tests/testing/api_fixture.h"
#include "tests/testing/temp_dir.h"

namespace dralens::sim {
namespace {

using app::NodeDriver;
using app::NodeDriverOptions;

namespace fs = std::filesystem;
using nlohmann::json;

class WorkloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.ok());
    StartNode("h100-0", "h100x2", /*dynamic_mig=*/true);
    StartNode("a100-0", "a100-40gb", /*dynamic_mig=*/false);
  }

  void TearDown() override {
    workload_.reset();
    drivers_.clear();
  }

  void StartNode(const std::string& name, const std::string& profile, bool dynamic_mig,
                 bool consumable_capacity = false) {
    ASSERT_TRUE(
        client()
            .Create(k8s::kNodes, "",
                    {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}})
            .ok());
    NodeDriverOptions options;
    options.node_name = name;
    options.registry_dir = (root_ / name / "registry").string();
    options.plugins_dir = (root_ / name / "plugins").string();
    options.cdi_root = (root_ / name / "cdi").string();
    options.device_source.kind = "simulated";
    options.device_source.simulated_profile = profile;
    options.dynamic_mig = dynamic_mig;
    options.consumable_capacity = consumable_capacity;
    options.api_minor = 34;
    auto driver = NodeDriver::Start(options, client(), common::RealClock());
    ASSERT_TRUE(driver.ok()) << driver.status();
    sockets_[name] = (*driver)->dra_socket_path();
    drivers_.push_back(*std::move(driver));
  }

  WorkloadOptions Options(uint64_t seed) {
    WorkloadOptions options;
    options.seed = seed;
    options.mean_pod_duration = absl::Seconds(30);
    options.max_claims = 40;
    options.plugin_sockets = sockets_;
    return options;
  }

  std::unique_ptr<Workload> MakeWorkload(uint64_t seed, common::Clock& clock) {
    return std::make_unique<Workload>(Options(seed), client(), clock);
  }

  std::vector<json> Claims() {
    auto list = client().List(k8s::kResourceClaims, "demo", {});
    EXPECT_TRUE(list.ok()) << list.status();
    return list.ok() ? list->items : std::vector<json>{};
  }

  // Every allocated device is held by one claim, and no MIG placement overlaps another or a
  // full GPU on the same counters: checked by the node, whose prepare would refuse a busy
  // device, and here on the allocation results themselves.
  void ExpectNoDeviceTwice() {
    std::set<std::string> seen;
    for (const json& c : Claims()) {
      if (!c.contains("status") || !c["status"].contains("allocation")) {
        continue;
      }
      for (const json& r : c["status"]["allocation"]["devices"]["results"]) {
        const std::string key =
            absl::StrCat(r["pool"].get<std::string>(), "/", r["device"].get<std::string>());
        EXPECT_TRUE(seen.insert(key).second) << key << " allocated twice";
      }
    }
  }

  k8s::RestClient& client() { return api_.client(); }

  testing::TempDir dir_{"dralens-wl"};
  const fs::path root_{dir_.path()};
  testing::ApiFixture api_;
  std::vector<std::unique_ptr<NodeDriver>> drivers_;
  std::map<std::string, std::string> sockets_;
  std::unique_ptr<Workload> workload_;
};

TEST_F(WorkloadTest, MakesTheMixAllocatesWithoutOverlapAndPreparesThroughTheSockets) {
  common::FakeClock clock;
  workload_ = MakeWorkload(7, clock);
  ASSERT_TRUE(workload_->Setup().ok());
  ASSERT_TRUE(workload_->Setup().ok());  // idempotent
  bool saw_lingering = false;
  for (int i = 0; i < 60; ++i) {
    ASSERT_TRUE(workload_->Step().ok());
    ExpectNoDeviceTwice();
    saw_lingering = saw_lingering || workload_->stats().lingering > 0;
    clock.Advance(absl::Seconds(2));
  }
  const Workload::Stats stats = workload_->stats();
  EXPECT_EQ(stats.created, 60);
  EXPECT_GT(stats.allocated, 10);
  EXPECT_EQ(stats.prepare_errors, 0);
  EXPECT_GE(stats.prepared, stats.allocated);  // a shared claim is prepared once per pod
  EXPECT_GT(stats.unprepared, 0);
  EXPECT_EQ(stats.unprepare_errors, 0);
  // A claim left allocated drops its reservedFor while the node plugin clears its
  // status.devices: the two writes can conflict, and the conflict is retried, not a failure.
  EXPECT_EQ(stats.finish_errors, 0);
  EXPECT_GT(stats.deleted, 0);
  EXPECT_TRUE(saw_lingering);

  std::map<std::string, int> kinds;
  int pending_forever = 0;
  for (const json& c : Claims()) {
    const std::string kind = c["metadata"]["labels"]["dralens.dev/workload"];
    ++kinds[kind];
    const bool allocated = c.contains("status") && c["status"].contains("allocation");
    if (kind == "huge" || kind == "early") {
      EXPECT_FALSE(allocated) << c["metadata"]["name"];  // never satisfiable / no pod
      ++pending_forever;
    }
    // Every claim decodes as the API server stores it.
    EXPECT_TRUE(model::Decode<model::ResourceClaim>(c).ok()) << c.dump();
  }
  EXPECT_GT(pending_forever, 0);
  EXPECT_GE(kinds.size(), 5u);

  // MIG claims went to dynamic-MIG placements of the H100s, whole GPUs anywhere.
  for (const json& c : Claims()) {
    if (!c.contains("status") || !c["status"].contains("allocation")) {
      continue;
    }
    const std::string kind = c["metadata"]["labels"]["dralens.dev/workload"];
    const json& r = c["status"]["allocation"]["devices"]["results"][0];
    if (kind.rfind("mig-", 0) == 0) {
      EXPECT_EQ(r["pool"], "h100-0");
      EXPECT_NE(r["device"].get<std::string>().find("-mig-"), std::string::npos);
    }
  }
}

TEST_F(WorkloadTest, MemorySharesGoOnlyToConsumableGpusWithShareIdsAndWithinTheirMemory) {
  StartNode("a100-cc", "a100-40gb", /*dynamic_mig=*/false, /*consumable_capacity=*/true);
  common::FakeClock clock;
  WorkloadOptions options;
  options.seed = 7;
  options.mean_pod_duration = absl::Seconds(30);
  options.max_claims = 40;
  options.plugin_sockets = sockets_;
  options.memory_shares = true;
  Workload workload(options, client(), clock);
  ASSERT_TRUE(workload.Setup().ok());
  size_t most_shares = 0;
  for (int i = 0; i < 80; ++i) {
    ASSERT_TRUE(workload.Step().ok());
    std::set<std::string> exclusive;
    std::map<std::string, std::set<std::string>> share_ids;  // device -> share IDs
    std::map<std::string, common::Quantity> consumed;
    for (const json& c : Claims()) {
      if (!c.contains("status") || !c["status"].contains("allocation")) {
        continue;
      }
      const std::string kind = c["metadata"]["labels"]["dralens.dev/workload"];
      const json& r = c["status"]["allocation"]["devices"]["results"][0];
      const std::string key =
          absl::StrCat(r["pool"].get<std::string>(), "/", r["device"].get<std::string>());
      if (kind != "share") {
        EXPECT_NE(r["pool"], "a100-cc") << kind << " on a consumable-capacity GPU";
        EXPECT_TRUE(exclusive.insert(key).second) << key << " allocated twice";
        continue;
      }
      EXPECT_EQ(r["pool"], "a100-cc");
      ASSERT_TRUE(r.contains("shareID")) << r.dump();
      EXPECT_TRUE(share_ids[key].insert(r["shareID"].get<std::string>()).second) << r.dump();
      auto q = common::Quantity::Parse(r["consumedCapacity"]["memory"].get<std::string>());
      ASSERT_TRUE(q.ok()) << r.dump();
      ASSERT_TRUE(consumed[key].Add(*q).ok());
    }
    for (const auto& [key, used] : consumed) {
      EXPECT_LE(used, *common::Quantity::Parse("40Gi")) << key;
      most_shares = std::max(most_shares, share_ids[key].size());
    }
    clock.Advance(absl::Seconds(2));
  }
  const Workload::Stats stats = workload.stats();
  EXPECT_EQ(stats.prepare_errors, 0);
  EXPECT_GT(stats.prepared_share, 0);
  EXPECT_GT(stats.prepared_mig, 0);
  EXPECT_GE(most_shares, 2u);  // several claims on one GPU at once
}

TEST_F(WorkloadTest, TwoGpuClaimsTakeTwoGpusOfOneNodeAndTeamsTakeTurns) {
  common::FakeClock clock;
  WorkloadOptions options = Options(3);
  options.two_gpu_claims = true;
  options.team_namespaces = {"team-a", "team-b"};
  Workload workload(options, client(), clock);
  ASSERT_TRUE(workload.Setup().ok());
  ASSERT_TRUE(workload.Step().ok());
  // The first claim is the two-GPU job, in the second team's namespace (claims take turns).
  auto first = client().List(k8s::kResourceClaims, "team-b", {});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->items.size(), 1u);
  const json& claim = first->items[0];
  EXPECT_EQ(claim["metadata"]["labels"]["dralens.dev/workload"], "two-gpu");
  EXPECT_EQ(claim["spec"]["devices"]["requests"][0]["exactly"]["count"], 2);
  const json& results = claim["status"]["allocation"]["devices"]["results"];
  ASSERT_EQ(results.size(), 2u) << claim.dump();
  EXPECT_EQ(results[0]["pool"], results[1]["pool"]);
  EXPECT_NE(results[0]["device"], results[1]["device"]);
  EXPECT_EQ(workload.stats().prepare_errors, 0);
  EXPECT_GE(workload.stats().prepared, 1);

  std::map<std::string, int> per_team;
  for (int i = 0; i < 40; ++i) {
    clock.Advance(absl::Seconds(2));
    ASSERT_TRUE(workload.Step().ok());
    std::set<std::string> seen;
    for (const char* ns : {"team-a", "team-b"}) {
      auto list = client().List(k8s::kResourceClaims, ns, {});
      ASSERT_TRUE(list.ok()) << list.status();
      per_team[ns] = std::max<int>(per_team[ns], static_cast<int>(list->items.size()));
      for (const json& c : list->items) {
        if (!c.contains("status") || !c["status"].contains("allocation")) {
          continue;
        }
        for (const json& r : c["status"]["allocation"]["devices"]["results"]) {
          const std::string key =
              absl::StrCat(r["pool"].get<std::string>(), "/", r["device"].get<std::string>());
          EXPECT_TRUE(seen.insert(key).second) << key << " allocated twice";
        }
      }
    }
  }
  EXPECT_GT(per_team["team-a"], 0);
  EXPECT_GT(per_team["team-b"], 0);
  EXPECT_EQ(workload.stats().prepare_errors, 0);
  workload.Stop();
}

TEST_F(WorkloadTest, TheSameSeedMakesTheSameClaims) {
  auto names = [&](uint64_t seed) {
    common::FakeClock clock;
    auto workload = MakeWorkload(seed, clock);
    EXPECT_TRUE(workload->Setup().ok());
    for (int i = 0; i < 12; ++i) {
      EXPECT_TRUE(workload->Step().ok());
    }
    std::vector<std::string> out;
    for (const json& c : Claims()) {
      out.push_back(c["metadata"]["name"]);
    }
    std::sort(out.begin(), out.end());
    workload->Stop();
    // Leave the cluster empty for the next run.
    for (const json& c : Claims()) {
      (void)client().Delete(k8s::kResourceClaims, "demo", c["metadata"]["name"].get<std::string>(),
                            {});
    }
    auto pods = client().List(k8s::kPods, "demo", {});
    for (const json& p : pods->items) {
      (void)client().Delete(k8s::kPods, "demo", p["metadata"]["name"].get<std::string>(), {});
    }
    return out;
  };
  const std::vector<std::string> first = names(42);
  EXPECT_EQ(first.size(), 12u);
  EXPECT_EQ(names(42), first);
  EXPECT_NE(names(43), first);
}

}  // namespace
}  // namespace dralens::sim
