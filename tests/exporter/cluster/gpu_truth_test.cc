// Property tests of the physical GPU families over randomly generated clusters: full GPUs,
// consumable shares, static MIG and dynamic MIG (a counter set with its placements), device
// taints (blocking and informational), NotReady and gone nodes, and classes that overlap.
//
// For every cluster the test keeps its own model of each GPU (what is held, by whom, what is
// tainted) and checks the analyzer against it:
//   - dralens_cluster_gpus summed over any labels is the physical count, and per node and state
//     it is what the model says;
//   - stranded GPUs never exceed their state's share (advertised_unhealthy <= unavailable,
//     allocated_not_running <= allocated, free_while_pending + unplaceable_fragment <= free);
//   - after a quiet interval, GPU-seconds = gauge x interval and cost = GPU-seconds x price.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/feed.h"
#include "exporter/cluster/pricing.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/k8s/projection.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "tests/exporter/cluster/random_cluster.h"
#include "tests/exporter/cluster/scenario_util.h"

namespace dralens::exporter::cluster {
namespace {

using nlohmann::json;
using testing::Cluster;
using testing::Collect;
using testing::Generator;
using testing::kDriver;
using testing::kProducts;
using testing::Sample;

constexpr double kTolerance = 1e-9;

class GpuTruthTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GpuTruthTest, PhysicalCountsStrandedBoundsAndCost) {
  Cluster cluster = Generator(GetParam()).Generate();
  prometheus::Registry registry;
  telemetry::NoopTracer tracer;
  common::FakeClock clock;
  auto prices = PriceTable::Parse(
      R"({"default": 1.5, "deviceClasses": {"mig": 0.8}, "products": {"H100": 4.0}})", 0);
  ASSERT_TRUE(prices.ok()) << prices.status();
  // Every third cluster is derived once after the whole feed, as the cluster role does.
  AnalyzerOptions options{*prices, &clock};
  options.derive_after_sync = GetParam() % 3 == 0;
  Analyzer analyzer(registry, tracer, options);
  auto feed = [&](const k8s::ResourceType& type, const std::vector<json>& objects) {
    k8s::InformerHandlers h = HandlersFor(type, analyzer);
    for (const json& o : objects) {
      h.on_add(o);
    }
  };
  // Claims and pods before slices and classes on odd seeds: the order must not matter.
  if (GetParam() % 2 == 1) {
    feed(k8s::kPods, cluster.pods);
    feed(k8s::kResourceClaims, cluster.claims);
  }
  feed(k8s::kDeviceClasses, cluster.classes);
  feed(k8s::kNodes, cluster.nodes);
  feed(k8s::kResourceSlices, cluster.slices);
  if (GetParam() % 2 == 0) {
    feed(k8s::kResourceClaims, cluster.claims);
    feed(k8s::kPods, cluster.pods);
  }
  analyzer.SetNodesSynced();
  analyzer.SetSynced();

  // dralens_cluster_gpus: per node and state as modelled; summed, the physical count.
  std::map<std::string, std::map<std::string, double>> got;
  std::map<std::string, std::map<std::string, double>> by_product_state;  // node|product -> state
  double total = 0;
  int physical = 0;
  for (const Sample& s : Collect(testing::Exported(registry, analyzer), "dralens_cluster_gpus")) {
    got[s.labels.at("node")][s.labels.at("state")] += s.value;
    by_product_state[s.labels.at("node") + "|" + s.labels.at("product")][s.labels.at("state")] +=
        s.value;
    EXPECT_EQ(s.labels.at("driver"), kDriver);
    total += s.value;
  }
  for (const auto& [node, count] : cluster.physical) {
    physical += count;
    double sum = 0;
    for (const char* state : {"free", "allocated", "unavailable"}) {
      const double want = cluster.expected[node][state];
      EXPECT_NEAR(got[node][state], want, kTolerance) << node << " " << state;
      sum += got[node][state];
    }
    EXPECT_NEAR(sum, count, kTolerance) << node;
  }
  EXPECT_NEAR(total, physical, kTolerance);

