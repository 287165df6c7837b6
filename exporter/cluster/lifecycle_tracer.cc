#include "exporter/cluster/lifecycle_tracer.h"

#include "src/telemetry/tracing/trace_context.h"

namespace dralens::exporter::cluster {

telemetry::SpanPtr LifecycleTracer::Begin(const std::string& ns, const std::string& name,
                                          const std::string& uid, const std::string& device_class,
                                          absl::Time created) const {
  telemetry::StartSpanOptions options;
  options.trace_id = telemetry::TraceIdFromClaimUid(uid);
  options.start_time = created;
  telemetry::SpanPtr span = tracer_.StartSpan("ResourceClaim", options);
  span->SetAttribute("k8s.namespace.name", ns);
  span->SetAttribute("k8s.resourceclaim.name", name);
  span->SetAttribute("k8s.resourceclaim.uid", uid);
  span->SetAttribute("dra.device_class", device_class);
  return span;
}

void LifecycleTracer::OnTransition(telemetry::Span& span, Transition to) {
  span.AddEvent(ToString(to));
}

void LifecycleTracer::OnPending(telemetry::Span& span, PendingReason reason) {
  span.AddEvent("pending", {{"reason", std::string(ToString(reason))}});
}

void LifecycleTracer::End(telemetry::Span& span, double gpu_seconds, double cost) {
  if (gpu_seconds > 0) {
    span.SetAttribute("dralens.claim.gpu_hours", gpu_seconds / 3600);
    span.SetAttribute("dralens.claim.cost", cost);
  }
  span.End();
}

}  // namespace dralens::exporter::cluster
