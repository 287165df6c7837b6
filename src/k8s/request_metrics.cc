#include "src/k8s/request_metrics.h"

#include "absl/strings/str_cat.h"
#include "src/telemetry/catalog.h"

namespace dralens::k8s {

absl::string_view ToString(WatchRestartReason reason) {
  switch (reason) {
    case WatchRestartReason::kGone:
      return "gone";
    case WatchRestartReason::kDropped:
      return "dropped";
    case WatchRestartReason::kError:
      return "error";
  }
  return "error";
}

KubeRequestMetrics KubeRequestMetrics::Create(prometheus::Registry& registry) {
  return KubeRequestMetrics{telemetry::BuildCounter(registry, "dralens_kube_requests_total"),
                            telemetry::BuildCounter(registry, "dralens_kube_watch_restarts_total")};
}

void KubeRequestMetrics::RecordRequest(absl::string_view verb, absl::string_view resource,
                                       int http_code) const {
  requests_total
      .Add({{"verb", std::string(verb)},
            {"resource", std::string(resource)},
            {"code", http_code > 0 ? absl::StrCat(http_code) : std::string("error")}})
      .Increment();
}

void KubeRequestMetrics::InitWatchRestarts(absl::string_view resource) const {
  for (WatchRestartReason reason :
       {WatchRestartReason::kGone, WatchRestartReason::kDropped, WatchRestartReason::kError}) {
    watch_restarts_total.Add(
        {{"resource", std::string(resource)}, {"reason", std::string(ToString(reason))}});
  }
}

void KubeRequestMetrics::RecordWatchRestart(absl::string_view resource,
                                            WatchRestartReason reason) const {
  watch_restarts_total
      .Add({{"resource", std::string(resource)}, {"reason", std::string(ToString(reason))}})
      .Increment();
}

}  // namespace dralens::k8s
