#include "exporter/cluster/cluster_state.h"

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dralens::exporter::cluster {
namespace {

std::unique_ptr<Device> MakeDevice(const std::string& key, const std::string& node,
                                   std::vector<fit::CounterConsumption> consumes = {}) {
  auto d = std::make_unique<Device>();
  d->key = key;
  d->node = node;
  d->slice = "slice-" + node;
  d->consumes = std::move(consumes);
  return d;
}

std::unique_ptr<CounterSet> MakeSet(const std::string& key, const std::string& node,
                                    std::map<std::string, double> capacity) {
  auto set = std::make_unique<CounterSet>();
  set->key = key;
  set->node = node;
  set->name = key;
  set->capacity = std::move(capacity);
  return set;
}

std::unique_ptr<Claim> MakeClaim(const std::string& key) {
  auto c = std::make_unique<Claim>();
  c->key = key;
  c->uid = "uid-" + key;
  return c;
}

std::set<std::string> KeysOn(const ClusterState& state, const std::string& node) {
  std::set<std::string> keys;
  for (const Device* d : state.DevicesOn(node)) {
    keys.insert(d->key);
  }
  return keys;
}

TEST(ClusterStateTest, DevicesAreIndexedByNodeAndLeaveEveryIndex) {
  ClusterState state;
  state.AddDevice(MakeDevice("gpu/n1/a", "n1"));
  state.AddDevice(MakeDevice("gpu/n1/b", "n1"));
  state.AddDevice(MakeDevice("gpu/n2/a", "n2"));
  EXPECT_EQ(KeysOn(state, "n1"), (std::set<std::string>{"gpu/n1/a", "gpu/n1/b"}));
  EXPECT_EQ(KeysOn(state, "n2"), (std::set<std::string>{"gpu/n2/a"}));
  EXPECT_TRUE(state.DevicesOn("n3").empty());
  ASSERT_NE(state.FindDevice("gpu/n1/a"), nullptr);
  EXPECT_EQ(state.FindDevice("gpu/n1/a")->node, "n1");

  state.RemoveDevice("gpu/n2/a");
  state.RemoveDevice("gpu/n2/a");  // twice: nothing
  EXPECT_EQ(state.FindDevice("gpu/n2/a"), nullptr);
  EXPECT_TRUE(state.DevicesOn("n2").empty());
  // A node whose last device went leaves no (empty) entry behind.
  EXPECT_EQ(state.devices_by_node().count("n2"), 0u);
  EXPECT_EQ(state.devices().size(), 2u);
}

TEST(ClusterStateTest, CounterSetFindsItsConsumersWhicheverComesFirst) {
  ClusterState state;
  // A consumer published before its set (another slice of the pool publishes the set).
  state.AddDevice(MakeDevice("gpu/p/early", "n1", {{"gpu/p/gpu-0", {{"memory", 40}}}}));
  state.AddCounterSet(MakeSet("gpu/p/gpu-0", "n1", {{"memory", 80}}));
  // And one published after it.
  state.AddDevice(MakeDevice("gpu/p/late", "n1", {{"gpu/p/gpu-0", {{"memory", 40}}}}));
  const CounterSet* set = state.FindCounterSet("gpu/p/gpu-0");
  ASSERT_NE(set, nullptr);
  EXPECT_EQ(set->devices, (std::set<std::string>{"gpu/p/early", "gpu/p/late"}));

  // A set published again (its slice republished) keeps its consumers.
  state.AddCounterSet(MakeSet("gpu/p/gpu-0", "n1", {{"memory", 80}}));
  EXPECT_EQ(state.FindCounterSet("gpu/p/gpu-0")->devices,
            (std::set<std::string>{"gpu/p/early", "gpu/p/late"}));

  state.RemoveDevice("gpu/p/early");
  EXPECT_EQ(state.FindCounterSet("gpu/p/gpu-0")->devices, (std::set<std::string>{"gpu/p/late"}));
  state.RemoveCounterSet("gpu/p/gpu-0");
  EXPECT_EQ(state.FindCounterSet("gpu/p/gpu-0"), nullptr);
  EXPECT_EQ(state.CounterLeft("gpu/p/gpu-0", "memory"), std::nullopt);
}

TEST(ClusterStateTest, CountersUsedByHeldConsumersBlockTheRest) {
  ClusterState state;
  state.AddCounterSet(MakeSet("gpu/p/gpu-0", "n1", {{"memory", 80}, {"slices", 7}}));
  Device& big = state.AddDevice(
      MakeDevice("gpu/p/7g", "n1", {{"gpu/p/gpu-0", {{"memory", 80}, {"slices", 7}}}}));
  Device& small = state.AddDevice(
      MakeDevice("gpu/p/1g", "n1", {{"gpu/p/gpu-0", {{"memory", 10}, {"slices", 1}}}}));
  // A device on a set that is not published is never blocked by it.
  Device& orphan =
      state.AddDevice(MakeDevice("gpu/p/x", "n1", {{"gpu/p/gone", {{"memory", 1000}}}}));
  EXPECT_EQ(state.CounterLeft("gpu/p/gpu-0", "memory"), 80);
  EXPECT_EQ(state.CounterLeft("gpu/p/gpu-0", "absent"), 0);  // a counter the set lacks
  EXPECT_FALSE(state.DeviceBlocked(big));
  EXPECT_TRUE(state.DeviceFree(big));

  Claim& claim = state.AddClaim(MakeClaim("ns/a"));
  const std::set<std::string> touched =
      state.SetAllocations(claim, {{"gpu/p/1g", "mig"}}, {{"gpu/p/1g", {}}});
  EXPECT_EQ(touched, (std::set<std::string>{"gpu/p/1g"}));
  state.RecountUsed("gpu/p/gpu-0");
  EXPECT_EQ(state.CounterLeft("gpu/p/gpu-0", "memory"), 70);
  EXPECT_EQ(state.CounterLeft("gpu/p/gpu-0", "slices"), 6);
  EXPECT_TRUE(state.DeviceAllocated(small));
  EXPECT_FALSE(state.DeviceBlocked(small));  // its own allocation holds the counters
  EXPECT_FALSE(state.DeviceFree(small));
  EXPECT_TRUE(state.DeviceBlocked(big));
  EXPECT_FALSE(state.DeviceAllocated(big));
  EXPECT_FALSE(state.DeviceFree(big));
  EXPECT_FALSE(state.DeviceBlocked(orphan));

  // Released: the counters come back.
  EXPECT_EQ(state.SetAllocations(claim, {}, {}), (std::set<std::string>{"gpu/p/1g"}));
  state.RecountUsed("gpu/p/gpu-0");
  EXPECT_EQ(state.CounterLeft("gpu/p/gpu-0", "memory"), 80);
  EXPECT_TRUE(state.DeviceFree(big));
}

TEST(ClusterStateTest, HoldersStayInClaimKeyOrderAndAnUnchangedAllocationTouchesNothing) {
  ClusterState state;
  Device& shared = state.AddDevice(MakeDevice("gpu/p/shared", "n1"));
  shared.spec.allow_multiple_allocations = true;
  shared.capacity = {{"memory", 80}, {"sm", 100}};
  Claim& c = state.AddClaim(MakeClaim("ns/c"));
  Claim& a = state.AddClaim(MakeClaim("ns/a"));
  Claim& b = state.AddClaim(MakeClaim("ns/b"));
  for (Claim* claim : {&c, &a, &b}) {
    EXPECT_FALSE(state
                     .SetAllocations(*claim, {{"gpu/p/shared", "share"}},
                                     {{"gpu/p/shared", {{"memory", 20}, {"sm", 10}}}})
                     .empty());
  }
  const ClusterState::Holders* holders = state.HoldersOf("gpu/p/shared");
  ASSERT_NE(holders, nullptr);
  std::vector<std::string> order;
  for (const auto& [claim, consumed] : *holders) {
    order.push_back(claim->key);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"ns/a", "ns/b", "ns/c"}));
  // 60 of 80 GB consumed: not full, so not allocated; each holds a quarter (memory binds).
  EXPECT_FALSE(state.DeviceAllocated(shared));
  for (const auto& [claim, share] : state.HolderShares(shared)) {
    EXPECT_DOUBLE_EQ(share, 0.25) << claim->key;
  }
  EXPECT_TRUE(state
                  .SetAllocations(a, {{"gpu/p/shared", "share"}},
                                  {{"gpu/p/shared", {{"memory", 20}, {"sm", 10}}}})
                  .empty());
  // A fourth 20 GB fills it.
  Claim& d = state.AddClaim(MakeClaim("ns/d"));
  state.SetAllocations(d, {{"gpu/p/shared", "share"}},
                       {{"gpu/p/shared", {{"memory", 20}, {"sm", 10}}}});
  EXPECT_TRUE(state.DeviceAllocated(shared));
  // Over-committed (a fifth): the shares scale down to sum to one.
  Claim& e = state.AddClaim(MakeClaim("ns/e"));
  state.SetAllocations(e, {{"gpu/p/shared", "share"}},
                       {{"gpu/p/shared", {{"memory", 20}, {"sm", 10}}}});
  double sum = 0;
  for (const auto& [claim, share] : state.HolderShares(shared)) {
    sum += share;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);

  // Whole devices held by several claims (admin access) split evenly.
  Device& whole = state.AddDevice(MakeDevice("gpu/p/whole", "n1"));
  state.SetAllocations(a, {{"gpu/p/whole", "gpu"}}, {{"gpu/p/whole", {}}});
  state.SetAllocations(b, {{"gpu/p/whole", "gpu"}}, {{"gpu/p/whole", {}}});
  const auto shares = state.HolderShares(whole);
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_DOUBLE_EQ(shares[0].second, 0.5);
  // `a` moved: it no longer holds the shared device.
  for (const auto& [claim, consumed] : *state.HoldersOf("gpu/p/shared")) {
    EXPECT_NE(claim, &a);
  }
}

