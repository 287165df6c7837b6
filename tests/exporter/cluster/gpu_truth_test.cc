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
#include <set>
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
#include "tests/exporter/cluster/scenario_util.h"

namespace dralens::exporter::cluster {
namespace {

using nlohmann::json;

constexpr char kDriver[] = "gpu.dralens.dev";
constexpr double kTolerance = 1e-9;
const char* const kProducts[] = {"H100", "A100", "L40S"};

std::string Attr(const std::string& name) {
  return absl::StrCat("device.attributes['", kDriver, "'].", name);
}

// One series of a family: its labels and value.
struct Sample {
  std::map<std::string, std::string> labels;
  double value = 0;
};

std::vector<Sample> Collect(const prometheus::Collectable& registry, const std::string& family) {
  std::vector<Sample> out;
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    if (f.name != family) {
      continue;
    }
    for (const prometheus::ClientMetric& m : f.metric) {
      Sample s;
      for (const prometheus::ClientMetric::Label& l : m.label) {
        s.labels[l.name] = l.value;
      }
      s.value = f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
      out.push_back(std::move(s));
    }
  }
  return out;
}

// The generated cluster, as objects and as the model the expectations come from.
struct Cluster {
  std::vector<json> nodes, slices, classes, claims, pods;
  std::set<std::string> gone;           // nodes with slices but no Node object
  std::map<std::string, int> physical;  // node -> GPUs
  // node -> state -> GPU-equivalents, by the model's rules.
  std::map<std::string, std::map<std::string, double>> expected;
};

class Generator {
 public:
  explicit Generator(uint32_t seed) : rng_(seed) {}

  Cluster Generate() {
    Cluster c;
    c.classes = {ClassJson("gpu", Attr("type") + " == 'gpu'"),
                 ClassJson("mig", Attr("type") + " == 'mig'"),
                 ClassJson("h100", Attr("productName") + " == 'H100'"),
                 ClassJson("any", "device.driver == '" + std::string(kDriver) + "'")};
    const int nodes = Uniform(2, 6);
    for (int n = 0; n < nodes; ++n) {
      const std::string node = absl::StrCat("node-", n);
      const int health = Uniform(0, 9);
      const bool gone = health == 0;
      const bool down = gone || health == 1;
      if (gone) {
        c.gone.insert(node);
      } else {
        c.nodes.push_back(NodeJson(node, !down));
      }
      json slice = {{"apiVersion", "resource.k8s.io/v1"},
                    {"kind", "ResourceSlice"},
                    {"metadata", {{"name", node + "-gpus"}}},
                    {"spec",
                     {{"driver", kDriver},
                      {"nodeName", node},
                      {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
                      {"devices", json::array()}}}};
      const int gpus = Uniform(1, 4);
      c.physical[node] = gpus;
      for (int g = 0; g < gpus; ++g) {
        const std::string product = kProducts[Uniform(0, 2)];
        const std::string gpu = absl::StrCat(node, "-", g);
        std::map<std::string, double>& expected = c.expected[node];
        switch (Uniform(0, 3)) {
          case 0:
            FullGpu(c, node, slice, gpu, product, down, expected);
            break;
          case 1:
            SharedGpu(c, node, slice, gpu, product, down, expected);
            break;
          case 2:
            StaticMig(c, node, slice, gpu, product, down, expected);
            break;
          default:
            DynamicMig(c, node, slice, gpu, product, down, expected);
            break;
        }
      }
      c.slices.push_back(std::move(slice));
    }
    // Pending claims of every class, some with a selector.
    const int pending = Uniform(0, 6);
    for (int i = 0; i < pending; ++i) {
      const char* const classes[] = {"gpu", "mig", "h100", "any"};
      std::string selector;
      if (Uniform(0, 2) == 0) {
        selector = Attr("productName") + " == '" + kProducts[Uniform(0, 2)] + "'";
      }
      c.claims.push_back(ClaimJson(absl::StrCat("pending-", i), classes[Uniform(0, 3)], selector,
                                   Uniform(0, 100)));
    }
    return c;
  }

 private:
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  static json ClassJson(const std::string& name, const std::string& cel) {
    return {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "DeviceClass"},
            {"metadata", {{"name", name}}},
            {"spec", {{"selectors", json::array({{{"cel", {{"expression", cel}}}}})}}}};
  }

