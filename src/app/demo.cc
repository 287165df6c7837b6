// `dralens demo`: everything on this machine, no cluster needed.
//
// Starts the embedded API server, registers the simulated nodes and runs the node role for each
// of them in this process (each with its own kubelet directories and CDI root, registered by a
// kubelet stand-in), runs the cluster role's informers against the API server, and prints how
// to look at it all with kubectl and curl.
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "exporter/http/metrics_server.h"
#include "src/app/cluster_watch.h"
#include "src/app/kube.h"
#include "src/app/lifecycle.h"
#include "src/app/node_driver.h"
#include "src/app/roles.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/sim/api_server.h"
#include "src/sim/kubelet.h"

namespace dralens::app {
namespace {

// The simulated nodes alternate between the two built-in machine profiles.
std::string DemoNodeName(int i) {
  return i % 2 == 0 ? absl::StrCat("dgx-h100-", i / 2) : absl::StrCat("a100-", i / 2);
}

std::string DemoProfile(int i) { return i % 2 == 0 ? "dgx-h100" : "a100-40gb"; }

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

}  // namespace

int RunDemo(const FlagValues& flags) {
  auto registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<sim::ApiServer> api_server;
  std::unique_ptr<k8s::KubeRequestMetrics> kube_metrics;
  std::unique_ptr<k8s::RestClient> client;
  std::unique_ptr<ClusterWatch> watch;
  std::unique_ptr<exporter::MetricsServer> metrics_server;
  std::vector<std::unique_ptr<NodeDriver>> drivers;
  std::string scratch;  // the demo's temporary directory, removed at the end
  int nodes = 2;
  (void)absl::SimpleAtoi(flags.Get("demo-nodes"), &nodes);

  std::vector<Step> startup = {
      {"start the embedded API server",
       [&]() -> absl::Status {
         sim::ApiServerOptions options;
         std::string host;
         RETURN_IF_ERROR(
             exporter::SplitHostPort(flags.Get("api-server-address"), &host, &options.port));
         options.address = host;
         api_server = std::make_unique<sim::ApiServer>(options);
         return api_server->Start();
       }},
      {"connect to it",
       [&]() -> absl::Status {
         k8s::RestConfig config;
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
         char tmpl[] = "/tmp/dralens-demo-XXXXXX";
         if (mkdtemp(tmpl) == nullptr) {
           return absl::InternalError("create the demo's temporary directory under /tmp");
         }
         scratch = tmpl;
         for (int i = 0; i < nodes; ++i) {
           NodeDriverOptions options;
           options.node_name = DemoNodeName(i);
           options.driver_name = flags.Get("driver-name");
           options.registry_dir = NodeDir(flags, "kubelet-registry-dir", scratch,
                                          "plugins_registry", options.node_name);
           options.plugins_dir =
               NodeDir(flags, "kubelet-plugins-dir", scratch, "plugins", options.node_name);
           options.cdi_root = NodeDir(flags, "cdi-root", scratch, "cdi", options.node_name);
           options.device_source.kind = "simulated";
           options.device_source.simulated_profile = DemoProfile(i);
           const std::string node = options.node_name;
           absl::StatusOr<std::unique_ptr<NodeDriver>> driver =
               NodeDriver::Start(std::move(options), *client, common::RealClock());
           RETURN_IF_ERROR_CTX(driver.status(), absl::StrCat("start node ", node));
           absl::StatusOr<sim::RegisteredPlugin> registered =
               sim::RegisterPlugin((*driver)->registration_socket_path());
           RETURN_IF_ERROR_CTX(registered.status(), absl::StrCat("register node ", node));
           DLOG(kInfo, "demo", "kubelet stand-in registered the plugin",
                {{"node", node}, {"service", registered->service_version}});
           drivers.push_back(*std::move(driver));
         }
         return absl::OkStatus();
       }},
      {"start the cluster role",
       [&]() -> absl::Status {
         watch = std::make_unique<ClusterWatch>(*client, kube_metrics.get());
         watch->Start();
         metrics_server =
             std::make_unique<exporter::MetricsServer>(registry, [&]() -> absl::Status {
               for (const auto& driver : drivers) {
                 RETURN_IF_ERROR(driver->Ready());
               }
               return watch->Ready();
             });
         return metrics_server->Start(flags.Get("metrics-address"));
       }},
      {"print where to look",
       [&]() -> absl::Status {
         std::printf(
             "\ndralens demo is running.\n\n"
             "  API server:  %s\n"
             "    kubectl --server %s get nodes,resourceslices,resourceclaims,deviceclasses -A\n"
             "  metrics:     http://127.0.0.1:%d/metrics   (readiness: /readyz)\n",
             api_server->url().c_str(), api_server->url().c_str(), metrics_server->port());
         for (size_t i = 0; i < drivers.size(); ++i) {
           std::printf("  node %-11s %zu devices, kubelet plugin at %s\n", DemoNodeName(i).c_str(),
                       drivers[i]->device_count(), drivers[i]->dra_socket_path().c_str());
         }
         std::printf("\nPress Ctrl-C to stop.\n\n");
         std::fflush(stdout);
         return absl::OkStatus();
       }},
      {"wait for shutdown",
       [&]() -> absl::Status {
         DLOG(kInfo, "demo", "stopping",
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
      {"stop the simulated nodes",
       [&] {
         for (auto& driver : drivers) {
           driver->Stop();
         }
         drivers.clear();
         if (!scratch.empty()) {
           std::error_code ec;
           std::filesystem::remove_all(scratch, ec);
         }
         return absl::OkStatus();
       }},
      {"stop the cluster role",
       [&] {
         if (watch) {
           watch->Stop();
         }
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
    DLOG(kError, "demo", "exiting", {{"error", s.message()}});
    return 1;
  }
  return 0;
}

}  // namespace dralens::app