TEST(ClusterStateTest, NodesAreDownWhenNotReadyOrGoneAfterSync) {
  ClusterState state;
  EXPECT_FALSE(state.NodeDown("n1"));  // not known yet, Nodes not synced: assume up
  EXPECT_FALSE(state.NodeDown(""));    // a device without a node
  EXPECT_TRUE(state.SetNode({"n1", true}));
  EXPECT_FALSE(state.SetNode({"n1", true}));  // unchanged
  EXPECT_TRUE(state.SetNode({"n1", false}));
  EXPECT_TRUE(state.NodeDown("n1"));
  state.SetNodesSynced();
  EXPECT_TRUE(state.NodeDown("n2"));  // synced and not known: gone
  EXPECT_FALSE(state.NodeDown(""));
  EXPECT_TRUE(state.EraseNode("n1"));
  EXPECT_FALSE(state.EraseNode("n1"));
  EXPECT_TRUE(state.NodeDown("n1"));
}

TEST(ClusterStateTest, PodRecordsFollowThePodAndItsReservations) {
  ClusterState state;
  Claim& claim = state.AddClaim(MakeClaim("ns/c"));
  // The claim names its pod before the pod informer delivers it.
  state.SetReservations(claim, {"ns/p"});
  EXPECT_EQ(state.pod_records(), 1u);
  EXPECT_FALSE(state.PodRunning("ns/p"));
  // The pod arrives running: the reserving claim is reported.
  auto changed = state.SetPod("ns/p", true, true);
  ASSERT_TRUE(changed.has_value());
  ASSERT_EQ(changed->size(), 1u);
  EXPECT_EQ((*changed)[0], &claim);
  EXPECT_TRUE(state.PodRunning("ns/p"));
  EXPECT_FALSE(state.SetPod("ns/p", true, true).has_value());  // nothing changed
  // Deleted: the record stays while the claim still reserves it.
  changed = state.SetPod("ns/p", false, true);
  ASSERT_TRUE(changed.has_value());
  EXPECT_FALSE(state.PodRunning("ns/p"));  // a pod that is gone does not run
  EXPECT_EQ(state.pod_records(), 1u);
  EXPECT_FALSE(state.SetPod("ns/p", false, false).has_value());
  // The reservation goes: nothing is left.
  state.SetReservations(claim, {});
  EXPECT_EQ(state.pod_records(), 0u);
  // A pod nobody reserves: one record while it exists, none after.
  ASSERT_TRUE(state.SetPod("ns/q", true, false).has_value());
  EXPECT_TRUE(state.SetPod("ns/q", false, false)->empty());
  EXPECT_EQ(state.pod_records(), 0u);
  EXPECT_FALSE(state.SetPod("ns/never", false, false).has_value());
}

