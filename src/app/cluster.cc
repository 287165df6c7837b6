// `dralens cluster`: one per cluster; watches claims, slices, classes, pods and nodes, and
// exports the analyzer's findings (exporter/cluster) from the leader replica.
#include <unistd.h>

#include <memory>

#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "exporter/http/metrics_server.h"
#include "src/app/cluster_role.h"
#include "src/app/kube.h"
#include "src/app/lifecycle.h"
#include "src/app/roles.h"
#include "src/app/telemetry_setup.h"
#include "src/common/log.h"
#include "src/common/status.h"

namespace dralens::app {
namespace {

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
  std::unique_ptr<k8s::KubeRequestMetrics> kube_metrics;
  std::unique_ptr<k8s::RestClient> client;
  std::unique_ptr<ClusterRole> role;
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
      {"start tracing", [&]() { return StartTracing(telemetry, "dralens-cluster"); }},
      {"start the analyzer and its informers",
       [&]() -> absl::Status {
         ClusterRoleOptions options;
         if (!absl::SimpleAtod(flags.Get("price-per-device-hour"),
                               &options.price_per_device_hour)) {
           return absl::InvalidArgumentError("--price-per-device-hour: must be a number >= 0");
         }
         options.price_file = flags.Get("price-file");
         options.topology_sensitive_classes = ClassList(flags.Get("topology-sensitive-classes"));
         // Checked by the flag parser.
         (void)absl::ParseDuration(flags.Get("stranded-series-retention"),
                                   &options.stranded_retention);
         options.claim_events = flags.GetBool("claim-events");
         options.leader_elect = flags.GetBool("leader-elect");
         options.election.lease_name = flags.Get("leader-elect-lease-name");
         options.election.lease_namespace = flags.Get("leader-elect-lease-namespace");
         options.election.identity = flags.Get("leader-elect-identity");
         if (options.election.identity.empty()) {
           options.election.identity = HostName();
         }
         options.instance = options.election.identity;
         ASSIGN_OR_RETURN(role, ClusterRole::Start(std::move(options), *client, kube_metrics.get(),
                                                   *registry, telemetry.tracer()));
         return absl::OkStatus();
       }},
      {"serve metrics",
       [&]() -> absl::Status {
         metrics_server = std::make_unique<exporter::MetricsServer>(
             registry, [&] { return role->Ready(); }, telemetry.exemplars.get());
         metrics_server->AddCollectable(telemetry.tracing_metrics.get());
         metrics_server->AddCollectable(role->collectable());
         metrics_server->AddTextSource(role->text_source());
         AddClaimDebugEndpoint(*metrics_server, *role);
         return metrics_server->Start(flags.Get("metrics-address"), MetricsSecurity(flags));
       }},
      {"wait for shutdown",
       [&]() -> absl::Status {
         DLOG(kInfo, "cluster", "running");
         DLOG(kInfo, "cluster", "stopping",
              {{"signal", WaitForShutdownSignal()}, {"cache", role->Summary()}});
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
      {"release the lease, stop informers, end claim spans",
       [&] {
         if (role) {
           role->Stop();
         }
         return absl::OkStatus();
       }},
      {"flush traces",
       [&] {
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
