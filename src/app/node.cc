// `dralens node`: the DRA kubelet plugin of one GPU node.
//
// Start-up order matters: flags are checked before anything touches the host, the API server
// is reached before the metrics endpoint reports ready, and teardown always runs.
#include <atomic>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "exporter/http/metrics_server.h"
#include "src/app/kube.h"
#include "src/app/lifecycle.h"
#include "src/app/node_driver.h"
#include "src/app/roles.h"
#include "src/app/telemetry_setup.h"
#include "src/common/log.h"
#include "src/common/status.h"

namespace dralens::app {
namespace {

struct NodeState {
  ProcessTelemetry telemetry = NewProcessTelemetry("node");
  std::shared_ptr<prometheus::Registry> registry = telemetry.registry;
  std::unique_ptr<k8s::KubeRequestMetrics> kube_metrics;
  std::unique_ptr<k8s::RestClient> client;
  std::unique_ptr<exporter::MetricsServer> metrics_server;
  std::atomic<bool> node_found{false};
  std::unique_ptr<NodeDriver> driver;
  std::atomic<NodeDriver*> running{nullptr};  // set once the driver started, for /readyz
};

}  // namespace

int RunNode(const FlagValues& flags) {
  NodeState state;
  const std::string node_name = flags.Get("node-name");
  std::vector<Step> startup = {
      {"check flags",
       [&]() -> absl::Status {
         if (node_name.empty()) {
           return absl::InvalidArgumentError(
               "--node-name (NODE_NAME) is required: the Node this driver serves");
         }
         return absl::OkStatus();
       }},
      {"start tracing",
       [&]() -> absl::Status {
         return StartTracing(state.telemetry, "dralens-node", {{"k8s.node.name", node_name}});
       }},
      {"connect to the API server",
       [&]() -> absl::Status {
         ASSIGN_OR_RETURN(k8s::RestConfig config, LoadRestConfig(flags));
         state.kube_metrics = std::make_unique<k8s::KubeRequestMetrics>(
             k8s::KubeRequestMetrics::Create(*state.registry));
         ASSIGN_OR_RETURN(state.client, BuildKubeClient(config, state.kube_metrics.get()));
         return absl::OkStatus();
       }},
      {"serve metrics",
       [&]() -> absl::Status {
         state.metrics_server = std::make_unique<exporter::MetricsServer>(
             state.registry,
             [&]() -> absl::Status {
               if (!state.node_found.load()) {
                 return absl::UnavailableError(absl::StrCat("node ", node_name, " not found"));
               }
               NodeDriver* driver = state.running.load();
               return driver != nullptr ? driver->Ready()
                                        : absl::UnavailableError("kubelet plugin starting");
             },
             state.telemetry.exemplars.get());
         state.metrics_server->AddCollectable(state.telemetry.tracing_metrics.get());
         state.metrics_server->AddJsonEndpoint("/debug/claims", [&]() -> nlohmann::json {
           NodeDriver* driver = state.running.load();
           return driver != nullptr ? driver->DebugClaims() : nlohmann::json{{"error", "starting"}};
         });
         return state.metrics_server->Start(flags.Get("metrics-address"), MetricsSecurity(flags));
       }},
      {"look up the node",
       [&]() -> absl::Status {
         // A node that does not exist is a configuration error; an API server that is busy
         // or restarting is not a reason to crash-loop: retry that for a while.
         absl::StatusOr<nlohmann::json> node;
         absl::Duration backoff = absl::Seconds(1);
         const absl::Time give_up = absl::Now() + absl::Minutes(2);
         while (true) {
           node = state.client->Get(k8s::kNodes, "", node_name);
           const int code = k8s::HttpStatusCode(node.status());
           const bool transient = !node.ok() && (code == 0 || code == 429 || code >= 500);
           if (node.ok() || !transient || absl::Now() + backoff > give_up) {
             break;
           }
           DLOG(kWarn, "node", "node lookup failed; retrying",
                {{"node", node_name},
                 {"error", node.status().message()},
                 {"retry_in", absl::FormatDuration(backoff)}});
           absl::SleepFor(backoff);
           backoff = std::min(2 * backoff, absl::Seconds(16));
         }
         if (!node.ok()) {
           return common::Annotate(node.status(), absl::StrCat("get node ", node_name));
         }
         state.node_found = true;
         DLOG(kInfo, "node", "node found",
              {{"node", node_name}, {"uid", node->value("/metadata/uid"_json_pointer, "")}});
         return absl::OkStatus();
       }},
      {"start the driver",
       [&]() -> absl::Status {
         NodeDriverOptions options;
         options.node_name = node_name;
         options.driver_name = flags.Get("driver-name");
         options.registry_dir = flags.Get("kubelet-registry-dir");
         options.plugins_dir = flags.Get("kubelet-plugins-dir");
         options.cdi_root = flags.Get("cdi-root");
         options.device_source.kind = flags.Get("device-source");
         options.device_source.simulated_profile = flags.Get("simulated-profile");
         options.device_taints = flags.GetBool("device-taints");
         options.dynamic_mig = flags.GetBool("dynamic-mig");
         options.consumable_capacity = flags.GetBool("consumable-capacity");
         absl::ParseDuration(flags.Get("orphan-check-interval"), &options.orphan_check_interval);
         if (const std::string after = flags.Get("unprepare-orphans-after"); !after.empty()) {
           absl::Duration d;
           absl::ParseDuration(after, &d);  // checked by the flag parser
           options.unprepare_orphans_after = d;
         }
         absl::ParseDuration(flags.Get("utilization-interval"), &options.utilization_interval);
         absl::SimpleAtod(flags.Get("idle-threshold"), &options.idle_threshold);
         if (options.dynamic_mig) {
           options.api_minor = ServerMinorVersion(*state.client);
         }
         options.registry = state.registry.get();
         options.exemplars = state.telemetry.exemplars.get();
         options.tracer = &state.telemetry.tracer();
         ASSIGN_OR_RETURN(state.driver, NodeDriver::Start(std::move(options), *state.client,
                                                          common::RealClock()));
         state.running = state.driver.get();
         return absl::OkStatus();
       }},
      {"wait for shutdown",
       [&]() -> absl::Status {
         DLOG(kInfo, "node", "running", {{"node", node_name}});
         DLOG(kInfo, "node", "stopping", {{"signal", WaitForShutdownSignal()}});
         return absl::OkStatus();
       }},
  };
  std::vector<Step> teardown = {
      {"stop the driver",
       [&] {
         if (state.driver) {
           state.driver->Stop();
         }
         return absl::OkStatus();
       }},
      {"flush spans",
       [&] {
         state.telemetry.Shutdown();
         return absl::OkStatus();
       }},
      {"stop metrics",
       [&] {
         if (state.metrics_server) {
           state.metrics_server->Stop();
         }
         return absl::OkStatus();
       }},
  };
  absl::Status s = RunLifecycle("node", startup, teardown);
  if (!s.ok()) {
    DLOG(kError, "node", "exiting", {{"error", s.message()}});
    return 1;
  }
  return 0;
}

}  // namespace dralens::app