  static json NodeJson(const std::string& name, bool ready) {
    return {{"apiVersion", "v1"},
            {"kind", "Node"},
            {"metadata", {{"name", name}}},
            {"status",
             {{"conditions",
               json::array({{{"type", "Ready"}, {"status", ready ? "True" : "Unknown"}}})}}}};
  }

  json ClaimJson(const std::string& name, const std::string& cls, const std::string& selector,
                 int created_minute) {
    json exactly = {{"deviceClassName", cls}};
    if (!selector.empty()) {
      exactly["selectors"] = json::array({{{"cel", {{"expression", selector}}}}});
    }
    return {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceClaim"},
        {"metadata",
         {{"namespace", "team"},
          {"name", name},
          {"uid", "uid-" + name},
          {"creationTimestamp",
           absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                            absl::FromUnixSeconds(1800000000 + 60 * created_minute),
                            absl::UTCTimeZone())}}},
        {"spec",
         {{"devices", {{"requests", json::array({{{"name", "req"}, {"exactly", exactly}}})}}}}}};
  }

  // A claim of `cls` allocated to `device` (consuming `memory_gib` of it when > 0), with a pod
  // that runs or not, or no pod at all.
  void Hold(Cluster& c, const std::string& node, const std::string& device, const std::string& cls,
            int memory_gib = 0) {
    const std::string name = absl::StrCat("held-", held_++);
    json claim = ClaimJson(name, cls, "", Uniform(0, 100));
    json result = {{"request", "req"}, {"driver", kDriver}, {"pool", node}, {"device", device}};
    if (memory_gib > 0) {
      result["consumedCapacity"] = {{"memory", absl::StrCat(memory_gib, "Gi")}};
    }
    claim["status"]["allocation"]["devices"]["results"] = json::array({result});
    const int pod = Uniform(0, 2);
    if (pod > 0) {
      const std::string pod_name = "pod-" + name;
      claim["status"]["reservedFor"] =
          json::array({{{"resource", "pods"}, {"name", pod_name}, {"uid", "uid-" + pod_name}}});
      c.pods.push_back({{"apiVersion", "v1"},
                        {"kind", "Pod"},
                        {"metadata", {{"namespace", "team"}, {"name", pod_name}}},
                        {"spec", {{"containers", json::array({{{"name", "c"}, {"image", "x"}}})}}},
                        {"status", {{"phase", pod == 1 ? "Running" : "Pending"}}}});
    }
    c.claims.push_back(std::move(claim));
  }

  // A blocking taint (0), an informational one (1) or none.
  json Taint(bool blocking) {
    if (blocking) {
      return json::array(
          {{{"key", "gpu.dralens.dev/xid"}, {"value", "79"}, {"effect", "NoSchedule"}}});
    }
    return json::array({{{"key", "gpu.dralens.dev/note"}, {"effect", "None"}}});
  }

  json BaseDevice(const std::string& name, const std::string& type, const std::string& product) {
    return {{"name", name},
            {"attributes",
             {{"type", {{"string", type}}},
              {"productName", {{"string", product}}},
              {"uuid", {{"string", "GPU-" + name}}}}},
            {"capacity", {{"memory", {{"value", "80Gi"}}}}}};
  }