TEST(ClusterStateTest, EqualRequestsAreShared) {
  ClusterState state;
  auto make = [](const std::string& name, const std::string& signature) {
    auto r = std::make_shared<Request>();
    r->name = name;
    r->signature = signature;
    return r;
  };
  std::shared_ptr<Request> first = state.SharedRequest(make("gpu",
                                                            "a100\x1f"
                                                            "ExactCount"));
  std::shared_ptr<Request> again = state.SharedRequest(make("gpu",
                                                            "a100\x1f"
                                                            "ExactCount"));
  EXPECT_EQ(first.get(), again.get());
  // The name is part of what explain shows: another name is another request.
  EXPECT_NE(state
                .SharedRequest(make("other",
                                    "a100\x1f"
                                    "ExactCount"))
                .get(),
            first.get());
  // Once every holder let go, an equal request is a new one.
  first.reset();
  again.reset();
  std::shared_ptr<Request> fresh = state.SharedRequest(make("gpu",
                                                            "a100\x1f"
                                                            "ExactCount"));
  EXPECT_EQ(fresh->name, "gpu");
  EXPECT_EQ(fresh.use_count(), 1);
}

// Random sequences of slice, counter set and allocation changes: after each step every index
// agrees with what a brute-force pass over the records derives.
TEST(ClusterStateTest, IndexesAgreeWithTheRecordsUnderRandomChanges) {
  std::mt19937 rng(20261204);
  auto below = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const int kNodes = 4, kDevicesPerNode = 6, kSets = 6, kClaims = 10;
  for (int round = 0; round < 20; ++round) {
    ClusterState state;
    std::vector<Claim*> claims;
    for (int c = 0; c < kClaims; ++c) {
      claims.push_back(&state.AddClaim(MakeClaim(absl::StrCat("ns/c", c))));
    }
    for (int step = 0; step < 400; ++step) {
      const int op = below(5);
      if (op == 0) {  // publish (or republish) a device
        const int n = below(kNodes);
        const std::string key = absl::StrCat("gpu/p/d", n, "-", below(kDevicesPerNode));
        std::vector<fit::CounterConsumption> consumes;
        if (below(2) == 0) {
          consumes.push_back({absl::StrCat("gpu/p/s", below(kSets)), {{"memory", 10}}});
        }
        state.RemoveDevice(key);
        std::unique_ptr<Device> device = MakeDevice(key, absl::StrCat("n", n), std::move(consumes));
        device->gpu = absl::StrCat("uuid-", below(3));  // MIG devices of one of three parents
        state.AddDevice(std::move(device));
      } else if (op == 1) {  // withdraw a device
        state.RemoveDevice(absl::StrCat("gpu/p/d", below(kNodes), "-", below(kDevicesPerNode)));
      } else if (op == 2) {  // publish or withdraw a counter set
        const std::string key = absl::StrCat("gpu/p/s", below(kSets));
        if (below(3) == 0) {
          state.RemoveCounterSet(key);
        } else {
          state.AddCounterSet(MakeSet(key, "n0", {{"memory", 40}}));
        }
      } else {  // (re)allocate a claim to up to two devices, or release it
        Claim& claim = *claims[below(kClaims)];
        std::vector<std::pair<std::string, std::string>> devices;
        std::map<std::string, std::map<std::string, double>> consumed;
        for (int i = below(3); i > 0; --i) {
          const std::string key =
              absl::StrCat("gpu/p/d", below(kNodes), "-", below(kDevicesPerNode));
          if (consumed.count(key) == 0) {
            devices.emplace_back(key, "gpu");
            consumed[key] = {};
          }
        }
        state.SetAllocations(claim, std::move(devices), std::move(consumed));
      }
      for (int s = 0; s < kSets; ++s) {
        state.RecountUsed(absl::StrCat("gpu/p/s", s));
      }

      // devices by node == the records' nodes
      std::map<std::string, std::set<std::string>> by_node;
      for (const auto& [key, device] : state.devices()) {
        ASSERT_EQ(key, device->key);
        by_node[device->node].insert(device->key);
      }
      ASSERT_EQ(state.devices_by_node().size(), by_node.size());
      for (const auto& [node, keys] : by_node) {
        ASSERT_EQ(KeysOn(state, node), keys) << node;
        // by physical GPU, then key
        const std::vector<Device*>& on_node = state.DevicesOn(node);
        ASSERT_TRUE(std::is_sorted(on_node.begin(), on_node.end(),
                                   [](const Device* a, const Device* b) {
                                     return std::tie(a->gpu, a->key) < std::tie(b->gpu, b->key);
                                   }))
            << node;
        // Each device knows the span of its GPU's devices.
        for (size_t first = 0; first < on_node.size();) {
          size_t end = first;
          while (end < on_node.size() && on_node[end]->gpu == on_node[first]->gpu) {
            ++end;
          }
          for (size_t i = first; i < end; ++i) {
            ASSERT_EQ(on_node[i]->gpu_first, first) << on_node[i]->key;
            ASSERT_EQ(on_node[i]->gpu_devices, end - first) << on_node[i]->key;
            const absl::Span<Device* const> gpu = state.GpuOf(*on_node[i]);
            ASSERT_EQ(gpu.size(), end - first);
            ASSERT_EQ(gpu.front(), on_node[first]);
          }
          first = end;
        }
      }
      // holders == the claims' own devices, and a counter set's consumers and use
      std::map<std::string, std::set<std::string>> holders;
      for (Claim* claim : claims) {
        ASSERT_EQ(claim->device_records.size(), claim->devices.size()) << claim->key;
        for (size_t i = 0; i < claim->devices.size(); ++i) {
          const std::string& device = claim->devices[i].first;
          holders[device].insert(claim->key);
          // A claim reaches the record of each device it holds, null while it is withdrawn.
          ASSERT_EQ(claim->device_records[i], state.FindDevice(device)) << claim->key << device;
        }
      }
      for (int s = 0; s < kSets; ++s) {
        const std::string set_key = absl::StrCat("gpu/p/s", s);
        const CounterSet* set = state.FindCounterSet(set_key);
        if (set == nullptr) {
          continue;
        }
        std::set<std::string> consumers;
        double used = 0;
        for (const auto& [key, device] : state.devices()) {
          for (const auto& [consumed_set, counters] : device->consumes) {
            if (consumed_set == set_key) {
              consumers.insert(device->key);
              if (holders.count(device->key) > 0) {
                used += counters.at("memory");
              }
            }
          }
        }
        ASSERT_EQ(set->devices, consumers) << set_key;
        ASSERT_DOUBLE_EQ(40 - *state.CounterLeft(set_key, "memory"), used) << set_key;
      }
      for (const auto& [device, keys] : holders) {
        const ClusterState::Holders* h = state.HoldersOf(device);
        ASSERT_NE(h, nullptr) << device;
        std::vector<std::string> got;
        for (const auto& [claim, consumed] : *h) {
          got.push_back(claim->key);
        }
        ASSERT_EQ(got, std::vector<std::string>(keys.begin(), keys.end())) << device;
      }
    }
  }
}

}  // namespace
}  // namespace dralens::exporter::cluster
