// `dralens explain [-n NAMESPACE] CLAIM`: lists claims, slices, classes, pods and nodes from the
// live API (the informers the cluster role uses), runs the cluster analyzer over them once, and
// prints the claim's explanation (exporter/cluster/explain.h). Installed as kubectl-dralens, it
// runs as `kubectl dralens explain ...`.
#include "exporter/cluster/explain.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/feed.h"
#include "exporter/cluster/gangs.h"
#include "exporter/cluster/pricing.h"
#include "prometheus/registry.h"
#include "src/app/cluster_role.h"
#include "src/app/cluster_watch.h"
#include "src/app/kube.h"
#include "src/app/roles.h"
#include "src/common/status.h"
#include "src/telemetry/tracing/tracer_impl.h"

namespace dralens::app {
namespace {

constexpr absl::Duration kSyncTimeout = absl::Seconds(60);

// --kubeconfig, else KUBECONFIG when it names a file, else ~/.kube/config when it exists, else
// in-cluster; --server overrides the server (and alone is enough, for an API server without
// authentication such as the demo's).
absl::StatusOr<k8s::RestConfig> ExplainConfig(const FlagValues& flags) {
  const std::string& server = flags.Get("server");
  std::string path = flags.Get("kubeconfig");
  std::error_code ec;
  if (flags.Source("kubeconfig") == "env" && !std::filesystem::exists(path, ec)) {
    path.clear();  // as kubectl does: a KUBECONFIG naming no file adds nothing
  }
  if (path.empty()) {
    const char* home = std::getenv("HOME");
    if (home != nullptr && std::filesystem::exists(std::string(home) + "/.kube/config", ec)) {
      path = std::string(home) + "/.kube/config";
    }
  }
  k8s::RestConfig config;
  if (!path.empty()) {
    ASSIGN_OR_RETURN(config, common::Annotate(k8s::LoadKubeconfig(path), "kubeconfig " + path));
  } else if (server.empty()) {
    ASSIGN_OR_RETURN(config,
                     common::Annotate(k8s::LoadInClusterConfig(),
                                      "no --kubeconfig, no ~/.kube/config and no --server given; "
                                      "in-cluster config"));
  }
  if (!server.empty()) {
    config.server = server;
  }
  return config;
}

absl::Status Explain(const FlagValues& flags, std::string* out) {
  const std::string& claim = flags.Get("claim");
  if (claim.empty()) {
    return absl::InvalidArgumentError("which claim? usage: dralens explain [-n NAMESPACE] CLAIM");
  }
  ASSIGN_OR_RETURN(k8s::RestConfig config, ExplainConfig(flags));
  std::string ns = flags.Get("namespace");
  if (ns.empty()) {
    ns = config.default_namespace.empty() ? "default" : config.default_namespace;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<k8s::RestClient> client, BuildKubeClient(config, nullptr));

  double default_price = 0;
  if (!absl::SimpleAtod(flags.Get("price-per-device-hour"), &default_price) || default_price < 0) {
    return absl::InvalidArgumentError("--price-per-device-hour: must be a number >= 0");
  }
  exporter::cluster::AnalyzerOptions options;
  ASSIGN_OR_RETURN(options.prices,
                   exporter::cluster::PriceTable::Load(flags.Get("price-file"), default_price));
  options.topology_sensitive_classes = ClassList(flags.Get("topology-sensitive-classes"));
  options.derive_after_sync = true;
  prometheus::Registry registry;
  telemetry::NoopTracer tracer;
  exporter::cluster::Analyzer analyzer(registry, tracer, std::move(options));
  std::unique_ptr<exporter::cluster::GangTracker> gangs;
  if (ServesWorkloads(*client)) {
    gangs = std::make_unique<exporter::cluster::GangTracker>(analyzer, registry);
  }
  ClusterWatch watch(
      *client, nullptr,
      [&analyzer, &gangs](const k8s::ResourceType& type) {
        if (type.plural == k8s::kWorkloads.plural && type.group == k8s::kWorkloads.group) {
          return gangs->WorkloadHandlers();
        }
        k8s::InformerHandlers h = exporter::cluster::HandlersFor(type, analyzer);
        if (gangs != nullptr && type.plural == k8s::kPods.plural) {
          h = ChainHandlers(std::move(h), gangs->PodHandlers());
        }
        return h;
      },
      gangs != nullptr);
  watch.Start();
  const absl::Time deadline = absl::Now() + kSyncTimeout;
  absl::Status ready = watch.Ready();
  while (!ready.ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    ready = watch.Ready();
  }
  if (!ready.ok()) {
    watch.Stop();
    return absl::DeadlineExceededError(absl::StrCat("could not read the cluster within ",
                                                    absl::FormatDuration(kSyncTimeout), ": ",
                                                    ready.message()));
  }
  analyzer.SetNodesSynced();
  analyzer.SetSynced();
  std::optional<exporter::cluster::ClaimExplanation> e = analyzer.Explain(ns, claim);
  watch.Stop();
  if (gangs != nullptr && e.has_value() && e->state == exporter::cluster::ClaimState::kPending) {
    gangs->Refresh();
    e->gang = gangs->GangOfClaim(ns, claim);
  }
  if (!e.has_value()) {
    return absl::NotFoundError(absl::StrCat("no ResourceClaim ", ns, "/", claim));
  }
  *out = flags.Get("output") == "json" ? exporter::cluster::ExplanationJson(*e).dump(2) + "\n"
                                       : exporter::cluster::ExplanationText(*e);
  return absl::OkStatus();
}

}  // namespace

int RunExplain(const FlagValues& flags) {
  std::string out;
  absl::Status s = Explain(flags, &out);
  if (!s.ok()) {
    std::fprintf(stderr, "dralens explain: %s\n", std::string(s.message()).c_str());
    return absl::IsInvalidArgument(s) ? 2 : 1;
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace dralens::app
