// KubeRequestMetrics: self-metrics of the Kubernetes client and informers.
//
//   dralens_kube_requests_total{verb,resource,code}      one per HTTP attempt; code is the HTTP
//                                                        status ("200", "409", ...) or "error"
//                                                        for transport failures
//   dralens_kube_watch_restarts_total{resource,reason}   reason: gone | dropped | error
//
// Built once per process by Create(); the client and informers take an optional pointer.
// Thread-safe (prometheus-cpp counters are atomic).
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/registry.h"

namespace dralens::k8s {

// Why a watch was restarted.
enum class WatchRestartReason {
  kGone,     // 410 Gone: the informer relisted
  kDropped,  // the stream ended (server timeout, connection closed); resumed
  kError,    // an error status, a transport failure or a malformed event
};
absl::string_view ToString(WatchRestartReason reason);

struct KubeRequestMetrics {
  prometheus::Family<prometheus::Counter>& requests_total;
  prometheus::Family<prometheus::Counter>& watch_restarts_total;

  static KubeRequestMetrics Create(prometheus::Registry& registry);

  // `verb`: get|list|watch|create|update|patch|delete|deletecollection. `http_code` <= 0 records
  // code="error".
  void RecordRequest(absl::string_view verb, absl::string_view resource, int http_code) const;
  void RecordWatchRestart(absl::string_view resource, WatchRestartReason reason) const;
  // Creates the resource's restart series at 0 for every reason, so that a rate() over them
  // says "no restarts" rather than "no data". Informers call it when they start.
  void InitWatchRestarts(absl::string_view resource) const;
};

}  // namespace dralens::k8s