  // Stranded: each kind within the share of its state, per node and product.
  std::map<std::string, std::map<std::string, double>> stranded;  // node|product -> kind
  for (const Sample& s :
       Collect(testing::Exported(registry, analyzer), "dralens_cluster_stranded_gpus")) {
    EXPECT_GE(s.value, 0);
    stranded[s.labels.at("node") + "|" + s.labels.at("product")][s.labels.at("kind")] += s.value;
    if (s.labels.at("kind") == "unplaceable_fragment") {
      EXPECT_EQ(s.labels.at("device_class"), "");
    }
  }
  for (auto& [key, kinds] : stranded) {
    std::map<std::string, double>& states = by_product_state[key];
    EXPECT_LE(kinds["advertised_unhealthy"], states["unavailable"] + kTolerance) << key;
    EXPECT_LE(kinds["allocated_not_running"], states["allocated"] + kTolerance) << key;
    EXPECT_LE(kinds["free_while_pending"] + kinds["unplaceable_fragment"],
              states["free"] + kTolerance)
        << key;
    double all = 0;
    for (const auto& [kind, value] : kinds) {
      all += value;
    }
    EXPECT_LE(all, states["free"] + states["allocated"] + states["unavailable"] + kTolerance)
        << key;
  }

  // Ten quiet minutes: GPU-seconds = gauge x 600, cost = GPU-seconds x price per GPU-hour.
  clock.Advance(absl::Minutes(10));
  analyzer.Tick();
  std::map<std::map<std::string, std::string>, double> gauges;
  for (const Sample& s :
       Collect(testing::Exported(registry, analyzer), "dralens_cluster_stranded_gpus")) {
    gauges[s.labels] = s.value;
  }
  std::map<std::map<std::string, std::string>, double> seconds;
  for (const Sample& s : Collect(testing::Exported(registry, analyzer),
                                 "dralens_cluster_stranded_gpu_seconds_total")) {
    seconds[s.labels] = s.value;
  }
  EXPECT_EQ(seconds.size(), gauges.size());
  for (const Sample& s :
       Collect(testing::Exported(registry, analyzer), "dralens_cluster_stranded_cost_total")) {
    ASSERT_EQ(seconds.count(s.labels), 1u);
    const double gpu_seconds = seconds[s.labels];
    EXPECT_NEAR(gpu_seconds, gauges[s.labels] * 600, 1e-6);
    const double price = prices->PriceOf(s.labels.at("device_class"), s.labels.at("product"));
    EXPECT_NEAR(s.value, gpu_seconds * price / 3600, 1e-9);
  }

