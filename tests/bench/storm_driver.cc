// storm_driver: the cluster role's analyzer under a watch-event storm.
//
// Builds a cluster of N nodes x 8 GPUs with one claim (and one pod) per GPU plus 25 % more
// claims that can never be allocated, through the same informer handlers the cluster role
// uses (exporter/cluster/feed.h: raw JSON in, model codecs, analyzer). Then replays E watch
// updates: pods starting and stopping (50 %), claims allocated and released (40 %), a taint
// set and cleared on a slice (5 %), nodes going NotReady and back (5 %). Prints events per
// second, per-kind latency percentiles, the render time of the resulting /metrics and the
// peak RSS of the process. Not a test: it prints figures for docs/reliability.md.
//
//   ./build/tests/bench/storm_driver [--nodes=200] [--events=1000000]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/feed.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "src/k8s/client.h"
#include "src/telemetry/exposition.h"
#include "src/telemetry/tracing/tracer_provider.h"
#include "tests/bench/driver_util.h"

namespace {

using nlohmann::json;
namespace cluster = dralens::exporter::cluster;
namespace k8s = dralens::k8s;

constexpr char kDriver[] = "gpu.dralens.dev";
constexpr int kGpusPerNode = 8;

std::string NodeName(int n) { return absl::StrCat("node-", n); }

json Slice(int n, bool tainted) {
  json devices = json::array();
  for (int g = 0; g < kGpusPerNode; ++g) {
    json d = {{"name", absl::StrCat("gpu-", g)},
              {"attributes",
               {{"type", {{"string", "gpu"}}},
                {"productName", {{"string", g % 2 ? "NVIDIA H100 80GB HBM3" : "NVIDIA A100"}}}}},
              {"capacity", {{"memory", {{"value", "80Gi"}}}}}};
    if (tainted && g == 0) {
      d["taints"] = json::array(
          {{{"key", "gpu.dralens.dev/xid"}, {"value", "79"}, {"effect", "NoSchedule"}}});
    }
    devices.push_back(d);
  }
  return {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceSlice"},
      {"metadata", {{"name", absl::StrCat(NodeName(n), "-gpus")}, {"uid", absl::StrCat("s", n)}}},
      {"spec",
       {{"driver", kDriver},
        {"nodeName", NodeName(n)},
        {"pool", {{"name", NodeName(n)}, {"generation", 1}, {"resourceSliceCount", 1}}},
        {"devices", devices}}}};
}

json Node(int n, bool ready) {
  return {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata", {{"name", NodeName(n)}, {"uid", absl::StrCat("n", n)}}},
      {"status",
       {{"conditions", json::array({{{"type", "Ready"}, {"status", ready ? "True" : "False"}}})}}}};
}

json Claim(int c, int device, bool allocated, int nodes) {
  json claim = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata",
       {{"name", absl::StrCat("claim-", c)},
        {"namespace", absl::StrCat("team-", c % 16)},
        {"uid", absl::StrCat("00000000-0000-4000-8000-", absl::StrFormat("%012d", c))},
        {"creationTimestamp", "2026-11-24T00:00:00Z"}}},
      {"spec",
       {{"devices",
         {{"requests",
           json::array({{{"name", "gpu"}, {"exactly", {{"deviceClassName", kDriver}}}}})}}}}}};
  if (c % 10 == 0) {
    claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = json::array(
        {{{"cel",
           {{"expression",
             "device.attributes['gpu.dralens.dev'].productName.startsWith('NVIDIA H100')"}}}}});
  }
  if (allocated && device >= 0) {
    const int node = device / kGpusPerNode;
    claim["status"]["allocation"]["devices"]["results"] =
        json::array({{{"request", "gpu"},
                      {"driver", kDriver},
                      {"pool", NodeName(node % nodes)},
                      {"device", absl::StrCat("gpu-", device % kGpusPerNode)}}});
    claim["status"]["reservedFor"] = json::array(
        {{{"resource", "pods"}, {"name", absl::StrCat("pod-", c)}, {"uid", absl::StrCat("p", c)}}});
  }
  return claim;
}

json Pod(int c, int node, bool running) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", absl::StrCat("pod-", c)},
            {"namespace", absl::StrCat("team-", c % 16)},
            {"uid", absl::StrCat("p", c)}}},
          {"spec",
           {{"nodeName", NodeName(node)},
            {"resourceClaims",
             json::array({{{"name", "gpu"}, {"resourceClaimName", absl::StrCat("claim-", c)}}})}}},
          {"status", {{"phase", running ? "Running" : "Pending"}}}};
}

struct Samples {
  std::vector<double> us;
  std::string Summary() { return dralens::bench::Percentiles(us, "us"); }
};

}  // namespace

