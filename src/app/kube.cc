#include "src/app/kube.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "src/common/log.h"
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

// The API server's minor version, which decides the slice layout of shared counters. When it
// cannot be read, 34: the combined layout, which a 1.35+ server rejects with a validation error
// the publisher reports, rather than a layout it silently misreads.
int ServerMinorVersion(k8s::RestClient& client) {
  absl::StatusOr<nlohmann::json> version = client.ServerVersion();
  int minor = 0;
  if (version.ok()) {
    std::string text = version->value("minor", "");
    while (!text.empty() && !absl::ascii_isdigit(text.back())) {
      text.pop_back();  // "35+" on some distributions
    }
    (void)absl::SimpleAtoi(text, &minor);
  }
  if (minor <= 0) {
    DLOG(kWarn, "node", "could not read the API server's version; assuming 1.34 slice layout",
         {{"error", version.ok() ? "no minor version" : version.status().message()}});
    return 34;
  }
  return minor;
}

}  // namespace dralens::app