  // Showback: what claims held over the ten minutes is every allocated GPU-equivalent, plus the
  // held parts that are unavailable now; never the free ones. allocated_not_running covers at
  // least what is stranded as such (which leaves out the unavailable parts).
  double allocated = 0, unavailable = 0, not_running_stranded = 0;
  for (const auto& [key, states] : by_product_state) {
    allocated += states.count("allocated") > 0 ? states.at("allocated") : 0;
    unavailable += states.count("unavailable") > 0 ? states.at("unavailable") : 0;
  }
  for (const auto& [labels, value] : gauges) {
    if (labels.at("kind") == "allocated_not_running") {
      not_running_stranded += value;
    }
  }
  std::map<std::map<std::string, std::string>, double> held;
  double held_total = 0, held_not_running = 0;
  for (const Sample& s :
       Collect(testing::Exported(registry, analyzer), "dralens_cluster_gpu_seconds_total")) {
    EXPECT_GE(s.value, 0);
    held[s.labels] = s.value;
    held_total += s.value;
    if (s.labels.at("state") == "allocated_not_running") {
      held_not_running += s.value;
    } else {
      EXPECT_EQ(s.labels.at("state"), "in_use");
    }
  }
  EXPECT_GE(held_total, allocated * 600 - 1e-6);
  EXPECT_LE(held_total, (allocated + unavailable) * 600 + 1e-6);
  EXPECT_GE(held_not_running, not_running_stranded * 600 - 1e-6);
  // Cost: the class's price where the class has one, else between the products' prices.
  for (const Sample& s :
       Collect(testing::Exported(registry, analyzer), "dralens_cluster_cost_total")) {
    ASSERT_EQ(held.count(s.labels), 1u);
    const double gpu_seconds = held[s.labels];
    if (s.labels.at("device_class") == "mig") {
      EXPECT_NEAR(s.value, gpu_seconds * 0.8 / 3600, 1e-9);
    } else {
      EXPECT_GE(s.value, gpu_seconds * 1.5 / 3600 - 1e-9);
      EXPECT_LE(s.value, gpu_seconds * 4.0 / 3600 + 1e-9);
    }
  }
}

// Series of the derived families that are not zero, for comparing two analyzers.
std::map<std::string, double> NonZeroSeries(const prometheus::Collectable& registry) {
  std::map<std::string, double> out;
  for (const char* family :
       {"dralens_cluster_gpus", "dralens_cluster_stranded_gpus", "dralens_cluster_pending_claims",
        "dralens_cluster_claims", "dralens_cluster_pool_devices"}) {
    for (const Sample& s : Collect(registry, family)) {
      if (std::abs(s.value) < kTolerance) {
        continue;
      }
      std::string key = family;
      for (const auto& [name, value] : s.labels) {
        absl::StrAppend(&key, " ", name, "=", value);
      }
      out[key] = s.value;
    }
  }
  return out;
}

// Incremental upkeep equals a derivation from scratch: an analyzer that saw the cluster change
// (claims released or deleted, nodes going NotReady and back, slices withdrawn and republished, a
// class deleted and recreated) exports what a fresh analyzer fed only the final objects exports.
class GpuTruthChangeTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GpuTruthChangeTest, IncrementalEqualsFromScratch) {
  Cluster cluster = Generator(GetParam()).Generate();
  std::mt19937 rng(GetParam() * 7919);
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  prometheus::Registry registry;
  telemetry::NoopTracer tracer;
  common::FakeClock clock;
  Analyzer live(registry, tracer, AnalyzerOptions{{}, &clock});
  k8s::InformerHandlers classes = HandlersFor(k8s::kDeviceClasses, live);
  k8s::InformerHandlers nodes = HandlersFor(k8s::kNodes, live);
  // The live analyzer gets its slices as the cluster role's informer hands them over: through
  // ProjectionFor, devices as text, a republish decoding only the devices whose text changed.
  // The analyzer derived from scratch below gets them whole.
  k8s::InformerHandlers slices = HandlersFor(k8s::kResourceSlices, live);
  {
    auto project = [](const json& slice) {
      absl::StatusOr<json> parsed =
          k8s::ParseProjected(slice.dump(), *ProjectionFor(k8s::kResourceSlices));
      EXPECT_TRUE(parsed.ok()) << parsed.status();
      return parsed.ok() ? *parsed : json();
    };
    k8s::InformerHandlers whole = slices;
    slices.on_add = [whole, project](const json& o) { whole.on_add(project(o)); };
    slices.on_update = [whole, project](const json& old, const json& o) {
      whole.on_update(project(old), project(o));
    };
    slices.on_delete = [whole, project](const json& o) { whole.on_delete(project(o)); };
  }
  k8s::InformerHandlers claims = HandlersFor(k8s::kResourceClaims, live);
  k8s::InformerHandlers pods = HandlersFor(k8s::kPods, live);
  for (const json& o : cluster.classes) {
    classes.on_add(o);
  }
  for (const json& o : cluster.nodes) {
    nodes.on_add(o);
  }
  for (const json& o : cluster.slices) {
    slices.on_add(o);
  }
  for (const json& o : cluster.claims) {
    claims.on_add(o);
  }
  for (const json& o : cluster.pods) {
    pods.on_add(o);
  }
  live.SetNodesSynced();

