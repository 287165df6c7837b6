// `dralens demo`: everything on this machine, no cluster needed.
//
// Starts the embedded API server, registers the simulated nodes and runs the node role for each
// of them in this process (each with its own kubelet directories, CDI root and metrics port,
// registered by a kubelet stand-in), runs the cluster role against the API server, starts the
// workload generator (src/sim/workload.h: users, scheduler and kubelet stand-in, preparing through
// the nodes' real gRPC sockets), optionally a real Prometheus scraping all of it
// (prometheus_child.h), and prints how to look at it all with kubectl and curl. At a fixed point
// of the run the simulated GPU source of one A100 node reports a critical Xid, so device health,
// taints and stranded unhealthy capacity have data too.
//
// The banner is the first thing on the terminal: the log goes to demo.log in the demo's
// temporary directory, and only warnings and errors (every line with --verbose) to stderr too.
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <system_error>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "driver/discovery/simulated/simulated_device_source.h"
#include "exporter/http/metrics_server.h"
#include "src/app/cluster_role.h"
#include "src/app/kube.h"
#include "src/app/lifecycle.h"
#include "src/app/node_driver.h"
#include "src/app/prometheus_child.h"
#include "src/app/roles.h"
#include "src/app/telemetry_setup.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/sim/api_server.h"
#include "src/sim/demo_gang.h"
#include "src/sim/kubelet.h"
#include "src/sim/workload.h"

namespace dralens::app {
namespace {

// The simulated nodes alternate between an H100 node whose two GPUs are in dynamic-MIG mode and
// an A100 node with eight whole GPUs.
std::string DemoNodeName(int i) {
  return i % 2 == 0 ? absl::StrCat("dgx-h100-", i / 2) : absl::StrCat("a100-", i / 2);
}

std::string DemoProfile(int i) { return i % 2 == 0 ? "h100x2" : "a100-40gb"; }
bool DemoDynamicMig(int i) { return i % 2 == 0; }

nlohmann::json DemoNode(const std::string& name, int i) {
  return {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata",
       {{"name", name},
        {"labels",
         {{"kubernetes.io/hostname", name}, {"dralens.dev/simulated-profile", DemoProfile(i)}}}}}};
}

// Where a simulated node keeps its kubelet directories and CDI root: under the directory a flag
// names when it was set, else under the demo's own temporary directory.
std::string NodeDir(const FlagValues& flags, const std::string& flag, const std::string& scratch,
                    const std::string& leaf, const std::string& node) {
  if (flags.Source(flag) != "default") {
    return absl::StrCat(flags.Get(flag), "/", node);
  }
  return absl::StrCat(scratch, "/", node, "/", leaf);
}

// One simulated node, as its DaemonSet pod would be: its own registry, API client and metrics
// endpoint, so its series carry no node label of their own (Prometheus adds `instance`).
struct SimulatedNode {
  std::string name;
  ProcessTelemetry telemetry = NewProcessTelemetry("node");
  std::unique_ptr<k8s::KubeRequestMetrics> kube_metrics;
  std::unique_ptr<k8s::RestClient> client;
  std::unique_ptr<NodeDriver> driver;
  std::unique_ptr<exporter::MetricsServer> metrics_server;
};

// Simulated node i serves metrics on the demo's port + 1 + i, or on a free port when the demo
// itself was given port 0.
std::string NodeMetricsAddress(const std::string& demo_address, int i) {
  std::string host;
  int port = 0;
  if (!exporter::SplitHostPort(demo_address, &host, &port).ok() || port == 0) {
    return absl::StrCat(host.empty() ? "127.0.0.1" : host, ":0");
  }
  return absl::StrCat(host, ":", port + 1 + i);
}

// Removes the demo's temporary directory; after a failed start it keeps the log for the user.
void RemoveScratch(const std::string& scratch, const std::string& keep) {
  std::error_code ec;
  if (keep.empty()) {
    std::filesystem::remove_all(scratch, ec);
    return;
  }
  for (const auto& entry : std::filesystem::directory_iterator(scratch, ec)) {
    if (entry.path() != keep) {
      std::filesystem::remove_all(entry.path(), ec);
    }
  }
}

std::string ExecutableDir() {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : exe.parent_path().string();
}

// Xid 48 (double-bit ECC error) is critical: the node marks the GPU unhealthy and taints it.
constexpr uint64_t kDemoXid = 48;

// After `after`, reports a critical Xid on the last GPU of `node`, through its simulated device
// source, as NVML would report it: the health monitor, the slice taints, the node's device state
// and the cluster role's view of the slice all follow from it. Stop() ends the wait early.
class FaultInjector {
 public:
  FaultInjector(SimulatedNode& node, absl::Duration after) : node_(node) {
    thread_ = std::thread([this, after] {
      if (stop_.WaitForNotificationWithTimeout(after)) {
        return;
      }
      Inject();
    });
  }
  ~FaultInjector() { Stop(); }
  void Stop() {
    if (!stop_.HasBeenNotified()) {
      stop_.Notify();
    }
    if (thread_.joinable()) {
      thread_.join();
    }
  }

