#include "driver/plugin/call_telemetry.h"

#include <string>

#include "src/telemetry/catalog.h"

namespace dralens::driver::plugin {

absl::string_view ToString(KubeletApi api) { return api == KubeletApi::kV1 ? "v1" : "v1beta1"; }

KubeletCallMetrics KubeletCallMetrics::Create(prometheus::Registry& registry) {
  KubeletCallMetrics m{
      .requests_total = telemetry::BuildCounter(registry, "dralens_node_requests_total"),
      .calls = telemetry::BuildGauge(registry, "dralens_node_kubelet_calls")};
  m.queued = &m.calls.Add({{"state", "queued"}});
  m.running = &m.calls.Add({{"state", "running"}});
  for (prepare::Operation op : {prepare::Operation::kPrepare, prepare::Operation::kUnprepare}) {
    for (KubeletApi api : {KubeletApi::kV1, KubeletApi::kV1beta1}) {
      for (bool ok : {true, false}) {
        m.requests[static_cast<int>(op)][static_cast<int>(api)][ok ? 0 : 1] =
            &m.requests_total.Add({{"operation", std::string(prepare::ToString(op))},
                                   {"api", std::string(ToString(api))},
                                   {"result", ok ? "ok" : "error"}});
      }
    }
  }
  return m;
}

void KubeletCallMetrics::Record(prepare::Operation operation, KubeletApi api, bool all_ok) {
  requests[static_cast<int>(operation)][static_cast<int>(api)][all_ok ? 0 : 1]->Increment();
}

void KubeletCallMetrics::SetCalls(size_t waiting, size_t in_progress) {
  queued->Set(static_cast<double>(waiting));
  running->Set(static_cast<double>(in_progress));
}
}  // namespace dralens::driver::plugin
