// prepare_bench: NodePrepareResources end to end, as the kubelet sees it, next to its floor.
//
// End to end: a gRPC client on dra.sock (one channel shared by all workers, like the kubelet's
// single connection) → PluginServer → ClaimPreparer → GET of the ResourceClaim from the
// embedded API server over loopback HTTP → checkpoint PrepareStarted → CDI spec → checkpoint
// PrepareCompleted, all with the real file-backed stores under a temp dir.
//
// Floor: per iteration, the same durable writes a prepare makes (common::WriteFileAtomically:
// checkpoint, CDI spec, checkpoint, with the same bytes, into the same kind of directories)
// plus one GET of the claim through the same RestClient, by the same number of threads. It is
// what a prepare cannot avoid; anything above it is the driver's own cost (gRPC, locking,
// encoding, waiting for other claims).
//
// For each concurrency C, C workers each own one claim on its own full GPU and loop
// prepare (timed) → unprepare (timed, reported apart). The floor loop likewise does the
// unprepare's I/O (remove the spec durably, write the checkpoint), so the disk sees the same
// mix in both runs.
//
// The REST client keeps enough idle connections for every worker (--idle-connections): with
// fewer, each burst opens new connections at once, the embedded API server's listen backlog
// (cpp-httplib's default of 5) overflows, and dropped SYNs come back after 1 s, 3 s, ... which
// would measure the kernel's retransmission timer, not the driver. --idle-connections=4 is
// what `dralens node` runs with (the RestClient default).
//
// Prints figures only; it never fails on time. Exits non-zero only if a call fails.
//
// --telemetry picks what the node records, to measure its cost:
//   none         no spans; metrics recorded into a registry nobody reads (the components
//                always record: the cost of not scraping)
//   metrics      metrics with exemplars, tracing off (the default deployment; the default here)
//   traces       metrics, and every span exported over OTLP/HTTP JSON to a receiver in this
//                process (always_on sampler)
//   traces-down  the same with the collector down (connection refused): spans are retried,
//                then dropped and counted, and prepares must not wait for any of it
//
// --claim-status=on (the default, as `dralens node` runs) writes each prepared claim's
// ResourceClaim status.devices from the background writer, sharing the API server and the CPUs
// with the prepares; off measures without it.
//
//   prepare_bench [--iterations=N] [--max-seconds=S] [--concurrency=1,64]
//                 [--idle-connections=N] [--dir=PATH] [--logs]
//                 [--telemetry=none|metrics|traces|traces-down] [--claim-status=on|off]
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "driver/discovery/device_source.h"
#include "driver/plugin/plugin_server.h"
#include "driver/prepare/cdi.h"
#include "driver/prepare/checkpoint.h"
#include "driver/prepare/preparation.h"
#include "driver/proto/dra/v1/api.grpc.pb.h"
#include "driver/sharing/mps.h"
#include "driver/slices/slice_builder.h"
#include "exporter/node/node_collectors.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "src/common/atomic_file.h"
#include "src/common/clock.h"
#include "src/common/log.h"
#include "src/k8s/client.h"
#include "src/k8s/rest_client.h"
#include "src/model/inventory.h"
#include "src/sim/api_server.h"
#include "src/telemetry/exemplar.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "src/telemetry/tracing/tracer_provider.h"
#include "src/telemetry/tracing/tracing_config.h"
#include "tests/bench/load_runner.h"
#include "tests/bench/machine_info.h"
#include "tests/bench/prepare_flags.h"