 private:
  void Inject() {
    auto* source =
        dynamic_cast<driver::discovery::SimulatedDeviceSource*>(&node_.driver->device_source());
    absl::StatusOr<model::Inventory> inventory =
        source == nullptr ? absl::FailedPreconditionError("not a simulated device source")
                          : source->Discover();
    if (!inventory.ok() || inventory->gpus().empty()) {
      DLOG(kWarn, "demo", "no GPU to inject a fault into",
           {{"node", node_.name}, {"error", inventory.status().message()}});
      return;
    }
    const model::GpuInfo& gpu = inventory->gpus().back();
    const std::string device = absl::StrCat("gpu-", gpu.minor);
    if (absl::Status s = source->InjectXid(gpu.uuid, kDemoXid); !s.ok()) {
      DLOG(kWarn, "demo", "could not inject an Xid",
           {{"node", node_.name}, {"device", device}, {"error", s.message()}});
      return;
    }
    DLOG(kInfo, "demo", "injected a critical Xid into a simulated GPU",
         {{"node", node_.name}, {"device", device}, {"xid", absl::StrCat(kDemoXid)}});
  }

  SimulatedNode& node_;
  absl::Notification stop_;
  std::thread thread_;
};

// Sets (or, with nullopt, clears) the load of the devices a prepared claim holds on a simulated
// node. Busy pods fill 6 GiB of device memory, idle ones hold 2 GiB: a model loaded and left.
void SetPodLoad(SimulatedNode& node, const std::string& claim_uid,
                std::optional<double> utilization) {
  auto* source =
      dynamic_cast<driver::discovery::SimulatedDeviceSource*>(&node.driver->device_source());
  std::optional<driver::prepare::CheckpointClaim> claim =
      node.driver->preparation().ledger().Find(claim_uid);
  if (source == nullptr || !claim.has_value()) {
    return;
  }
  for (const driver::prepare::CheckpointDevice& d : claim->devices) {
    if (d.uuid.empty()) {
      continue;
    }
    if (!utilization.has_value()) {
      source->ClearLoad(d.uuid, claim_uid);
      continue;
    }
    const uint64_t memory = (*utilization < 0.05 ? 2ULL : 6ULL) << 30;
    if (absl::Status s = source->SetLoad(d.uuid, claim_uid, *utilization, memory); !s.ok()) {
      DLOG(kWarn, "demo", "could not set a pod's load",
           {{"node", node.name}, {"claim_uid", claim_uid}, {"error", s.message()}});
    }
  }
}

}  // namespace