  void FullGpu(Cluster& c, const std::string& node, json& slice, const std::string& gpu,
               const std::string& product, bool down, std::map<std::string, double>& expected) {
    json device = BaseDevice(gpu, "gpu", product);
    const int taint = Uniform(0, 5);
    if (taint <= 1) {
      device["taints"] = Taint(taint == 0);
    }
    const bool tainted = taint == 0;
    const bool held = Uniform(0, 1) == 0;
    if (held) {
      Hold(c, node, gpu, Uniform(0, 1) == 0 ? "gpu" : "any");
    }
    expected[down || tainted ? "unavailable" : held ? "allocated" : "free"] += 1;
    slice["spec"]["devices"].push_back(std::move(device));
  }

  // Consumable memory in GiB shares: each holder takes some of the 80 GiB.
  void SharedGpu(Cluster& c, const std::string& node, json& slice, const std::string& gpu,
                 const std::string& product, bool down, std::map<std::string, double>& expected) {
    json device = BaseDevice(gpu, "gpu", product);
    device["allowMultipleAllocations"] = true;
    const bool tainted = Uniform(0, 5) == 0;
    if (tainted) {
      device["taints"] = Taint(true);
    }
    int used = 0;
    const int shares = Uniform(0, 3);
    for (int i = 0; i < shares; ++i) {
      const int gib = 10 * Uniform(1, 3);
      if (used + gib > 80) {
        break;
      }
      used += gib;
      Hold(c, node, gpu, "gpu", gib);
    }
    const double held = used / 80.0;
    if (down || tainted) {
      expected["unavailable"] += 1;
    } else {
      expected["allocated"] += held;
      expected["free"] += 1 - held;
    }
    slice["spec"]["devices"].push_back(std::move(device));
  }

  // Static MIG: the parent is not published; its instances carry their memory slices.
  void StaticMig(Cluster& c, const std::string& node, json& slice, const std::string& gpu,
                 const std::string& product, bool down, std::map<std::string, double>& expected) {
    // A layout of 8 memory slices: (start, size) per instance.
    const std::vector<std::vector<std::pair<int, int>>> layouts = {
        {{0, 4}, {4, 4}}, {{0, 2}, {2, 2}, {4, 4}}, {{0, 1}, {1, 1}, {2, 2}, {4, 2}, {6, 2}}};
    const auto& layout = layouts[Uniform(0, 2)];
    for (const auto& [start, size] : layout) {
      const std::string name = absl::StrCat(gpu, "-mig-", start);
      json device = BaseDevice(name, "mig", product);
      device["attributes"]["parentUUID"] = {{"string", "GPU-" + gpu}};
      device["attributes"]["profile"] = {{"string", absl::StrCat(size, "g")}};
      device["capacity"] = {{"memory", {{"value", absl::StrCat(10 * size, "Gi")}}}};
      for (int s = start; s < start + size; ++s) {
        device["capacity"][absl::StrCat("memorySlice", s)] = {{"value", "1"}};
      }
      const bool tainted = Uniform(0, 7) == 0;
      if (tainted) {
        device["taints"] = Taint(true);
      }
      const bool held = Uniform(0, 2) == 0;
      if (held) {
        Hold(c, node, name, Uniform(0, 1) == 0 ? "mig" : "any");
      }
      expected[down || tainted ? "unavailable" : held ? "allocated" : "free"] += size / 8.0;
      slice["spec"]["devices"].push_back(std::move(device));
    }
  }

