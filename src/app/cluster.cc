// `dralens cluster`: one per cluster; watches claims, slices, classes, pods and nodes.
#include <memory>

#include "exporter/http/metrics_server.h"
#include "src/app/cluster_watch.h"
#include "src/app/kube.h"
#include "src/app/lifecycle.h"
#include "src/app/roles.h"
#include "src/app/telemetry_setup.h"
#include "src/common/log.h"
#include "src/common/status.h"

namespace dralens::app {

int RunCluster(const FlagValues& flags) {
  ProcessTelemetry telemetry = NewProcessTelemetry("cluster");
  std::shared_ptr<prometheus::Registry> registry = telemetry.registry;
  std::unique_ptr<k8s::KubeRequestMetrics> kube_metrics;
  std::unique_ptr<k8s::RestClient> client;
  std::unique_ptr<ClusterWatch> watch;
  std::unique_ptr<exporter::MetricsServer> metrics_server;

  std::vector<Step> startup = {
      {"connect to the API server",
       [&]() -> absl::Status {
         ASSIGN_OR_RETURN(k8s::RestConfig config, LoadRestConfig(flags));
         kube_metrics =
             std::make_unique<k8s::KubeRequestMetrics>(k8s::KubeRequestMetrics::Create(*registry));
         ASSIGN_OR_RETURN(client, BuildKubeClient(config, kube_metrics.get()));
         return absl::OkStatus();
       }},
      {"start informers",
       [&]() -> absl::Status {
         watch = std::make_unique<ClusterWatch>(*client, kube_metrics.get());
         watch->Start();
         return absl::OkStatus();
       }},
      {"serve metrics",
       [&]() -> absl::Status {
         metrics_server = std::make_unique<exporter::MetricsServer>(
             registry, [&] { return watch->Ready(); }, telemetry.exemplars.get());
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
      {"stop informers",
       [&] {
         if (watch) {
           watch->Stop();
         }
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
