// The lifecycle trace of a ResourceClaim: one span from the claim's creation to its deletion.
//
// The span's trace id derives from the claim's uid (TraceIdFromClaimUid), the same id the node
// role gives its prepare span of the claim, so a backend shows both in one trace. The span
// carries the claim's identity and class; an event per transition (created, allocated, reserved,
// in_use, released, deleted) and per pending reason the claim is given; and, when it ends, the
// GPU-hours and cost the claim held over its life. With tracing off the spans are no-ops.
//
// The analyzer decides when; this file decides what a claim's trace says.
#pragma once

#include <string>

#include "absl/time/time.h"
#include "exporter/cluster/findings.h"
#include "src/telemetry/tracing/tracer.h"

namespace dralens::exporter::cluster {

class LifecycleTracer {
 public:
  explicit LifecycleTracer(telemetry::Tracer& tracer) : tracer_(tracer) {}

  // Opens the span of a claim seen for the first time, starting at its creation.
  telemetry::SpanPtr Begin(const std::string& ns, const std::string& name, const std::string& uid,
                           const std::string& device_class, absl::Time created) const;
  static void OnTransition(telemetry::Span& span, Transition to);
  static void OnPending(telemetry::Span& span, PendingReason reason);
  // Closes the span of a deleted claim with what it held over its life (nothing is written
  // for a claim that never held a GPU).
  static void End(telemetry::Span& span, double gpu_seconds, double cost);
  // Closes the span of a claim still open when the analyzer goes (no deletion seen).
  static void Abandon(telemetry::Span& span) { span.End(); }

 private:
  telemetry::Tracer& tracer_;
};

}  // namespace dralens::exporter::cluster