int RunDemo(const FlagValues& flags) {
  ProcessTelemetry telemetry = NewProcessTelemetry("demo");
  std::shared_ptr<prometheus::Registry> registry = telemetry.registry;
  std::unique_ptr<sim::ApiServer> api_server;
  std::unique_ptr<k8s::KubeRequestMetrics> kube_metrics;
  std::unique_ptr<k8s::RestClient> client;
  std::unique_ptr<ClusterRole> cluster;
  std::unique_ptr<k8s::RestClient> workload_client;
  std::unique_ptr<sim::Workload> workload;
  std::unique_ptr<exporter::MetricsServer> metrics_server;
  std::vector<std::unique_ptr<SimulatedNode>> sim_nodes;
  std::unique_ptr<FaultInjector> fault;
  std::unique_ptr<PrometheusChild> prometheus;
  // --otlp-endpoint given as a flag overrides both OTLP endpoint variables for every role; from
  // the environment it is OTEL_EXPORTER_OTLP_ENDPOINT itself, read as usual.
  const std::string otlp_endpoint =
      flags.Source("otlp-endpoint") == "flag" ? flags.Get("otlp-endpoint") : "";
  k8s::RestConfig api_config;
  int nodes = 2;
  (void)absl::SimpleAtoi(flags.Get("demo-nodes"), &nodes);

  // The demo's temporary directory, removed at the end; the log goes there from the start.
  char tmpl[] = "/tmp/dralens-demo-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    DLOG(kError, "demo", "exiting",
         {{"error", "create the demo's temporary directory under /tmp"}});
    return 1;
  }
  const std::string scratch = tmpl;
  const std::string log_path = absl::StrCat(scratch, "/demo.log");
  if (absl::Status s = common::SetLogFile(
          log_path, flags.GetBool("verbose") ? common::LogLevel::kDebug : common::LogLevel::kWarn);
      !s.ok()) {
    DLOG(kError, "demo", "exiting", {{"error", s.message()}});
    RemoveScratch(scratch, "");
    return 1;
  }

  std::vector<Step> startup = {
      {"start the embedded API server",
       [&]() -> absl::Status {
         sim::ApiServerOptions options;
         options.feature_gates = {"GenericWorkload"};  // gangs (Kubernetes 1.35)
         std::string host;
         RETURN_IF_ERROR(
             exporter::SplitHostPort(flags.Get("api-server-address"), &host, &options.port));
         options.address = host;
         api_server = std::make_unique<sim::ApiServer>(options);
         return api_server->Start();
       }},
      {"connect to it",
       [&]() -> absl::Status {
         k8s::RestConfig& config = api_config;
         config.server = api_server->url();
         kube_metrics =
             std::make_unique<k8s::KubeRequestMetrics>(k8s::KubeRequestMetrics::Create(*registry));
         ASSIGN_OR_RETURN(client, BuildKubeClient(config, kube_metrics.get()));
         return absl::OkStatus();
       }},
      {"register the simulated nodes",
       [&]() -> absl::Status {
         for (int i = 0; i < nodes; ++i) {
           const std::string name = DemoNodeName(i);
           auto created = client->Create(k8s::kNodes, "", DemoNode(name, i));
           RETURN_IF_ERROR_CTX(created.status(), absl::StrCat("create node ", name));
         }
         return absl::OkStatus();
       }},
      {"start the simulated nodes",
       [&]() -> absl::Status {
         for (int i = 0; i < nodes; ++i) {
           auto sim_node = std::make_unique<SimulatedNode>();
           SimulatedNode& n = *sim_node;
           n.name = DemoNodeName(i);
           n.kube_metrics = std::make_unique<k8s::KubeRequestMetrics>(
               k8s::KubeRequestMetrics::Create(*n.telemetry.registry));
           ASSIGN_OR_RETURN(n.client, BuildKubeClient(api_config, n.kube_metrics.get()));
           NodeDriverOptions options;
           options.node_name = n.name;
           options.driver_name = flags.Get("driver-name");
           options.registry_dir =
               NodeDir(flags, "kubelet-registry-dir", scratch, "plugins_registry", n.name);
           options.plugins_dir = NodeDir(flags, "kubelet-plugins-dir", scratch, "plugins", n.name);
           options.cdi_root = NodeDir(flags, "cdi-root", scratch, "cdi", n.name);
           options.device_source.kind = "simulated";
           options.device_source.simulated_profile = DemoProfile(i);
           options.dynamic_mig = DemoDynamicMig(i);
           options.api_minor = ServerMinorVersion(*n.client);
           // The embedded API server accepts taints; show health in the slices.
           options.device_taints = true;
           (void)absl::ParseDuration(flags.Get("utilization-interval"),
                                     &options.utilization_interval);
           (void)absl::SimpleAtod(flags.Get("idle-threshold"), &options.idle_threshold);
           RETURN_IF_ERROR(StartTracing(n.telemetry, "dralens-node", {{"k8s.node.name", n.name}},
                                        otlp_endpoint));
           options.registry = n.telemetry.registry.get();
           options.exemplars = n.telemetry.exemplars.get();
           options.tracer = &n.telemetry.tracer();
           absl::StatusOr<std::unique_ptr<NodeDriver>> driver =
               NodeDriver::Start(std::move(options), *n.client, common::RealClock());
           RETURN_IF_ERROR_CTX(driver.status(), absl::StrCat("start node ", n.name));
           n.driver = *std::move(driver);
           absl::StatusOr<sim::RegisteredPlugin> registered =
               sim::RegisterPlugin(n.driver->registration_socket_path());
           RETURN_IF_ERROR_CTX(registered.status(), absl::StrCat("register node ", n.name));
           DLOG(kInfo, "demo", "kubelet stand-in registered the plugin",
                {{"node", n.name}, {"service", registered->service_version}});
           NodeDriver* driver_ptr = n.driver.get();
           n.metrics_server = std::make_unique<exporter::MetricsServer>(
               n.telemetry.registry, [driver_ptr] { return driver_ptr->Ready(); },
               n.telemetry.exemplars.get());
           n.metrics_server->AddCollectable(n.telemetry.tracing_metrics.get());
           n.metrics_server->AddJsonEndpoint("/debug/claims",
                                             [driver_ptr] { return driver_ptr->DebugClaims(); });
           RETURN_IF_ERROR_CTX(
               n.metrics_server->Start(NodeMetricsAddress(flags.Get("metrics-address"), i),
                                       MetricsSecurity(flags)),
               absl::StrCat("serve metrics of node ", n.name));
           sim_nodes.push_back(std::move(sim_node));
         }
         return absl::OkStatus();
       }},
      {"start the cluster role",
       [&]() -> absl::Status {
         RETURN_IF_ERROR(StartTracing(telemetry, "dralens-cluster", {}, otlp_endpoint));
         ClusterRoleOptions options;
         options.price_per_device_hour = 2.5;  // a round on-demand price, so cost has data
         options.topology_sensitive_classes = ClassList(flags.Get("topology-sensitive-classes"));
         if (options.topology_sensitive_classes.empty()) {
           // The demo's full-GPU class (named after the driver) holds its two-GPU jobs.
           options.topology_sensitive_classes.insert(flags.Get("driver-name"));
         }
         options.tick = absl::Seconds(1);
         options.claim_events = flags.GetBool("claim-events");
         options.instance = "dralens-demo";
         options.claim_event_period = absl::Seconds(1);
         ASSIGN_OR_RETURN(
             cluster, ClusterRole::Start(std::move(options), *client, kube_metrics.get(), *registry,
                                         telemetry.tracer()));
         metrics_server = std::make_unique<exporter::MetricsServer>(
             registry,
             [&]() -> absl::Status {
               for (const auto& n : sim_nodes) {
                 RETURN_IF_ERROR_CTX(n->driver->Ready(), n->name);
               }
               return cluster->Ready();
             },
             telemetry.exemplars.get());
         metrics_server->AddCollectable(telemetry.tracing_metrics.get());
         metrics_server->AddCollectable(cluster->collectable());
         metrics_server->AddTextSource(cluster->text_source());
         AddClaimDebugEndpoint(*metrics_server, *cluster);
         return metrics_server->Start(flags.Get("metrics-address"), MetricsSecurity(flags));
       }},
      {"start the workload",
       [&]() -> absl::Status {
         sim::WorkloadOptions options;
         options.driver_name = flags.Get("driver-name");
         // Three teams share the fleet, so that cost by team has something to show.
         options.team_namespaces = {"research", "inference", "notebooks"};
         // Two-GPU jobs, placed as a topology-unaware scheduler may place them; the full-GPU
         // class is marked topology-sensitive (see --topology-sensitive-classes below).
         options.two_gpu_claims = true;
         (void)absl::SimpleAtoi(flags.Get("demo-seed"), &options.seed);
         (void)absl::ParseDuration(flags.Get("demo-claim-interval"), &options.claim_interval);
         (void)absl::ParseDuration(flags.Get("demo-pod-duration"), &options.mean_pod_duration);
         for (const auto& n : sim_nodes) {
           options.plugin_sockets[n->name] = n->driver->dra_socket_path();
         }
         // A pod's load lands on the devices its claim was prepared with, as a real process
         // in the container would: the node's usage sampler reads it from the simulated source.
         options.pod_load = [&sim_nodes](const std::string& node, const std::string& uid,
                                         std::optional<double> utilization) {
           for (const auto& n : sim_nodes) {
             if (n->name == node) {
               SetPodLoad(*n, uid, utilization);
             }
           }
         };
         // Its own client, unmetered: the cluster role's request series stay its own calls.
         ASSIGN_OR_RETURN(workload_client, BuildKubeClient(api_config, nullptr));
         workload = std::make_unique<sim::Workload>(std::move(options), *workload_client,
                                                    common::RealClock());
         RETURN_IF_ERROR_CTX(workload->Setup(), "set up the workload");
         // A gang of four three-GPU workers in `research` that does not fit (src/sim/demo_gang.h).
         RETURN_IF_ERROR(
             sim::CreateDemoGang(*workload_client, "research", flags.Get("driver-name")));
         workload->Start();
         return absl::OkStatus();
       }},
      {"schedule the GPU fault",
       [&]() -> absl::Status {
         absl::Duration after;
         (void)absl::ParseDuration(flags.Get("demo-fault-after"), &after);
         for (const auto& n : sim_nodes) {
           if (after > absl::ZeroDuration() && absl::StartsWith(n->name, "a100-")) {
             fault = std::make_unique<FaultInjector>(*n, after);
             break;
           }
         }
         return absl::OkStatus();
       }},
      {"start Prometheus",
       [&]() -> absl::Status {
         if (!flags.GetBool("with-prometheus")) {
           return absl::OkStatus();
         }
         PrometheusOptions options;
         options.binary = flags.Get("prometheus-binary");
         options.listen_address = flags.Get("prometheus-address");
         options.dir = absl::StrCat(scratch, "/prometheus");
         ASSIGN_OR_RETURN(
             options.config.rules_file,
             FindAlertRules(flags.Get("prometheus-rules"), ExecutableDir(), DRALENS_SOURCE_DIR));
         std::string host;
         int port = 0;
         RETURN_IF_ERROR(exporter::SplitHostPort(flags.Get("metrics-address"), &host, &port));
         options.config.cluster_target = ScrapeTarget(host, metrics_server->port());
         for (const auto& n : sim_nodes) {
           options.config.node_targets.push_back(ScrapeTarget(host, n->metrics_server->port()));
         }
         for (absl::string_view target :
              absl::StrSplit(flags.Get("prometheus-dcgm-targets"), ',', absl::SkipEmpty())) {
           options.config.dcgm_targets.emplace_back(target);
         }
         ASSIGN_OR_RETURN(prometheus, PrometheusChild::Start(std::move(options)));
         return absl::OkStatus();
       }},
      {"print where to look",
       [&]() -> absl::Status {
         std::printf(
             "\ndralens demo is running.\n\n"
             "  API server:  %s\n"
             "    kubectl --server %s get nodes,resourceslices,resourceclaims,deviceclasses -A\n"
             "  cluster role metrics: http://127.0.0.1:%d/metrics   (readiness: /readyz)\n",
             api_server->url().c_str(), api_server->url().c_str(), metrics_server->port());
         for (const auto& n : sim_nodes) {
           std::printf(
               "  node %-11s metrics http://127.0.0.1:%d/metrics, %zu devices, kubelet "
               "plugin %s\n",
               n->name.c_str(), n->metrics_server->port(), n->driver->device_count(),
               n->driver->dra_socket_path().c_str());
         }
         std::printf(
             "\n  workload: a claim every %s for the teams research, inference and notebooks "
             "(a namespace each; seed %s); pods run %s on average\n"
             "    kubectl --server %s get pods,resourceclaims -A\n",
             flags.Get("demo-claim-interval").c_str(), flags.Get("demo-seed").c_str(),
             flags.Get("demo-pod-duration").c_str(), api_server->url().c_str());
         if (fault != nullptr) {
           std::printf(
               "\n  fault: after %s the last GPU of %s reports Xid %d and turns unhealthy\n",
               flags.Get("demo-fault-after").c_str(), DemoNodeName(1).c_str(),
               static_cast<int>(kDemoXid));
         }
         if (prometheus != nullptr) {
           std::printf(
               "\n  Prometheus:  %s   (alerts: %s/alerts, targets: %s/targets)\n"
               "    config %s, log %s\n",
               prometheus->url().c_str(), prometheus->url().c_str(), prometheus->url().c_str(),
               prometheus->config_path().c_str(), prometheus->log_path().c_str());
         }
         std::printf("\n  log:  %s   (%s)\n", log_path.c_str(),
                     flags.GetBool("verbose")
                         ? "every line also shows below"
                         : "warnings and errors also show below; -v shows every line");
         std::printf("\nPress Ctrl-C to stop.\n\n");
         std::fflush(stdout);
         return absl::OkStatus();
       }},
      {"wait for shutdown",
       [&]() -> absl::Status {
         DLOG(kInfo, "demo", "stopping",
              {{"signal", WaitForShutdownSignal()}, {"cache", cluster->Summary()}});
         return absl::OkStatus();
       }},
  };
  std::vector<Step> teardown = {
      {"stop Prometheus",
       [&] {
         if (prometheus) {
           prometheus->Stop();
         }
         return absl::OkStatus();
       }},
      {"stop the fault injector",
       [&] {
         if (fault) {
           fault->Stop();
         }
         return absl::OkStatus();
       }},
      {"stop the workload",
       [&] {
         if (workload) {
           workload->Stop();
         }
         return absl::OkStatus();
       }},
      {"stop metrics",
       [&] {
         if (metrics_server) {
           metrics_server->Stop();
         }
         return absl::OkStatus();
       }},
      {"stop the simulated nodes",
       [&] {
         for (auto& n : sim_nodes) {
           if (n->metrics_server) {
             n->metrics_server->Stop();
           }
           if (n->driver) {
             n->driver->Stop();
           }
           n->telemetry.Shutdown();
         }
         sim_nodes.clear();
         return absl::OkStatus();
       }},
      {"stop the cluster role",
       [&] {
         if (cluster) {
           cluster->Stop();
         }
         telemetry.Shutdown();
         return absl::OkStatus();
       }},
      {"stop the API server",
       [&] {
         if (api_server) {
           api_server->Stop();
         }
         return absl::OkStatus();
       }},
  };
  absl::Status s = RunLifecycle("demo", startup, teardown);
  if (!s.ok()) {
    DLOG(kError, "demo", "exiting", {{"error", s.message()}, {"log", log_path}});
  }
  common::CloseLogFile();
  RemoveScratch(scratch, s.ok() ? "" : log_path);
  return s.ok() ? 0 : 1;
}

}  // namespace dralens::app
