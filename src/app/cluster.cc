// `dralens cluster`: one per cluster; watches claims, slices, classes, pods and nodes, and
// exports the analyzer's findings (exporter/cluster) from the leader replica.
#include <unistd.h>

#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/synchronization/notification.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/feed.h"
#include "exporter/cluster/leader_gate.h"
#include "exporter/cluster/pricing.h"
#include "exporter/http/metrics_server.h"
#include "src/app/cluster_watch.h"
#include "src/app/kube.h"
#include "src/app/lifecycle.h"
#include "src/app/roles.h"
#include "src/app/telemetry_setup.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/k8s/leader_elector.h"

namespace dralens::app {
namespace {

// How often pending ages and stranded device-seconds are brought up to date between events.
constexpr absl::Duration kTickInterval = absl::Seconds(5);

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) {
    return "dralens-cluster";
  }
  return buf;
}

}  // namespace

int RunCluster(const FlagValues& flags) {
  ProcessTelemetry telemetry = NewProcessTelemetry("cluster");
  std::shared_ptr<prometheus::Registry> registry = telemetry.registry;
  auto cluster_registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<k8s::KubeRequestMetrics> kube_metrics;
  std::unique_ptr<k8s::RestClient> client;
  std::unique_ptr<exporter::cluster::Analyzer> analyzer;
  std::unique_ptr<exporter::cluster::LeaderGate> gate;
  std::unique_ptr<ClusterWatch> watch;
  std::unique_ptr<k8s::LeaderElector> elector;
  std::unique_ptr<exporter::MetricsServer> metrics_server;
  absl::Notification stop_ticker;
  std::unique_ptr<std::thread> ticker;

  // Order matters: the analyzer exists before the informers feed it, the gate before the
  // elector flips it, and teardown stops feeders before the analyzer goes away.
  std::vector<Step> startup = {
      {"connect to the API server",
       [&]() -> absl::Status {
         ASSIGN_OR_RETURN(k8s::RestConfig config, LoadRestConfig(flags));
         kube_metrics =
             std::make_unique<k8s::KubeRequestMetrics>(k8s::KubeRequestMetrics::Create(*registry));
         ASSIGN_OR_RETURN(client, BuildKubeClient(config, kube_metrics.get()));
         return absl::OkStatus();
       }},
      {"start tracing", [&]() { return StartTracing(telemetry, "dralens-cluster"); }},
      {"build the analyzer",
       [&]() -> absl::Status {
         double price = 0;
         if (!absl::SimpleAtod(flags.Get("price-per-device-hour"), &price)) {
           return absl::InvalidArgumentError("--price-per-device-hour: must be a number >= 0");
         }
         ASSIGN_OR_RETURN(exporter::cluster::PriceTable prices,
                          exporter::cluster::PriceTable::Load(flags.Get("price-file"), price));
         exporter::cluster::AnalyzerOptions options;
         options.prices = std::move(prices);
         analyzer = std::make_unique<exporter::cluster::Analyzer>(
             *cluster_registry, telemetry.tracer(), std::move(options));
         gate = std::make_unique<exporter::cluster::LeaderGate>(cluster_registry, *registry);
         return absl::OkStatus();
       }},
      {"start informers",
       [&]() -> absl::Status {
         watch = std::make_unique<ClusterWatch>(
             *client, kube_metrics.get(), [&](const k8s::ResourceType& type) {
               return exporter::cluster::HandlersFor(type, *analyzer);
             });
         watch->Start();
         ticker = std::make_unique<std::thread>([&] {
           bool nodes_synced = false;
           do {
             if (!nodes_synced && watch->Synced(k8s::kNodes.plural)) {
               analyzer->SetNodesSynced();
               nodes_synced = true;
             }
             analyzer->Tick();
           } while (!stop_ticker.WaitForNotificationWithTimeout(kTickInterval));
         });
         return absl::OkStatus();
       }},
      {"elect a leader",
       [&]() -> absl::Status {
         if (!flags.GetBool("leader-elect")) {
           gate->SetLeader(true);
           return absl::OkStatus();
         }
         k8s::LeaderElectionOptions options;
         options.lease_name = flags.Get("leader-elect-lease-name");
         options.lease_namespace = flags.Get("leader-elect-lease-namespace");
         options.identity = flags.Get("leader-elect-identity");
         if (options.identity.empty()) {
           options.identity = HostName();
         }
         options.on_started_leading = [&] { gate->SetLeader(true); };
         options.on_stopped_leading = [&] { gate->SetLeader(false); };
         ASSIGN_OR_RETURN(elector, k8s::LeaderElector::Create(*client, std::move(options)));
         elector->Start();
         return absl::OkStatus();
       }},
      {"serve metrics",
       [&]() -> absl::Status {
         metrics_server = std::make_unique<exporter::MetricsServer>(
             registry, [&] { return watch->Ready(); }, telemetry.exemplars.get());
         metrics_server->AddCollectable(telemetry.tracing_metrics.get());
         metrics_server->AddCollectable(gate.get());
         return metrics_server->Start(flags.Get("metrics-address"));
       }},
      {"wait for shutdown",
       [&]() -> absl::Status {
         DLOG(kInfo, "cluster", "running");
         DLOG(kInfo, "cluster", "stopping",
              {{"signal", WaitForShutdownSignal()}, {"cache", watch->Summary()}});
         return absl::OkStatus();
       }},
  };
  std::vector<Step> teardown = {
      {"stop metrics",
       [&] {
         if (metrics_server) {
           metrics_server->Stop();
         }
         return absl::OkStatus();
       }},
      {"release the lease",
       [&] {
         if (elector) {
           elector->Stop();
         }
         return absl::OkStatus();
       }},
      {"stop informers",
       [&] {
         if (ticker) {
           stop_ticker.Notify();
           ticker->join();
         }
         if (watch) {
           watch->Stop();
         }
         return absl::OkStatus();
       }},
      {"end claim spans and flush traces",
       [&] {
         analyzer.reset();
         telemetry.Shutdown();
         return absl::OkStatus();
       }},
  };
  absl::Status s = RunLifecycle("cluster", startup, teardown);
  if (!s.ok()) {
    DLOG(kError, "cluster", "exiting", {{"error", s.message()}});
    return 1;
  }
  return 0;
}

}  // namespace dralens::app
