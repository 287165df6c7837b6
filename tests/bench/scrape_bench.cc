// scrape_bench: what a scrape of a busy node's /metrics costs.
//
// The node: 8 H100 GPUs in MIG mode with seven 1g.10gb instances each (64 devices), 256
// prepared claims spread over them, and the per-claim and per-phase histograms filled with
// traced observations, so every bucket carries an exemplar. The series are the ones
// `dralens node` registers (the preparation's metrics, the node collectors fed by the node view
// with one dralens_node_claim_info series per prepared claim, the kubelet call counter,
// SliceMetrics, KubeRequestMetrics, build info).
//
// Measured, each over --scrapes scrapes:
//   render text       our writer, Prometheus text 0.0.4, from registry->Collect()
//   render openmetrics  our writer, OpenMetrics with exemplars
//   baseline          prometheus-cpp's TextSerializer on the same Collect() output
//   http openmetrics  a full GET /metrics through MetricsServer on loopback, as Prometheus does
// plus the process's RSS after setup and its peak (VmHWM).
//
// Prints figures only; it never fails on time.
//
//   scrape_bench [--scrapes=N]
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "driver/discovery/device_source.h"
#include "driver/plugin/call_telemetry.h"
#include "driver/prepare/checkpoint.h"
#include "driver/prepare/checkpoint_journal.h"
#include "driver/prepare/claim_ledger.h"
#include "driver/prepare/claim_status.h"
#include "driver/prepare/mig_manager.h"
#include "driver/prepare/node_view.h"
#include "driver/prepare/prepare_telemetry.h"
#include "driver/prepare/sharing_applier.h"
#include "driver/slices/slice_builder.h"
#include "driver/slices/slice_publisher.h"
#include "exporter/http/metrics_server.h"
#include "exporter/node/node_collectors.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "src/common/log.h"
#include "src/k8s/request_metrics.h"
#include "src/telemetry/catalog.h"
#include "src/telemetry/exemplar.h"
#include "src/telemetry/exposition.h"
#include "src/telemetry/tracing/trace_context.h"

namespace dralens::bench {
namespace {

namespace prepare = driver::prepare;
using Clock = std::chrono::steady_clock;

constexpr int kClaims = 256;
constexpr double kTargetP99Ms = 2.0;
constexpr double kTargetRssMb = 30.0;

// kB from a /proc/self/status line such as "VmRSS:     12345 kB".
double StatusKb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
      double kb = 0;
      if (parts.size() >= 2 && absl::SimpleAtod(parts[1], &kb)) {
        return kb;
      }
    }
  }
  return 0;
}

struct Summary {
  double p50 = 0, p99 = 0, max = 0;
  size_t bytes = 0;
};

