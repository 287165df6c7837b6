// Building the Kubernetes client from flags, shared by the roles.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "src/app/flags.h"
#include "src/k8s/request_metrics.h"
#include "src/k8s/rest_client.h"

namespace dralens::app {

// --kubeconfig when set, otherwise the in-cluster service account. Errors say which was tried.
absl::StatusOr<k8s::RestConfig> LoadRestConfig(const FlagValues& flags);

absl::StatusOr<std::unique_ptr<k8s::RestClient>> BuildKubeClient(
    const k8s::RestConfig& config, const k8s::KubeRequestMetrics* metrics);

// The API server's minor version (from /version), which decides the slice layout of shared
// counters; 34 when it cannot be read (logged).
int ServerMinorVersion(k8s::RestClient& client);

}  // namespace dralens::app
