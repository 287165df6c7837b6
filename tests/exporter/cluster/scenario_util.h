// Helpers for the cluster analyzer tests: objects for the embedded API server, and reading
// series back from a registry.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exporter/cluster/analyzer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"

namespace dralens::exporter::cluster::testing {

inline constexpr char kDriver[] = "gpu.dralens.dev";

struct DeviceSpec {
  std::string name;
  std::string type;     // gpu | mig
  std::string product;  // productName
  std::string uuid;
  std::string profile;  // MIG profile, "" for none
  std::string counter_set;
  int counters = 0;  // memory-slices consumed from counter_set
  bool tainted = false;
};

inline nlohmann::json Slice(const std::string& node, const std::vector<DeviceSpec>& devices,
                            const std::map<std::string, int>& counter_sets = {}) {
  nlohmann::json slice = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceSlice"},
      {"metadata", {{"name", node + "-gpus"}}},
      {"spec",
       {{"driver", kDriver},
        {"nodeName", node},
        {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
        {"devices", nlohmann::json::array()}}}};
  for (const auto& [set, slices] : counter_sets) {
    slice["spec"]["sharedCounters"].push_back(
        {{"name", set}, {"counters", {{"memory-slices", {{"value", std::to_string(slices)}}}}}});
  }
  for (const DeviceSpec& d : devices) {
    nlohmann::json dev = {{"name", d.name},
                          {"attributes",
                           {{"type", {{"string", d.type}}},
                            {"productName", {{"string", d.product}}},
                            {"uuid", {{"string", d.uuid}}}}}};
    if (!d.profile.empty()) {
      dev["attributes"]["profile"] = {{"string", d.profile}};
    }
    if (!d.counter_set.empty()) {
      dev["consumesCounters"] = nlohmann::json::array(
          {{{"counterSet", d.counter_set},
            {"counters", {{"memory-slices", {{"value", std::to_string(d.counters)}}}}}}});
    }
    if (d.tainted) {
      dev["taints"] =
          nlohmann::json::array({{{"key", "dralens.dev/xid"}, {"effect", "NoSchedule"}}});
    }
    slice["spec"]["devices"].push_back(dev);
  }
  return slice;
}

// `n` whole H100s named gpu-0.., with UUIDs unique to `node`; the last one tainted if asked.
inline std::vector<DeviceSpec> WholeGpus(const std::string& node, int n,
                                         bool tainted_last = false) {
  std::vector<DeviceSpec> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({.name = "gpu-" + std::to_string(i),
                   .type = "gpu",
                   .product = "H100",
                   .uuid = node + "-GPU-" + std::to_string(i),
                   .profile = "",
                   .counter_set = "",
                   .counters = 0,
                   .tainted = tainted_last && i == n - 1});
  }
  return out;
}

inline nlohmann::json Class(const std::string& name, const std::string& cel) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "DeviceClass"},
          {"metadata", {{"name", name}}},
          {"spec", {{"selectors", nlohmann::json::array({{{"cel", {{"expression", cel}}}}})}}}};
}

inline nlohmann::json Claim(const std::string& ns, const std::string& name,
                            const std::string& device_class, const std::string& selector = "",
                            int count = 1) {
  nlohmann::json exactly = {{"deviceClassName", device_class}, {"count", count}};
  if (!selector.empty()) {
    exactly["selectors"] = nlohmann::json::array({{{"cel", {{"expression", selector}}}}});
  }
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"namespace", ns}, {"name", name}}},
          {"spec",
           {{"devices",
             {{"requests", nlohmann::json::array({{{"name", "req"}, {"exactly", exactly}}})}}}}}};
}

// Claim `name` of namespace "team" (class "gpu", uid "uid-<name>") allocated `devices` of pool
// `node`, one request "req" for all of them.
inline nlohmann::json Holding(const std::string& name, const std::vector<std::string>& devices,
                              const std::string& node = "a") {
  nlohmann::json claim = Claim("team", name, "gpu", "", static_cast<int>(devices.size()));
  claim["metadata"]["uid"] = "uid-" + name;
  for (const std::string& d : devices) {
    claim["status"]["allocation"]["devices"]["results"].push_back(
        {{"request", "req"}, {"driver", kDriver}, {"pool", node}, {"device", d}});
  }
  return claim;
}

inline nlohmann::json Node(const std::string& name, bool ready) {
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata", {{"name", name}}},
          {"status",
           {{"conditions",
             nlohmann::json::array({{{"type", "Ready"}, {"status", ready ? "True" : "False"}}})}}}};
}

// Everything an analyzer exports: the families of its registry and its text families.
class Exported : public prometheus::Collectable {
 public:
  Exported(const prometheus::Registry& registry, const Analyzer& analyzer)
      : registry_(registry), analyzer_(analyzer) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out = registry_.Collect();
    for (prometheus::MetricFamily& f : analyzer_.TextSeries()->Collect()) {
      out.push_back(std::move(f));
    }
    return out;
  }

 private:
  const prometheus::Registry& registry_;
  const Analyzer& analyzer_;
};

// The value of the one series of `family` whose labels include all of `labels` (the sample
// count for histograms); -1 when there is none; a test failure when several match.
inline double Value(const prometheus::Collectable& registry, const std::string& family,
                    const std::map<std::string, std::string>& labels) {
  double found = -1;
  int matches = 0;
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    if (f.name != family) {
      continue;
    }
    for (const prometheus::ClientMetric& m : f.metric) {
      size_t hit = 0;
      for (const prometheus::ClientMetric::Label& l : m.label) {
        auto it = labels.find(l.name);
        hit += it != labels.end() && it->second == l.value;
      }
      if (hit != labels.size()) {
        continue;
      }
      ++matches;
      switch (f.type) {
        case prometheus::MetricType::Counter:
          found = m.counter.value;
          break;
        case prometheus::MetricType::Gauge:
          found = m.gauge.value;
          break;
        case prometheus::MetricType::Histogram:
          found = static_cast<double>(m.histogram.sample_count);
          break;
        default:
          break;
      }
    }
  }
  EXPECT_LE(matches, 1) << family << " has several matching series";
  return found;
}

// One series of a family: its labels and value.
struct Sample {
  std::map<std::string, std::string> labels;
  double value = 0;
};

inline std::vector<Sample> Collect(const prometheus::Collectable& registry,
                                   const std::string& family) {
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

// A CEL reference to one of the driver's attributes: device.attributes['<driver>'].<name>.
inline std::string Attr(const std::string& name) {
  return absl::StrCat("device.attributes['", kDriver, "'].", name);
}

}  // namespace dralens::exporter::cluster::testing