Summary Measure(int n, const std::function<size_t()>& scrape) {
  for (int i = 0; i < std::min(n, 20); ++i) {
    scrape();  // warm caches and allocator
  }
  std::vector<double> ms;
  ms.reserve(n);
  size_t bytes = 0;
  for (int i = 0; i < n; ++i) {
    const Clock::time_point t0 = Clock::now();
    bytes = scrape();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  auto rank = [&](double q) {
    return ms[std::min(ms.size() - 1, static_cast<size_t>(q * ms.size()))];
  };
  return {rank(0.5), rank(0.99), ms.back(), bytes};
}

int Main(int argc, char** argv) {
  int scrapes = 2000;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (!absl::ConsumePrefix(&arg, "--scrapes=") || !absl::SimpleAtoi(arg, &scrapes) ||
        scrapes < 1) {
      std::fprintf(stderr, "usage: scrape_bench [--scrapes=N]\n");
      return 2;
    }
  }
  common::SetLogSinkForTest([](const std::string&) {});

  // 8 GPUs in MIG mode, seven 1g.10gb instances each.
  nlohmann::json gpus = nlohmann::json::array();
  for (int g = 0; g < 8; ++g) {
    nlohmann::json migs = nlohmann::json::array();
    for (int start = 0; start < 7; ++start) {
      migs.push_back({{"profile", "1g.10gb"}, {"start", start}});
    }
    gpus.push_back({{"board", "h100-80gb"}, {"migEnabled", true}, {"migDevices", migs}});
  }
  const std::string profile_path = "/tmp/dralens-scrape-bench-profile.json";
  std::ofstream(profile_path) << nlohmann::json{{"name", "scrape-bench"}, {"gpus", gpus}}.dump();
  driver::discovery::DeviceSourceOptions source_options;
  source_options.kind = "simulated";
  source_options.simulated_profile = profile_path;
  source_options.node_name = "bench-node";
  auto source = driver::discovery::MakeDeviceSource(source_options);
  std::remove(profile_path.c_str());
  if (!source.ok()) {
    std::fprintf(stderr, "scrape_bench: %s\n", source.status().ToString().c_str());
    return 1;
  }
  auto inventory = (*source)->Discover();
  if (!inventory.ok()) {
    std::fprintf(stderr, "scrape_bench: %s\n", inventory.status().ToString().c_str());
    return 1;
  }

  auto registry = std::make_shared<prometheus::Registry>();
  telemetry::ExemplarStore exemplars;
  telemetry::BuildGauge(*registry, "dralens_build_info")
      .Add({{"version", "bench"}, {"role", "node"}})
      .Set(1);
  k8s::KubeRequestMetrics kube = k8s::KubeRequestMetrics::Create(*registry);
  prepare::PrepareMetrics metrics = prepare::PrepareMetrics::Create(*registry, exemplars);
  prepare::CheckpointJournalMetrics journal = prepare::CheckpointJournalMetrics::Create(*registry);
  prepare::ClaimLedgerMetrics ledger = prepare::ClaimLedgerMetrics::Create(*registry);
  prepare::MigMetrics mig_metrics = prepare::MigMetrics::Create(*registry);
  prepare::SharingMetrics sharing = prepare::SharingMetrics::Create(*registry);
  prepare::ClaimStatusMetrics status = prepare::ClaimStatusMetrics::Create(*registry);
  driver::plugin::KubeletCallMetrics calls = driver::plugin::KubeletCallMetrics::Create(*registry);
  exporter::NodeCollectors collectors(*registry);
  prepare::NodeViewPublisher view("gpu.dralens.dev", "bench-node", collectors);
  driver::slices::SliceMetrics slices(*registry);

  // 256 prepared claims over the 56 MIG devices (several claims share a device).
  auto checkpoint = std::make_shared<prepare::Checkpoint>();
  const auto& migs = inventory->mig_devices();
  for (int i = 0; i < kClaims; ++i) {
    const model::MigDevice& mig = migs[i % migs.size()];
    prepare::CheckpointClaim claim;
    claim.state = prepare::ClaimState::kPrepareCompleted;
    claim.namespace_name = "ml";
    claim.name = absl::StrCat("claim-", i);
    prepare::CheckpointDevice device;
    device.device = driver::slices::MigDeviceName(mig);
    device.pool = "bench-node";
    device.type = model::DeviceType::kMig;
    device.uuid = mig.uuid;
    claim.devices.push_back(device);
    checkpoint->claims[absl::StrCat("00000000-0000-4000-8000-", 100000000000 + i)] = claim;
  }
  view.SetInventory(*inventory);
  view.OnLedgerChanged(prepare::CheckpointSnapshot{.generation = 1, .checkpoint = checkpoint});
  ledger.in_state[static_cast<int>(prepare::ClaimState::kPrepareCompleted)]->Set(kClaims);

  // Traced observations across the buckets, and the usual call and request counters.
  for (int i = 0; i < 20000; ++i) {
    const std::string trace = telemetry::TraceIdFromClaimUid(absl::StrCat("uid-", i)).ToHex();
    const double seconds = 0.0005 * (1 << (i % 16));
    metrics.RecordClaim(
        i % 3 == 0 ? prepare::Operation::kUnprepare : prepare::Operation::kPrepare,
        i % 50 == 0 ? prepare::FailureReason::kApiError : prepare::FailureReason::kNone,
        absl::Seconds(seconds), trace);
    metrics.phases[i % prepare::kPhaseCount]->Observe(seconds / 3);
    calls.Record(prepare::Operation::kPrepare,
                 i % 2 ? driver::plugin::KubeletApi::kV1 : driver::plugin::KubeletApi::kV1beta1,
                 i % 50 != 0);
    journal.writes_ok.Increment();
    mig_metrics.Record(prepare::MigOperation::kCreate, true, absl::Milliseconds(40));
    ledger.transitions[0][1]->Increment();
    sharing.Record(driver::sharing::SharingStrategy::kExclusive, prepare::SharingOutcome::kGranted);
    status.Record(prepare::StatusWrite::kPublish, prepare::StatusWriteResult::kOk);
    kube.RecordRequest("get", "resourceclaims", 200);
  }
  kube.RecordRequest("list", "resourceslices", 200);
  kube.RecordRequest("create", "resourceslices", 201);
  driver::slices::SyncResult synced;
  synced.created = 1;
  synced.generation = 1;
  synced.slices = 1;
  synced.devices = migs.size();
  slices.RecordSync(synced, absl::Milliseconds(3));

  exporter::MetricsServer server(
      registry, [] { return absl::OkStatus(); }, &exemplars);
  if (absl::Status s = server.Start("127.0.0.1:0"); !s.ok()) {
    std::fprintf(stderr, "scrape_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  const double rss_after_setup = StatusKb("VmRSS") / 1024;

  size_t series = 0;
  for (const prometheus::MetricFamily& f : registry->Collect()) {
    series += f.metric.size();
  }

  const Summary text = Measure(scrapes, [&] {
    return telemetry::Render(registry->Collect(), &exemplars,
                             telemetry::ExpositionFormat::kPrometheusText)
        .size();
  });
  const Summary om = Measure(scrapes, [&] {
    return telemetry::Render(registry->Collect(), &exemplars,
                             telemetry::ExpositionFormat::kOpenMetrics)
        .size();
  });
  const Summary baseline = Measure(scrapes, [&] {
    prometheus::TextSerializer serializer;
    return serializer.Serialize(registry->Collect()).size();
  });
  httplib::Client client("127.0.0.1", server.port());
  client.set_keep_alive(true);
  const Summary http = Measure(scrapes, [&] {
    auto res = client.Get("/metrics", {{"Accept", "application/openmetrics-text;version=1.0.0"}});
    return res ? res->body.size() : 0;
  });
  const Summary http_gzip = Measure(scrapes, [&] {
    httplib::Client c("127.0.0.1", server.port());
    c.set_decompress(false);
    auto res = c.Get("/metrics", {{"Accept", "application/openmetrics-text;version=1.0.0"},
                                  {"Accept-Encoding", "gzip"}});
    return res ? res->body.size() : 0;
  });
  server.Stop();

  std::printf("date:    %s\n",
              absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::Now(), absl::UTCTimeZone()).c_str());
  std::printf(
      "node:    8 GPUs x 7 MIG 1g.10gb, %d prepared claims, %zu series, %zu exemplar series\n",
      kClaims, series, exemplars.SeriesCount());
  std::printf("scrapes: %d per row\n\n", scrapes);
  std::printf("%-26s %9s %9s %9s %10s\n", "what", "p50 ms", "p99 ms", "max ms", "bytes");
  auto row = [](const char* what, const Summary& s) {
    std::printf("%-26s %9.3f %9.3f %9.3f %10zu\n", what, s.p50, s.p99, s.max, s.bytes);
  };
  row("render text", text);
  row("render openmetrics", om);
  row("baseline TextSerializer", baseline);
  row("http openmetrics", http);
  row("http gzip, new connection", http_gzip);
  const double rss_peak = StatusKb("VmHWM") / 1024;
  std::printf("\nRSS after setup %.1f MB, peak %.1f MB\n", rss_after_setup, rss_peak);
  std::printf("targets: http p99 %.3f ms %s %.1f ms: %s; peak RSS %.1f MB %s %.0f MB: %s\n",
              http.p99, http.p99 <= kTargetP99Ms ? "<=" : ">", kTargetP99Ms,
              http.p99 <= kTargetP99Ms ? "met" : "NOT met", rss_peak,
              rss_peak <= kTargetRssMb ? "<=" : ">", kTargetRssMb,
              rss_peak <= kTargetRssMb ? "met" : "NOT met");
  return 0;
}

}  // namespace
}  // namespace dralens::bench

int main(int argc, char** argv) { return dralens::bench::Main(argc, argv); }