  for (int step = 0; step < 12; ++step) {
    switch (pick(8)) {
      case 0:  // a claim goes away
        if (!cluster.claims.empty()) {
          const size_t i = pick(cluster.claims.size());
          claims.on_delete(cluster.claims[i]);
          cluster.claims.erase(cluster.claims.begin() + static_cast<long>(i));
        }
        break;
      case 1:  // a node flips readiness
        if (!cluster.nodes.empty()) {
          json& node = cluster.nodes[pick(cluster.nodes.size())];
          json& status = node["status"]["conditions"][0]["status"];
          const json old = node;
          status = status == "True" ? "Unknown" : "True";
          nodes.on_update(old, node);
        }
        break;
      case 2: {  // a slice is withdrawn, then republished
        json& slice = cluster.slices[pick(cluster.slices.size())];
        slices.on_delete(slice);
        slices.on_add(slice);
        break;
      }
      case 3: {  // a class is deleted and recreated
        const json& cls = cluster.classes[pick(cluster.classes.size())];
        classes.on_delete(cls);
        classes.on_add(cls);
        break;
      }
      case 4:  // a claim's allocation is released in place (the claim stays, pending again)
        if (!cluster.claims.empty()) {
          json& claim = cluster.claims[pick(cluster.claims.size())];
          if (claim.contains("status")) {
            const json old = claim;
            claim.erase("status");
            claims.on_update(old, claim);
          }
        }
        break;
      case 5: {  // one device of a slice gains or loses a NoSchedule taint, republished in place
        json& slice = cluster.slices[pick(cluster.slices.size())];
        json& devices = slice["spec"]["devices"];
        if (devices.empty()) {
          break;
        }
        const json old = slice;
        json& device = devices[pick(devices.size())];
        if (device.contains("taints")) {
          device.erase("taints");
        } else {
          device["taints"] = json::array(
              {{{"key", "gpu.dralens.dev/xid"}, {"value", "79"}, {"effect", "NoSchedule"}}});
        }
        slices.on_update(old, slice);
        break;
      }
      case 6: {  // one device changes what selectors read, or nothing changes at all
        json& slice = cluster.slices[pick(cluster.slices.size())];
        json& devices = slice["spec"]["devices"];
        const json old = slice;
        if (!devices.empty() && pick(2) == 0) {
          json& product = devices[pick(devices.size())]["attributes"]["productName"]["string"];
          product = kProducts[pick(std::size(kProducts))];
        }
        slices.on_update(old, slice);
        break;
      }
      case 7: {  // a slice moves to another node, its devices' text unchanged
        if (cluster.nodes.empty()) {
          break;
        }
        json& slice = cluster.slices[pick(cluster.slices.size())];
        const json old = slice;
        slice["spec"]["nodeName"] = cluster.nodes[pick(cluster.nodes.size())]["metadata"]["name"];
        slices.on_update(old, slice);
        break;
      }
      default:  // a pod starts or stops
        if (!cluster.pods.empty()) {
          json& pod = cluster.pods[pick(cluster.pods.size())];
          const json old = pod;
          pod["status"]["phase"] = pod["status"]["phase"] == "Running" ? "Succeeded" : "Running";
          pods.on_update(old, pod);
        }
        break;
    }
    // Time passes between some changes: stranded series that went to 0 are dropped once their
    // retention ends, and so are the records of nodes left with nothing; neither may change
    // what the live analyzer exports.
    clock.Advance(absl::Minutes(10 * static_cast<int64_t>(pick(2))));
    live.Tick();
  }

  prometheus::Registry fresh_registry;
  Analyzer fresh(fresh_registry, tracer, AnalyzerOptions{{}, &clock});
  for (const json& o : cluster.classes) {
    HandlersFor(k8s::kDeviceClasses, fresh).on_add(o);
  }
  for (const json& o : cluster.nodes) {
    HandlersFor(k8s::kNodes, fresh).on_add(o);
  }
  for (const json& o : cluster.slices) {
    HandlersFor(k8s::kResourceSlices, fresh).on_add(o);
  }
  for (const json& o : cluster.claims) {
    HandlersFor(k8s::kResourceClaims, fresh).on_add(o);
  }
  for (const json& o : cluster.pods) {
    HandlersFor(k8s::kPods, fresh).on_add(o);
  }
  fresh.SetNodesSynced();

  for (const json& o : cluster.claims) {
    const std::string key = "team/" + o["metadata"]["name"].get<std::string>();
    EXPECT_EQ(live.PendingReasonOf(key), fresh.PendingReasonOf(key)) << key;
    EXPECT_EQ(live.StateOf(key), fresh.StateOf(key)) << key;
  }
  const std::map<std::string, double> want =
      NonZeroSeries(testing::Exported(fresh_registry, fresh));
  const std::map<std::string, double> got = NonZeroSeries(testing::Exported(registry, live));
  for (const auto& [key, value] : want) {
    auto it = got.find(key);
    ASSERT_NE(it, got.end()) << "missing " << key;
    EXPECT_NEAR(it->second, value, kTolerance) << key;
  }
  for (const auto& [key, value] : got) {
    EXPECT_EQ(want.count(key), 1u) << "extra " << key << " = " << value;
  }
  // The fleet-wide pool family keeps zeros only for what is published: the same series, zeros
  // included, as a derivation from scratch.
  std::map<std::map<std::string, std::string>, double> want_pool, got_pool;
  for (const Sample& s :
       Collect(testing::Exported(fresh_registry, fresh), "dralens_cluster_pool_devices")) {
    want_pool[s.labels] = s.value;
  }
  for (const Sample& s :
       Collect(testing::Exported(registry, live), "dralens_cluster_pool_devices")) {
    got_pool[s.labels] = s.value;
  }
  EXPECT_EQ(got_pool, want_pool);
}

INSTANTIATE_TEST_SUITE_P(RandomChanges, GpuTruthChangeTest, ::testing::Range(1u, 41u));
INSTANTIATE_TEST_SUITE_P(RandomClusters, GpuTruthTest, ::testing::Range(1u, 61u));

}  // namespace
}  // namespace dralens::exporter::cluster