int main(int argc, char** argv) {
  const int nodes = dralens::bench::IntFlag(argc, argv, "nodes", 200);
  const int events = dralens::bench::IntFlag(argc, argv, "events", 1000000);
  const int devices = nodes * kGpusPerNode;
  const int claims = devices + devices / 4;

  auto tracing = dralens::telemetry::TracerProvider::CreateNoop();
  prometheus::Registry registry;
  cluster::Analyzer analyzer(registry, tracing->tracer(), cluster::AnalyzerOptions{});
  auto classes = cluster::HandlersFor(k8s::kDeviceClasses, analyzer);
  auto slices = cluster::HandlersFor(k8s::kResourceSlices, analyzer);
  auto node_handlers = cluster::HandlersFor(k8s::kNodes, analyzer);
  auto claim_handlers = cluster::HandlersFor(k8s::kResourceClaims, analyzer);
  auto pod_handlers = cluster::HandlersFor(k8s::kPods, analyzer);

  const auto setup_start = std::chrono::steady_clock::now();
  classes.on_add({{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "DeviceClass"},
                  {"metadata", {{"name", kDriver}}},
                  {"spec",
                   {{"selectors", json::array({{{"cel",
                                                 {{"expression",
                                                   "device.attributes['gpu.dralens.dev'].type "
                                                   "== 'gpu'"}}}}})}}}});
  std::vector<json> slice_objs, node_objs, claim_objs, pod_objs;
  std::vector<bool> tainted(nodes, false), ready(nodes, true), allocated(claims), running(claims);
  for (int n = 0; n < nodes; ++n) {
    node_objs.push_back(Node(n, true));
    node_handlers.on_add(node_objs.back());
    slice_objs.push_back(Slice(n, false));
    slices.on_add(slice_objs.back());
  }
  analyzer.SetNodesSynced();
  for (int c = 0; c < claims; ++c) {
    const int device = c < devices ? c : -1;
    allocated[c] = device >= 0;
    running[c] = device >= 0 && c % 3 != 0;
    claim_objs.push_back(Claim(c, device, allocated[c], nodes));
    claim_handlers.on_add(claim_objs.back());
    pod_objs.push_back(Pod(c, std::max(device, 0) / kGpusPerNode, running[c]));
    pod_handlers.on_add(pod_objs.back());
  }
  const double setup_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - setup_start).count();

  std::mt19937_64 rng(1);
  Samples pod_s, claim_s, slice_s, node_s;
  pod_s.us.reserve(events / 2 + 1);
  claim_s.us.reserve(events / 2 + 1);
  const auto storm_start = std::chrono::steady_clock::now();
  for (int e = 0; e < events; ++e) {
    const int kind = static_cast<int>(rng() % 20);
    const auto start = std::chrono::steady_clock::now();
    Samples* samples = nullptr;
    if (kind < 10) {  // a pod starts or stops
      const int c = static_cast<int>(rng() % devices);
      running[c] = !running[c];
      json next = Pod(c, c / kGpusPerNode, running[c]);
      pod_handlers.on_update(pod_objs[c], next);
      pod_objs[c] = std::move(next);
      samples = &pod_s;
    } else if (kind < 18) {  // a claim is allocated or released
      const int c = static_cast<int>(rng() % devices);
      allocated[c] = !allocated[c];
      json next = Claim(c, c, allocated[c], nodes);
      claim_handlers.on_update(claim_objs[c], next);
      claim_objs[c] = std::move(next);
      samples = &claim_s;
    } else if (kind == 18) {  // a device is tainted or recovers
      const int n = static_cast<int>(rng() % nodes);
      tainted[n] = !tainted[n];
      json next = Slice(n, tainted[n]);
      slices.on_update(slice_objs[n], next);
      slice_objs[n] = std::move(next);
      samples = &slice_s;
    } else {  // a node goes NotReady or comes back
      const int n = static_cast<int>(rng() % nodes);
      ready[n] = !ready[n];
      json next = Node(n, ready[n]);
      node_handlers.on_update(node_objs[n], next);
      node_objs[n] = std::move(next);
      samples = &node_s;
    }
    samples->us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
    if (e % 100000 == 99999) {
      analyzer.Tick();
    }
  }
  const double storm_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - storm_start).count();

  const auto render_start = std::chrono::steady_clock::now();
  const std::string body = dralens::telemetry::Render(
      registry.Collect(), nullptr, dralens::telemetry::ExpositionFormat::kPrometheusText,
      {analyzer.TextSeries().get()});
  const double render_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - render_start)
          .count();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);

  std::printf("cluster: %d nodes, %d GPUs, %d claims and pods; built in %.1f s\n", nodes, devices,
              claims, setup_s);
  std::printf("storm:   %d events in %.1f s = %.0f events/s\n", events, storm_s, events / storm_s);
  std::printf("  pod events:   %s\n", pod_s.Summary().c_str());
  std::printf("  claim events: %s\n", claim_s.Summary().c_str());
  std::printf("  slice events: %s\n", slice_s.Summary().c_str());
  std::printf("  node events:  %s\n", node_s.Summary().c_str());
  std::printf("render:  %.1f ms for %zu bytes of series\n", render_ms, body.size());
  std::printf("peak RSS: %ld MiB\n", usage.ru_maxrss / 1024);
  return 0;
}