  // Dynamic MIG: a counter set of 8 memory slices, the full GPU consuming all of them and
  // placements of 1, 2 and 4 slices; a few non-overlapping placements are held.
  void DynamicMig(Cluster& c, const std::string& node, json& slice, const std::string& gpu,
                  const std::string& product, bool down, std::map<std::string, double>& expected) {
    const std::string set = gpu + "-counters";
    json counters = json::object();
    for (int s = 0; s < 8; ++s) {
      counters[absl::StrCat("memory-slice-", s)] = {{"value", "1"}};
    }
    counters["multiprocessors"] = {{"value", "132"}};
    slice["spec"]["sharedCounters"].push_back({{"name", set}, {"counters", counters}});
    // Either the whole GPU is tainted (it went unhealthy) or nothing is.
    const bool tainted = Uniform(0, 5) == 0;
    auto device = [&](const std::string& name, const std::string& type, int start, int size) {
      json d = BaseDevice(name, type, product);
      json consumed = {{"multiprocessors", {{"value", std::to_string(132 * size / 8)}}}};
      for (int s = start; s < start + size; ++s) {
        consumed[absl::StrCat("memory-slice-", s)] = {{"value", "1"}};
      }
      d["consumesCounters"] = json::array({{{"counterSet", set}, {"counters", consumed}}});
      if (tainted) {
        d["taints"] = Taint(true);
      }
      if (type == "mig") {
        // A placement has no UUID of its own until it is created: only its parent's.
        d["attributes"].erase("uuid");
        d["attributes"]["parentUUID"] = {{"string", "GPU-" + gpu}};
        d["attributes"]["profile"] = {{"string", absl::StrCat(size, "g")}};
      }
      slice["spec"]["devices"].push_back(std::move(d));
    };
    const bool whole = Uniform(0, 4) == 0;
    device(gpu, "gpu", 0, 8);
    for (int size : {1, 2, 4}) {
      for (int start = 0; start < 8; start += size) {
        device(absl::StrCat(gpu, "-", size, "g-", start), "mig", start, size);
      }
    }
    double held = 0;
    if (whole) {
      Hold(c, node, gpu, "gpu");
      held = 1;
    } else {
      // Hold some of a random tiling of the GPU into 4 + 2 + 1 + 1 slices.
      const std::vector<std::pair<int, int>> tiles = {{0, 4}, {4, 2}, {6, 1}, {7, 1}};
      for (const auto& [start, size] : tiles) {
        if (Uniform(0, 2) == 0) {
          Hold(c, node, absl::StrCat(gpu, "-", size, "g-", start), Uniform(0, 1) ? "mig" : "h100");
          held += size / 8.0;
        }
      }
    }
    if (down || tainted) {
      expected["unavailable"] += 1;
    } else {
      expected["allocated"] += held;
      expected["free"] += 1 - held;
    }
  }

  std::mt19937 rng_;
  int held_ = 0;
};

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

