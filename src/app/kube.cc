#include "src/app/kube.h"

#include "src/common/status.h"

namespace dralens::app {

absl::StatusOr<k8s::RestConfig> LoadRestConfig(const FlagValues& flags) {
  const std::string& path = flags.Get("kubeconfig");
  if (!path.empty()) {
    return common::Annotate(k8s::LoadKubeconfig(path), "--kubeconfig");
  }
  return common::Annotate(k8s::LoadInClusterConfig(),
                          "no --kubeconfig (KUBECONFIG) given, in-cluster config");
}

absl::StatusOr<std::unique_ptr<k8s::RestClient>> BuildKubeClient(
    const k8s::RestConfig& config, const k8s::KubeRequestMetrics* metrics) {
  k8s::RestClientOptions options;
  options.metrics = metrics;
  return k8s::RestClient::FromConfig(config, options);
}

}  // namespace dralens::app
