// cluster_bench: the cluster analyzer at scale: by default 1k nodes x 8 GPUs, 10k claims;
// `--claims=N` sizes the fleet (N/10 nodes of 8 GPUs, N claims, 3/4 of them allocated).
// Measures claim events processed per second (each one allocates or frees a device, so
// capacity, pending verdicts and the node's series are recomputed) and the /metrics render of
// the result. In-process and on one thread, its figures vary far less from run to run than
// scale_bench's, which shares two cores with its API server: the tool for comparing two builds
// of the analyzer.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "exporter/cluster/analyzer.h"
#include "src/telemetry/exposition.h"
#include "src/telemetry/tracing/tracer_provider.h"

namespace dralens::exporter::cluster {
namespace {

// Set by main() from --claims before any benchmark runs.
int fleet_claims = 10000;
int fleet_nodes = 1000;
constexpr int kGpusPerNode = 8;
constexpr char kDriver[] = "gpu.dralens.dev";

// The slice of node `node_name`, with no devices yet.
model::ResourceSlice EmptySlice(const std::string& node_name) {
  model::ResourceSlice slice;
  slice.metadata.name = node_name + "-gpus";
  slice.spec.driver = kDriver;
  slice.spec.node_name = node_name;
  slice.spec.pool = {node_name, 1, 1};
  return slice;
}

model::ResourceSlice NodeSlice(int node) {
  model::ResourceSlice slice = EmptySlice(absl::StrCat("node-", node));
  for (int g = 0; g < kGpusPerNode; ++g) {
    model::SliceDevice d;
    d.name = absl::StrCat("gpu-", g);
    d.attributes["type"] = model::DeviceAttribute::String("gpu");
    d.attributes["productName"] = model::DeviceAttribute::String(g % 2 ? "H100" : "A100");
    slice.spec.devices.push_back(d);
  }
  return slice;
}

model::ResourceClaim ClaimFor(int i, bool allocated) {
  model::ResourceClaim c;
  c.metadata.namespace_name = absl::StrCat("ns-", i % 20);
  c.metadata.name = absl::StrCat("claim-", i);
  c.metadata.uid = absl::StrCat("uid-", i);
  c.metadata.creation_timestamp = absl::FromUnixSeconds(1700000000);
  model::DeviceRequest r;
  r.name = "req";
  r.exactly.emplace();
  r.exactly->device_class_name = "gpu";
  if (i % 10 == 0) {
    r.exactly->selectors.push_back(
        {model::CelDeviceSelector{"device.attributes['gpu.dralens.dev'].productName == 'H100'"}});
  }
  c.spec.devices.requests.push_back(r);
  if (allocated) {
    model::AllocationResult a;
    const int device = i % (fleet_nodes * kGpusPerNode);
    model::DeviceRequestAllocationResult result;
    result.request = "req";
    result.driver = kDriver;
    result.pool = absl::StrCat("node-", device / kGpusPerNode);
    result.device = absl::StrCat("gpu-", device % kGpusPerNode);
    a.devices.results.push_back(result);
    c.status.allocation = a;
  }
  return c;
}

struct World {
  World() {
    analyzer = std::make_unique<Analyzer>(registry, tracing->tracer(), AnalyzerOptions{});
    model::DeviceClass gpu;
    gpu.metadata.name = "gpu";
    gpu.spec.selectors.push_back(
        {model::CelDeviceSelector{"device.attributes['gpu.dralens.dev'].type == 'gpu'"}});
    analyzer->UpsertClass(gpu);
    for (int n = 0; n < fleet_nodes; ++n) {
      analyzer->UpsertNode({absl::StrCat("node-", n), true});
      analyzer->UpsertSlice(NodeSlice(n));
    }
    analyzer->SetNodesSynced();
    // 3/4 of the claims allocated (every device used at most once), 1/4 pending.
    for (int i = 0; i < fleet_claims; ++i) {
      analyzer->UpsertClaim(ClaimFor(i, i < fleet_claims * 3 / 4));
    }
  }
  std::unique_ptr<telemetry::TracerProvider> tracing = telemetry::TracerProvider::CreateNoop();
  prometheus::Registry registry;
  std::unique_ptr<Analyzer> analyzer;
};

World& TheWorld() {
  static World* world = new World();
  return *world;
}

// One event: a claim is allocated, or its allocation goes away (alternating).
void BM_ClaimEvent(benchmark::State& state) {
  World& w = TheWorld();
  int i = 0;
  for (auto _ : state) {
    const int claim = fleet_claims * 3 / 4 + (i / 2) % (fleet_claims / 4);
    w.analyzer->UpsertClaim(ClaimFor(claim, i % 2 == 0));
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ClaimEvent)->Unit(benchmark::kMicrosecond);

// A scheduler that serves claims in order: the longest-pending claim of a request shape is
// allocated, then released (alternating), so the shape's longest-pending claim changes with
// every event and free_while_pending attribution must be looked at again where it could move.
void BM_AllocateOldestPending(benchmark::State& state) {
  World& w = TheWorld();
  // The first pending claim by key: "ns-0/claim-<3N/4>" (all were created in the same second).
  const int oldest = fleet_claims * 3 / 4;
  int i = 0;
  for (auto _ : state) {
    w.analyzer->UpsertClaim(ClaimFor(oldest, i % 2 == 0));
    ++i;
  }
  w.analyzer->UpsertClaim(ClaimFor(oldest, false));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AllocateOldestPending)->Unit(benchmark::kMicrosecond);

// One event that changes no capacity: a pod of an allocated claim starts or stops.
void BM_PodEvent(benchmark::State& state) {
  World& w = TheWorld();
  int i = 0;
  for (auto _ : state) {
    model::Pod pod;
    pod.metadata.namespace_name = "ns-0";
    pod.metadata.name = absl::StrCat("pod-", (i / 2) % 100);
    pod.status.phase = i % 2 ? "Running" : "Pending";
    w.analyzer->UpsertPod(pod);
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PodEvent)->Unit(benchmark::kMicrosecond);

// One GPU of a node gains or loses a NoSchedule taint: its slice is republished with that one
// device changed.
void BM_SliceTaint(benchmark::State& state) {
  World& w = TheWorld();
  int i = 0;
  for (auto _ : state) {
    model::ResourceSlice slice = NodeSlice(i / 2 % fleet_nodes);
    if (i % 2 == 0) {
      model::DeviceTaint taint;
      taint.key = "gpu.dralens.dev/xid";
      taint.value = "79";
      taint.effect = "NoSchedule";
      slice.spec.devices[3].taints.push_back(taint);
    }
    w.analyzer->UpsertSlice(slice);
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SliceTaint)->Unit(benchmark::kMicrosecond);

// A node with one partitionable GPU (dynamic MIG): a counter set of 8 memory slices, the full
// GPU and 7 one-slice placements consuming it.
model::ResourceSlice PartitionableSlice(int node) {
  model::ResourceSlice slice = EmptySlice(absl::StrCat("mig-node-", node));
  model::CounterSet set;
  set.name = "gpu-0-counter-set";
  for (int s = 0; s < 8; ++s) {
    set.counters[absl::StrCat("memory-slice-", s)].value = common::Quantity::FromInt64(1);
  }
  slice.spec.shared_counters.push_back(set);
  auto device = [&](const std::string& name, const std::string& profile, int start, int size) {
    model::SliceDevice d;
    d.name = name;
    d.attributes["type"] = model::DeviceAttribute::String(profile.empty() ? "gpu" : "mig");
    d.attributes["productName"] = model::DeviceAttribute::String("H100");
    if (!profile.empty()) {
      d.attributes["profile"] = model::DeviceAttribute::String(profile);
    }
    model::DeviceCounterConsumption consumes;
    consumes.counter_set = set.name;
    for (int s = start; s < start + size; ++s) {
      consumes.counters[absl::StrCat("memory-slice-", s)].value = common::Quantity::FromInt64(1);
    }
    d.consumes_counters.push_back(consumes);
    slice.spec.devices.push_back(d);
  };
  device("gpu-0", "", 0, 8);
  for (int p = 0; p < 7; ++p) {
    device(absl::StrCat("gpu-0-mig-1g-", p), "1g.10gb", p, 1);
  }
  return slice;
}

// The initial sync of a fleet of partitionable GPUs: range(0) nodes' slices, one after another,
// into an empty analyzer (timed per slice).
void BM_PartitionableSync(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  std::vector<model::ResourceSlice> slices;
  for (int n = 0; n < nodes; ++n) {
    slices.push_back(PartitionableSlice(n));
  }
  for (auto _ : state) {
    state.PauseTiming();
    auto tracing = telemetry::TracerProvider::CreateNoop();
    prometheus::Registry registry;
    auto analyzer = std::make_unique<Analyzer>(registry, tracing->tracer(), AnalyzerOptions{});
    model::DeviceClass mig;
    mig.metadata.name = "mig";
    mig.spec.selectors.push_back(
        {model::CelDeviceSelector{"device.attributes['gpu.dralens.dev'].type == 'mig'"}});
    analyzer->UpsertClass(mig);
    state.ResumeTiming();
    for (const model::ResourceSlice& slice : slices) {
      analyzer->UpsertSlice(slice);
    }
    state.PauseTiming();
    analyzer.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * nodes);
}
BENCHMARK(BM_PartitionableSync)->Arg(1000)->Arg(4000)->Arg(12500)->Unit(benchmark::kMillisecond);

void BM_Tick(benchmark::State& state) {
  World& w = TheWorld();
  for (auto _ : state) {
    w.analyzer->Tick();
  }
}
BENCHMARK(BM_Tick)->Unit(benchmark::kMillisecond);

// A scrape of everything the analyzer exports (classic text).
void BM_Scrape(benchmark::State& state) {
  World& w = TheWorld();
  size_t bytes = 0;
  for (auto _ : state) {
    std::string body = telemetry::Render(w.registry.Collect(), nullptr,
                                         telemetry::ExpositionFormat::kPrometheusText,
                                         {w.analyzer->TextSeries().get()});
    bytes = body.size();
    benchmark::DoNotOptimize(body);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_Scrape)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dralens::exporter::cluster

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--claims=", 9) == 0) {
      dralens::exporter::cluster::fleet_claims = std::max(10, std::atoi(argv[i] + 9));
      dralens::exporter::cluster::fleet_nodes = dralens::exporter::cluster::fleet_claims / 10;
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) {
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
