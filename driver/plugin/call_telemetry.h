// What the kubelet-facing services record per call. Proto-free, so the composition root can
// build it without gRPC headers.
#pragma once

#include <array>
#include <cstddef>

#include "absl/strings/string_view.h"
#include "driver/prepare/decision_log.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "src/telemetry/tracing/tracer.h"

namespace dralens::driver::plugin {

enum class KubeletApi { kV1, kV1beta1 };
// "v1" | "v1beta1".
absl::string_view ToString(KubeletApi api);

// dralens_node_requests_total{operation,api,result}: one per non-empty kubelet call; result ok
// when every claim succeeded.
// dralens_node_kubelet_calls{state}: calls waiting for a worker (queued) and being run
// (running).
struct KubeletCallMetrics {
  prometheus::Family<prometheus::Counter>& requests_total;
  prometheus::Family<prometheus::Gauge>& calls;
  // [operation][api][ok ? 0 : 1]
  std::array<std::array<std::array<prometheus::Counter*, 2>, 2>, 2> requests{};
  prometheus::Gauge* queued = nullptr;
  prometheus::Gauge* running = nullptr;

  static KubeletCallMetrics Create(prometheus::Registry& registry);
  void Record(prepare::Operation operation, KubeletApi api, bool all_ok);
  void SetCalls(size_t waiting, size_t in_progress);
};

// What the services record per kubelet call: the request counter and one server span
// (NodePrepareResources / NodeUnprepareResources) with an event per claim that names the
// claim's own trace; each claim span links back to it. Empty requests (liveness probes) are
// answered without either. Both must outlive the services.
struct CallTelemetry {
  KubeletCallMetrics& metrics;
  telemetry::Tracer& tracer;
};

}  // namespace dralens::driver::plugin
