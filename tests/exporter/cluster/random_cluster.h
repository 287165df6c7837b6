// Random clusters for the physical GPU property tests (gpu_truth_test.cc): full GPUs,
// consumable shares, static and dynamic MIG, device taints, NotReady and gone nodes, and
// classes that overlap, with the model of each GPU the expectations come from.
#pragma once

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/exporter/cluster/scenario_util.h"

namespace dralens::exporter::cluster::testing {

using nlohmann::json;

inline const char* const kProducts[] = {"H100", "A100", "L40S"};

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

}  // namespace dralens::exporter::cluster::testing