namespace dralens::bench {
namespace {

namespace fs = std::filesystem;
namespace dra_v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace discovery = driver::discovery;
namespace plugin = driver::plugin;
namespace prepare = driver::prepare;
namespace slices = driver::slices;
using nlohmann::json;

constexpr char kDriver[] = "gpu.dralens.dev";
constexpr char kNode[] = "bench-node";
constexpr char kNs[] = "bench";
constexpr double kTargetP99Ms = 5.0;
constexpr double kTargetFloorRatio = 1.5;
// A loopback GET slower than this is not the API server's work (see Print()).
constexpr double kSlowGetMs = 20;

// The temp dir, removed by Die too.
std::string g_root;

// Other threads may still be inside gRPC or the API server: no destructors, just leave.
[[noreturn]] void Die(const std::string& what) {
  std::fflush(stdout);
  std::fprintf(stderr, "prepare_bench: %s\n", what.c_str());
  if (!g_root.empty()) {
    std::error_code ec;
    fs::remove_all(g_root, ec);
  }
  std::_Exit(1);
}

template <typename T>
T OrDie(absl::StatusOr<T> value, absl::string_view what) {
  if (!value.ok()) {
    Die(absl::StrCat(what, ": ", value.status().ToString()));
  }
  return *std::move(value);
}

void OrDie(const absl::Status& status, absl::string_view what) {
  if (!status.ok()) {
    Die(absl::StrCat(what, ": ", status.ToString()));
  }
}

// --- The node under test ------------------------------------------------------------------

struct ClaimId {
  std::string name;
  std::string uid;
  std::string device;
};

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return context;
}

class Bench {
 public:
  explicit Bench(Flags flags) : flags_(std::move(flags)) {}
  ~Bench() {
    plugin_.reset();
    preparation_.reset();
    if (tracing_ != nullptr) {
      tracing_->Shutdown(absl::Now() + absl::Seconds(5));
    }
    receiver_.stop();
    if (receiver_thread_.joinable()) {
      receiver_thread_.join();
    }
    api_.Stop();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  void SetUp() {
    fs::path parent = flags_.dir.empty() ? fs::temp_directory_path() : fs::path(flags_.dir);
    std::string tmpl = (parent / "dralens-bench-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      Die(absl::StrCat("mkdtemp under ", parent.string(), " failed"));
    }
    root_ = fs::canonical(tmpl).string();
    g_root = root_;

    OrDie(api_.Start(), "start API server");
    k8s::RestConfig config;
    config.server = api_.url();
    // As `dralens node` builds its client (src/app/kube.cc), but for the idle pool: see the top.
    k8s::RestClientOptions client_options;
    client_options.max_idle_connections = static_cast<size_t>(flags_.idle_connections);
    client_ = OrDie(k8s::RestClient::FromConfig(config, client_options), "REST client");
    OrDie(client_
              ->Create(k8s::kNodes, "",
                       {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", kNode}}}})
              .status(),
          "create Node");

    // The built-in profiles stop at 8 GPUs; one distinct full GPU per worker needs 64.
    const std::string profile = Join("profile.json");
    std::ofstream(profile) << json{{"name", "bench"},
                                   {"gpus", {{{"board", "h100-80gb"}, {"count", kMaxConcurrency}}}}}
                                  .dump();
    discovery::DeviceSourceOptions source_options;
    source_options.kind = "simulated";
    source_options.simulated_profile = profile;
    source_options.node_name = kNode;
    source_ = OrDie(discovery::MakeDeviceSource(source_options), "device source");
    model::Inventory inventory = OrDie(source_->Discover(), "discover");
    if (inventory.gpus().size() < static_cast<size_t>(kMaxConcurrency)) {
      Die("the simulated profile has too few GPUs");
    }

    store_ = std::make_unique<prepare::FileCheckpointStore>(
        prepare::CheckpointPath(Join("plugins"), kDriver),
        OrDie(prepare::ReadBootId(), "read boot id"), common::RealClock());
    cdi_ = std::make_unique<prepare::FileCdiWriter>(Join("cdi"));
    SetUpTelemetry();
    prepare::PreparationOptions options;
    options.preparer.driver_name = kDriver;
    options.preparer.pool_name = kNode;
    options.mps_root = Join("mps");
    options.claim_status = flags_.claim_status;
    telemetry::Tracer& tracer =
        tracing_ != nullptr ? tracing_->tracer() : static_cast<telemetry::Tracer&>(noop_tracer_);
    preparation_ =
        OrDie(prepare::Preparation::Create(options, *client_, *store_, *cdi_, *source_, mps_,
                                           prepare::PreparationSinks{.registry = registry_,
                                                                     .exemplars = exemplars_,
                                                                     .tracer = tracer,
                                                                     .clock = common::RealClock(),
                                                                     .view = collectors_},
                                           inventory),
              "claim preparation");
    plugin::PluginServerOptions plugin_options;
    plugin_options.driver_name = kDriver;
    plugin_options.registry_dir = Join("plugins_registry");
    plugin_options.plugins_dir = Join("plugins");
    plugin_ = OrDie(plugin::PluginServer::Start(
                        plugin_options, preparation_->preparer(),
                        plugin::CallTelemetry{.metrics = call_metrics_, .tracer = tracer}),
                    "plugin server");
    stub_ = dra_v1::DRAPlugin::NewStub(grpc::CreateChannel("unix://" + plugin_->dra_socket_path(),
                                                           grpc::InsecureChannelCredentials()));

    for (int i = 0; i < kMaxConcurrency; ++i) {
      claims_.push_back(
          AllocatedClaim(absl::StrCat("claim-", i), slices::GpuDeviceName(inventory.gpus()[i])));
    }
    fs::create_directories(Join("floor/plugins/") + kDriver);
    fs::create_directories(Join("floor/cdi"));
  }

  const std::string& root() const { return root_; }

  // What became of the spans, for the report.
  std::string TracingSummary() {
    if (tracing_ == nullptr) {
      return "tracing off";
    }
    tracing_->ForceFlush(absl::Now() + absl::Seconds(10));
    const telemetry::TracingStats& st = tracing_->stats();
    return absl::StrCat("spans exported ", st.spans_exported.load(), ", dropped (queue full) ",
                        st.spans_dropped_queue_full.load(), ", dropped (export failed) ",
                        st.spans_dropped_export_failed.load(), "; receiver got ",
                        received_spans_.load(), " in ", received_requests_.load(), " requests");
  }

  // One configuration: the floor first, then the real thing; Print() shows them.
  void Run(int c) {
    const int per_thread = std::max(1, (flags_.iterations + c - 1) / c);
    // Enough warmup to open connections, fill caches and create the files once.
    const int warmup = std::max(2, 100 / c);
    FloorPayload payload = CapturePayload(c);

    const int64_t overflows = ListenOverflows();
    FillConnectionPool(c);
    LoadResult floor = RunLoad(c, warmup, per_thread, flags_.max_seconds,
                               [&](int w) { return FloorIteration(payload, w); });
    FillConnectionPool(c);
    LoadResult real = RunLoad(c, warmup, per_thread, flags_.max_seconds,
                              [&](int w) { return PrepareIteration(w); });
    results_.push_back({c, floor, real, ListenOverflows() - overflows});
  }

  void Print() const {
    std::printf("\n%-6s %-18s %7s %9s %9s %9s %9s %9s %10s\n", "conc", "operation", "count",
                "p50 ms", "p90 ms", "p99 ms", "max ms", "calls/s", "p99/floor");
    for (const Result& r : results_) {
      auto row = [&](const char* what, const Summary& s, const Summary* floor) {
        std::string ratio = floor != nullptr && floor->p99 > 0
                                ? absl::StrFormat("%.2fx", s.p99 / floor->p99)
                                : std::string("");
        std::printf("%-6d %-18s %7zu %9.3f %9.3f %9.3f %9.3f %9.0f %10s\n", r.concurrency, what,
                    s.count, s.p50, s.p90, s.p99, s.max, s.per_second, ratio.c_str());
      };
      row("prepare", r.real.prepare, &r.floor.prepare);
      row("prepare floor", r.floor.prepare, nullptr);
      row("  floor: GET", r.floor.get, nullptr);
      row("  floor: 3 writes", r.floor.writes, nullptr);
      row("unprepare", r.real.unprepare, &r.floor.unprepare);
      row("unprepare floor", r.floor.unprepare, nullptr);
    }
    std::printf("\ntargets (prepare): p99 <= %.1f ms at %d concurrent; p99 <= %.1fx floor\n",
                kTargetP99Ms, kMaxConcurrency, kTargetFloorRatio);
    for (const Result& r : results_) {
      const double p99 = r.real.prepare.p99;
      const double ratio = r.floor.prepare.p99 > 0 ? p99 / r.floor.prepare.p99 : 0;
      std::string absolute =
          r.concurrency == kMaxConcurrency
              ? absl::StrFormat("p99 %.3f ms %s %.1f ms: %s", p99, p99 <= kTargetP99Ms ? "<=" : ">",
                                kTargetP99Ms, p99 <= kTargetP99Ms ? "met" : "NOT met")
              : absl::StrFormat("p99 %.3f ms", p99);
      std::printf("  %2d concurrent: %s; %.2fx floor %s %.1fx: %s\n", r.concurrency,
                  absolute.c_str(), ratio, ratio <= kTargetFloorRatio ? "<=" : ">",
                  kTargetFloorRatio, ratio <= kTargetFloorRatio ? "met" : "NOT met");
    }
    for (const Result& r : results_) {
      if (r.listen_overflows > 0) {
        std::printf(
            "note: %d concurrent: %lld TCP listen overflows during the run; their SYN retries "
            "(>= 1 s) are in the figures (see --idle-connections)\n",
            r.concurrency, static_cast<long long>(r.listen_overflows));
      }
      if (r.floor.get.p50 >= kSlowGetMs) {
        std::printf(
            "note: %d concurrent: a loopback GET takes %.1f ms (p50) and dominates the floor, so "
            "the ratio says little about the driver. Around 40 ms is the delayed-ACK timer: a "
            "server that writes headers and body separately without TCP_NODELAY.\n",
            r.concurrency, r.floor.get.p50);
      }
    }
  }

 private:
  struct Result {
    int concurrency;
    LoadResult floor;
    LoadResult real;
    int64_t listen_overflows;
  };

  // The bytes the floor writes: the real checkpoint with `c` claims prepared (its size during
  // the run) and each claim's real CDI spec.
  struct FloorPayload {
    std::string checkpoint;
    std::vector<std::string> cdi_specs;
  };

  std::string Join(absl::string_view name) const { return absl::StrCat(root_, "/", name); }

  // Puts `n` open connections into the client's idle pool (as far as it keeps them), opened a
  // few milliseconds apart: n GETs the server holds long enough to overlap. Otherwise the first
  // timed round of n workers would connect all at once (see the top of this file).
  void FillConnectionPool(int n) {
    sim::FaultRule slow;
    slow.kind = sim::FaultRule::Kind::kSlow;
    slow.verb = "get";
    slow.resource = "resourceclaims";
    slow.times = n;
    slow.delay = absl::Milliseconds(2 * n + 100);
    api_.InjectFault(slow);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([this, i] {
        OrDie(client_->Get(k8s::kResourceClaims, kNs, claims_[i].name).status(),
              "fill connection pool");
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (std::thread& t : threads) {
      t.join();
    }
    api_.ClearFaults();
  }

  // Creates a claim for one full GPU and allocates `device` to it, as the scheduler would.
  ClaimId AllocatedClaim(const std::string& name, const std::string& device) {
    json claim = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceClaim"},
        {"metadata", {{"name", name}, {"namespace", kNs}}},
        {"spec",
         {{"devices",
           {{"requests", {{{"name", "gpu"}, {"exactly", {{"deviceClassName", kDriver}}}}}}}}}}};
    json created = OrDie(client_->Create(k8s::kResourceClaims, kNs, claim), "create claim");
    json obj = created;
    obj["status"] = {
        {"allocation",
         {{"devices",
           {{"results",
             {{{"request", "gpu"}, {"driver", kDriver}, {"pool", kNode}, {"device", device}}}}}}}}};
    OrDie(client_->Update(k8s::kResourceClaims, kNs, obj, "status").status(), "allocate claim");
    return {name, created["metadata"]["uid"].get<std::string>(), device};
  }

  void Add(dra_v1::NodePrepareResourcesRequest& request, const ClaimId& c) {
    auto* claim = request.add_claims();
    claim->set_namespace_(kNs);
    claim->set_name(c.name);
    claim->set_uid(c.uid);
  }
  void Add(dra_v1::NodeUnprepareResourcesRequest& request, const ClaimId& c) {
    auto* claim = request.add_claims();
    claim->set_namespace_(kNs);
    claim->set_name(c.name);
    claim->set_uid(c.uid);
  }

  void Prepare(const std::vector<ClaimId>& claims) {
    dra_v1::NodePrepareResourcesRequest request;
    for (const ClaimId& c : claims) {
      Add(request, c);
    }
    dra_v1::NodePrepareResourcesResponse response;
    grpc::Status status = stub_->NodePrepareResources(Context().get(), request, &response);
    if (!status.ok()) {
      Die(absl::StrCat("NodePrepareResources: ", status.error_message()));
    }
    for (const ClaimId& c : claims) {
      auto it = response.claims().find(c.uid);
      if (it == response.claims().end() || !it->second.error().empty() ||
          it->second.devices_size() != 1 || it->second.devices(0).device_name() != c.device) {
        Die(absl::StrCat("NodePrepareResources ", c.name, ": ",
                         it == response.claims().end() ? "no entry" : it->second.DebugString()));
      }
    }
  }

  void Unprepare(const std::vector<ClaimId>& claims) {
    dra_v1::NodeUnprepareResourcesRequest request;
    for (const ClaimId& c : claims) {
      Add(request, c);
    }
    dra_v1::NodeUnprepareResourcesResponse response;
    grpc::Status status = stub_->NodeUnprepareResources(Context().get(), request, &response);
    if (!status.ok()) {
      Die(absl::StrCat("NodeUnprepareResources: ", status.error_message()));
    }
    for (const ClaimId& c : claims) {
      auto it = response.claims().find(c.uid);
      if (it == response.claims().end() || !it->second.error().empty()) {
        Die(absl::StrCat("NodeUnprepareResources ", c.name, ": ",
                         it == response.claims().end() ? "no entry" : it->second.error()));
      }
    }
  }

  // One kubelet call per claim, as the kubelet makes for one pod with one claim.
  Sample PrepareIteration(int w) {
    const std::vector<ClaimId> one = {claims_[w]};
    Sample s;
    Clock::time_point t0 = Clock::now();
    Prepare(one);
    Clock::time_point t1 = Clock::now();
    Unprepare(one);
    Clock::time_point t2 = Clock::now();
    s.prepare_ms = Ms(t1 - t0);
    s.unprepare_ms = Ms(t2 - t1);
    return s;
  }

  // The I/O of one prepare (GET, checkpoint, CDI spec, checkpoint) and one unprepare (remove
  // the spec, checkpoint), in the same order, with nothing else.
  Sample FloorIteration(const FloorPayload& payload, int w) {
    const ClaimId& c = claims_[w];
    const std::string checkpoint = prepare::CheckpointPath(Join("floor/plugins"), kDriver);
    const std::string spec = Join("floor/cdi/") + prepare::CdiSpecFileName(c.uid);
    Sample s;
    Clock::time_point t0 = Clock::now();
    OrDie(client_->Get(k8s::kResourceClaims, kNs, c.name).status(), "floor GET");
    Clock::time_point got = Clock::now();
    OrDie(common::WriteFileAtomically(checkpoint, payload.checkpoint, 0600), "floor write");
    OrDie(common::WriteFileAtomically(spec, payload.cdi_specs[w], 0644), "floor write");
    OrDie(common::WriteFileAtomically(checkpoint, payload.checkpoint, 0600), "floor write");
    Clock::time_point t1 = Clock::now();
    OrDie(common::RemoveFileDurably(spec), "floor remove");
    OrDie(common::WriteFileAtomically(checkpoint, payload.checkpoint, 0600), "floor write");
    Clock::time_point t2 = Clock::now();
    s.prepare_ms = Ms(t1 - t0);
    s.unprepare_ms = Ms(t2 - t1);
    s.get_ms = Ms(got - t0);
    s.writes_ms = Ms(t1 - got);
    return s;
  }

  // Prepares the first `c` claims together, keeps the files the driver wrote, unprepares.
  FloorPayload CapturePayload(int c) {
    std::vector<ClaimId> first(claims_.begin(), claims_.begin() + c);
    Prepare(first);
    FloorPayload payload;
    payload.checkpoint = OrDie(common::ReadFile(store_->path()), "read checkpoint");
    for (const ClaimId& claim : first) {
      payload.cdi_specs.push_back(
          OrDie(common::ReadFile(cdi_->PathFor(claim.uid)), "read CDI spec"));
    }
    Unprepare(first);
    return payload;
  }

  void SetUpTelemetry() {
    if (flags_.telemetry == "none" || flags_.telemetry == "metrics") {
      return;
    }
    int port = 0;
    if (flags_.telemetry == "traces") {
      // The collector lives elsewhere in a real deployment: this one only counts spans, by
      // their "spanId" keys, so its own CPU does not weigh on the node under test.
      receiver_.Post("/v1/traces", [this](const httplib::Request& req, httplib::Response& res) {
        size_t n = 0;
        for (size_t at = req.body.find("\"spanId\""); at != std::string::npos;
             at = req.body.find("\"spanId\"", at + 1)) {
          ++n;
        }
        received_spans_ += n;
        ++received_requests_;
        res.set_content("{}", "application/json");
      });
      port = receiver_.bind_to_any_port("127.0.0.1");
      receiver_thread_ = std::thread([this] { receiver_.listen_after_bind(); });
    } else {
      // A port nobody listens on: bind one, note it, close it.
      httplib::Server closed;
      port = closed.bind_to_any_port("127.0.0.1");
    }
    telemetry::TracingConfig config;
    config.enabled = true;
    config.traces_url = absl::StrCat("http://127.0.0.1:", port, "/v1/traces");
    config.resource_attributes = {{"service.name", std::string("dralens-bench")}};
    config.sampler.kind = telemetry::SamplerKind::kAlwaysOn;
    tracing_ = OrDie(telemetry::TracerProvider::Create(config, "bench"), "tracer provider");
  }

  const Flags flags_;
  prometheus::Registry registry_;
  telemetry::ExemplarStore exemplars_;
  exporter::NodeCollectors collectors_{registry_};
  plugin::KubeletCallMetrics call_metrics_ = plugin::KubeletCallMetrics::Create(registry_);
  telemetry::NoopTracer noop_tracer_;
  httplib::Server receiver_;
  std::thread receiver_thread_;
  std::atomic<uint64_t> received_spans_{0};
  std::atomic<uint64_t> received_requests_{0};
  std::unique_ptr<telemetry::TracerProvider> tracing_;
  std::string root_;
  sim::ApiServer api_;
  std::unique_ptr<k8s::RestClient> client_;
  std::unique_ptr<prepare::FileCheckpointStore> store_;
  std::unique_ptr<prepare::FileCdiWriter> cdi_;
  discovery::DeviceSourcePtr source_;
  driver::sharing::UnavailableMpsControl mps_;
  std::unique_ptr<prepare::Preparation> preparation_;
  std::unique_ptr<plugin::PluginServer> plugin_;
  std::unique_ptr<dra_v1::DRAPlugin::Stub> stub_;
  std::vector<ClaimId> claims_;
  std::vector<Result> results_;
};

int Main(int argc, char** argv) {
  absl::StatusOr<Flags> parsed = ParseFlags(argc, argv);
  if (!parsed.ok()) {
    Die(std::string(parsed.status().message()));
  }
  const Flags& flags = *parsed;
  if (!flags.logs) {
    // Lines are still formatted (the driver pays for that), just not written to a terminal.
    common::SetLogSinkForTest([](const std::string&) {});
  }
  Bench bench(flags);
  bench.SetUp();
  PrintMachine(bench.root());
  std::printf(
      "config:  %d timed prepares per configuration (at most %.0f s each) after warmup; "
      "REST client keeps %d idle connections; telemetry: %s; claim status: %s\n",
      flags.iterations, flags.max_seconds, flags.idle_connections, flags.telemetry.c_str(),
      flags.claim_status ? "on" : "off");
  std::fflush(stdout);
  for (int c : flags.concurrency) {
    bench.Run(c);
  }
  bench.Print();
  std::printf("%s\n", bench.TracingSummary().c_str());
  return 0;
}

}  // namespace
}  // namespace dralens::bench

int main(int argc, char** argv) { return dralens::bench::Main(argc, argv); }