// Free MIG capacity that no pending request fits is an unplaceable fragment, of no class; once
// a pending request fits a free device, the same capacity is free_while_pending instead.
TEST(GpuTruthFragmentTest, FreeMigCapacityNoPendingRequestFits) {
  prometheus::Registry registry;
  telemetry::NoopTracer tracer;
  common::FakeClock clock;
  Analyzer analyzer(registry, tracer, AnalyzerOptions{{}, &clock});
  auto mig = [](const std::string& name, int start, int size) {
    json d = {{"name", name},
              {"attributes",
               {{"type", {{"string", "mig"}}},
                {"productName", {{"string", "A100"}}},
                {"parentUUID", {{"string", "GPU-0"}}},
                {"profile", {{"string", absl::StrCat(size, "g")}}}}},
              {"capacity", json::object()}};
    for (int s = start; s < start + size; ++s) {
      d["capacity"][absl::StrCat("memorySlice", s)] = {{"value", "1"}};
    }
    return d;
  };
  json slice = {{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceSlice"},
                {"metadata", {{"name", "n-gpus"}}},
                {"spec",
                 {{"driver", kDriver},
                  {"nodeName", "n"},
                  {"pool", {{"name", "n"}, {"generation", 1}, {"resourceSliceCount", 1}}},
                  {"devices", json::array({mig("mig-4g-0", 0, 4), mig("mig-2g-4", 4, 2),
                                           mig("mig-2g-6", 6, 2)})}}}};
  auto claim = [](const std::string& name, const std::string& profile, int minute) {
    return json{
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceClaim"},
        {"metadata",
         {{"namespace", "team"},
          {"name", name},
          {"uid", "uid-" + name},
          {"creationTimestamp", absl::StrCat("2026-11-25T10:", 10 + minute, ":00Z")}}},
        {"spec",
         {{"devices",
           {{"requests",
             json::array({{{"name", "req"},
                           {"exactly",
                            {{"deviceClassName", "mig"},
                             {"selectors",
                              json::array({{{"cel",
                                             {{"expression", Attr("profile") + " == '" + profile +
                                                                 "'"}}}}})}}}}})}}}}}};
  };
  json held = claim("held", "4g", 0);
  held["status"]["allocation"]["devices"]["results"] = json::array(
      {{{"request", "req"}, {"driver", kDriver}, {"pool", "n"}, {"device", "mig-4g-0"}}});
  HandlersFor(k8s::kDeviceClasses, analyzer)
      .on_add({{"apiVersion", "resource.k8s.io/v1"},
               {"kind", "DeviceClass"},
               {"metadata", {{"name", "mig"}}},
               {"spec",
                {{"selectors",
                  json::array({{{"cel", {{"expression", Attr("type") + " == 'mig'"}}}}})}}}});
  HandlersFor(k8s::kNodes, analyzer)
      .on_add(
          {{"apiVersion", "v1"},
           {"kind", "Node"},
           {"metadata", {{"name", "n"}}},
           {"status", {{"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}});
  HandlersFor(k8s::kResourceSlices, analyzer).on_add(slice);
  k8s::InformerHandlers claims = HandlersFor(k8s::kResourceClaims, analyzer);
  claims.on_add(held);
  claims.on_add(claim("big", "3g", 1));  // no 3g instance exists
  analyzer.SetNodesSynced();

  auto stranded = [&](const std::string& kind, const std::string& cls) {
    double sum = -1;
    for (const Sample& s :
         Collect(testing::Exported(registry, analyzer), "dralens_cluster_stranded_gpus")) {
      if (s.labels.at("kind") == kind && s.labels.at("device_class") == cls) {
        sum = std::max(sum, 0.0) + s.value;
      }
    }
    return sum;
  };
  // Half the GPU (the two free 2g instances) fits nothing that pends.
  EXPECT_DOUBLE_EQ(stranded("unplaceable_fragment", ""), 0.5);
  EXPECT_DOUBLE_EQ(stranded("allocated_not_running", "mig"), 0.5);
  EXPECT_LE(stranded("free_while_pending", "mig"), 0);

  // A 2g claim pends too: the free half could serve it.
  claims.on_add(claim("small", "2g", 2));
  EXPECT_DOUBLE_EQ(stranded("free_while_pending", "mig"), 0.5);
  EXPECT_LE(stranded("unplaceable_fragment", ""), 0);
}

// An analyzer on a fake clock, fed through the handlers its informers would call.
class FedAnalyzerTest : public ::testing::Test {
 protected:
  void Add(const k8s::ResourceType& type, const json& object) {
    HandlersFor(type, analyzer_).on_add(object);
  }
  // A class, a Ready node and its slice of whole GPUs.
  void AddClass(const std::string& name, const std::string& cel) {
    Add(k8s::kDeviceClasses, testing::Class(name, cel));
  }
  void AddNode(const std::string& node, const std::vector<testing::DeviceSpec>& gpus) {
    Add(k8s::kNodes, testing::Node(node, true));
    Add(k8s::kResourceSlices, testing::Slice(node, gpus));
  }
  // GPUs stranded free_while_pending for `cls` (on `node`, or on every node).
  double FreeWhilePending(const std::string& cls, const std::string& node = "") {
    double sum = 0;
    for (const Sample& s :
         Collect(testing::Exported(registry_, analyzer_), "dralens_cluster_stranded_gpus")) {
      if (s.labels.at("kind") == "free_while_pending" && s.labels.at("device_class") == cls &&
          (node.empty() || s.labels.at("node") == node)) {
        sum += s.value;
      }
    }
    return sum;
  }

  prometheus::Registry registry_;
  telemetry::NoopTracer tracer_;
  common::FakeClock clock_;
  Analyzer analyzer_{registry_, tracer_, AnalyzerOptions{{}, &clock_}};
  k8s::InformerHandlers claims_ = HandlersFor(k8s::kResourceClaims, analyzer_);
};

// free_while_pending goes to the class of the longest-pending claim the free GPUs could serve.
// When a shape's longest-pending claim changes, a node's class moves only if another class
// pends between the old and the new one (or the two differ); the analyzer recomputes the
// shape's nodes only then, and must not miss that case.
TEST_F(FedAnalyzerTest, FreeWhilePendingFollowsTheLongestPendingClaimAcrossShapes) {
  AddClass("gpu", Attr("type") + " == 'gpu'");
  AddClass("big", Attr("type") + " == 'gpu'");
  AddNode("a", testing::WholeGpus("a", 2));
  auto claim = [](const std::string& name, const std::string& cls, int minute) {
    json c = testing::Claim("team", name, cls);
    c["metadata"]["uid"] = "uid-" + name;
    c["metadata"]["creationTimestamp"] = absl::StrCat("2026-11-25T10:", 20 + minute, ":00Z");
    return c;
  };
  claims_.on_add(claim("x1", "gpu", 1));
  claims_.on_add(claim("y1", "big", 2));
  claims_.on_add(claim("x2", "gpu", 3));
  analyzer_.SetNodesSynced();
  EXPECT_DOUBLE_EQ(FreeWhilePending("gpu"), 2);  // x1 pends longest
  EXPECT_DOUBLE_EQ(FreeWhilePending("big"), 0);

  // x1 is allocated gpu-0: its shape's longest-pending claim is now x2, of the same class, but
  // y1 (big) pends longer than x2. The free gpu-1 moves to big.
  json x1 = claim("x1", "gpu", 1);
  x1["status"]["allocation"]["devices"]["results"] =
      json::array({{{"request", "req"}, {"driver", kDriver}, {"pool", "a"}, {"device", "gpu-0"}}});
  claims_.on_update(claim("x1", "gpu", 1), x1);
  EXPECT_DOUBLE_EQ(FreeWhilePending("big"), 1);
  EXPECT_DOUBLE_EQ(FreeWhilePending("gpu"), 0);

  // y1 goes: x2 is the longest-pending claim.
  claims_.on_delete(claim("y1", "big", 2));
  EXPECT_DOUBLE_EQ(FreeWhilePending("gpu"), 1);
  EXPECT_DOUBLE_EQ(FreeWhilePending("big"), 0);

  // y0 (big) pends longer than x2: the class moves back to big.
  claims_.on_add(claim("y0", "big", -1));
  EXPECT_DOUBLE_EQ(FreeWhilePending("big"), 1);
  EXPECT_DOUBLE_EQ(FreeWhilePending("gpu"), 0);

  // x0 (gpu) pends longer than y0: gpu again, though x2 (gpu) was its shape's first already.
  claims_.on_add(claim("x0", "gpu", -2));
  EXPECT_DOUBLE_EQ(FreeWhilePending("gpu"), 1);
  EXPECT_DOUBLE_EQ(FreeWhilePending("big"), 0);

  // y0 goes, then x4 (gpu) becomes its shape's first with nothing in between: still gpu.
  claims_.on_delete(claim("y0", "big", -1));
  claims_.on_add(claim("x4", "gpu", -3));
  EXPECT_DOUBLE_EQ(FreeWhilePending("gpu"), 1);
  EXPECT_DOUBLE_EQ(FreeWhilePending("big"), 0);
}

// A request shape orders its pending claims by creation time, then by key: claims created in
// the same instant are each kept, and each gets its reason when the counts move.
TEST_F(FedAnalyzerTest, ClaimsCreatedInTheSameInstantEachFollowTheirShape) {
  AddClass("gpu", Attr("type") + " == 'gpu'");
  AddNode("a", testing::WholeGpus("a", 1));
  auto claim = [](const std::string& name) {
    json c = testing::Claim("team", name, "gpu");
    c["metadata"]["uid"] = "uid-" + name;
    c["metadata"]["creationTimestamp"] = "2026-11-25T10:20:00Z";
    return c;
  };
  analyzer_.SetNodesSynced();
  for (const char* name : {"x3", "x1", "x2"}) {
    claims_.on_add(claim(name));
  }
  for (const char* key : {"team/x1", "team/x2", "team/x3"}) {
    EXPECT_EQ(analyzer_.PendingReasonOf(key), PendingReason::kWaitingForPod) << key;
  }
  // The only GPU is taken: every one of them now lacks capacity.
  claims_.on_add(testing::Holding("holder", {"gpu-0"}));
  for (const char* key : {"team/x1", "team/x2", "team/x3"}) {
    EXPECT_EQ(analyzer_.PendingReasonOf(key), PendingReason::kNoCapacity) << key;
  }
  // One of them goes; the others stay in their shape and follow the GPU when it is free again.
  claims_.on_delete(claim("x2"));
  claims_.on_delete(testing::Holding("holder", {"gpu-0"}));
  EXPECT_FALSE(analyzer_.PendingReasonOf("team/x2").has_value());
  for (const char* key : {"team/x1", "team/x3"}) {
    EXPECT_EQ(analyzer_.PendingReasonOf(key), PendingReason::kWaitingForPod) << key;
  }
}

// A claim is attributed its first request's class, so one shape can hold claims of two classes
// (a claim whose second request is of the shape's class). When such a claim leaves, its shape's
// longest-pending claim changes class and the free GPUs of the shape's nodes change class with
// it, even though no other shape pends in between.
TEST_F(FedAnalyzerTest, FreeWhilePendingFollowsAClassChangeWithinOneShape) {
  AddClass("gpu", Attr("type") + " == 'gpu'");
  // "big" only fits node b's GPU, which node a does not have.
  AddClass("big", Attr("productName") + " == 'B200'");
  AddNode("a", testing::WholeGpus("a", 1));
  std::vector<testing::DeviceSpec> big = testing::WholeGpus("b", 1);
  big[0].product = "B200";
  AddNode("b", big);
  // m: a "big" request, then a "gpu" one: class big, and pending in the gpu shape too.
  json m = testing::Claim("team", "m", "big");
  m["metadata"]["uid"] = "uid-m";
  m["metadata"]["creationTimestamp"] = "2026-11-25T10:20:00Z";
  m["spec"]["devices"]["requests"].push_back(
      {{"name", "second"}, {"exactly", {{"deviceClassName", "gpu"}, {"count", 1}}}});
  json x = testing::Claim("team", "x", "gpu");
  x["metadata"]["uid"] = "uid-x";
  x["metadata"]["creationTimestamp"] = "2026-11-25T10:21:00Z";
  claims_.on_add(m);
  claims_.on_add(x);
  analyzer_.SetNodesSynced();
  // m pends longest, and node a's GPU fits its request.
  EXPECT_DOUBLE_EQ(FreeWhilePending("big", "a"), 1);
  EXPECT_DOUBLE_EQ(FreeWhilePending("gpu", "a"), 0);
  claims_.on_delete(m);
  EXPECT_DOUBLE_EQ(FreeWhilePending("gpu", "a"), 1);  // x now
  EXPECT_DOUBLE_EQ(FreeWhilePending("big", "a"), 0);
}

INSTANTIATE_TEST_SUITE_P(RandomClusters, GpuTruthTest, ::testing::Range(1u, 61u));

}  // namespace
}  // namespace dralens::exporter::cluster
