#include "driver/prepare/prepare_telemetry.h"

#include <utility>

#include "src/telemetry/catalog.h"
#include "src/telemetry/tracing/trace_context.h"

namespace dralens::driver::prepare {
namespace {

constexpr Operation kOperations[] = {Operation::kPrepare, Operation::kUnprepare};
constexpr Phase kPhases[] = {Phase::kFetchClaim, Phase::kCheckpoint, Phase::kMig, Phase::kSharing,
                             Phase::kCdi};

int IndexOf(Operation op) { return op == Operation::kPrepare ? 0 : 1; }

}  // namespace

absl::string_view ToString(Phase phase) {
  switch (phase) {
    case Phase::kFetchClaim:
      return "fetch_claim";
    case Phase::kCheckpoint:
      return "checkpoint";
    case Phase::kMig:
      return "mig";
    case Phase::kSharing:
      return "sharing";
    case Phase::kCdi:
      return "cdi";
  }
  return "cdi";
}

PrepareMetrics PrepareMetrics::Create(prometheus::Registry& registry,
                                      telemetry::ExemplarStore& exemplars) {
  PrepareMetrics m{
      .claims_total = telemetry::BuildCounter(registry, "dralens_node_claims_total"),
      .claim_duration = telemetry::BuildHistogram(registry, "dralens_node_claim_duration_seconds"),
      .phase_duration = telemetry::BuildHistogram(registry, "dralens_node_phase_duration_seconds"),
      .in_flight = telemetry::BuildGauge(registry, "dralens_node_in_flight")};
  for (Operation op : kOperations) {
    const std::string operation(ToString(op));
    for (FailureReason reason : kAllFailureReasons) {
      m.claims[IndexOf(op)][static_cast<int>(reason)] =
          &m.claims_total.Add({{"operation", operation},
                               {"result", reason == FailureReason::kNone ? "ok" : "error"},
                               {"reason", std::string(ToString(reason))}});
    }
    for (bool ok : {true, false}) {
      m.durations[IndexOf(op)][ok ? 0 : 1].emplace(telemetry::ExemplarHistogram::Add(
          exemplars, m.claim_duration, {{"operation", operation}, {"result", ok ? "ok" : "error"}},
          telemetry::DurationBuckets()));
    }
    m.in_flight_now[IndexOf(op)] = &m.in_flight.Add({{"operation", operation}});
  }
  for (Phase p : kPhases) {
    m.phases[static_cast<int>(p)] =
        &m.phase_duration.Add({{"phase", std::string(ToString(p))}}, telemetry::DurationBuckets());
  }
  return m;
}

void PrepareMetrics::RecordClaim(Operation operation, FailureReason reason, absl::Duration duration,
                                 absl::string_view trace_id) {
  claims[IndexOf(operation)][static_cast<int>(reason)]->Increment();
  durations[IndexOf(operation)][reason == FailureReason::kNone ? 0 : 1]->Observe(
      absl::ToDoubleSeconds(duration), trace_id);
}

ClaimTelemetry::ClaimTelemetry(PrepareMetrics& metrics, telemetry::Tracer& tracer,
                               common::Clock& clock, DecisionLog& log, Operation operation,
                               const ClaimRef& ref, absl::string_view pool,
                               const telemetry::SpanContext& call)
    : metrics_(metrics),
      log_(log),
      clock_(clock),
      ref_(ref),
      operation_(operation),
      start_(clock.Now()) {
  telemetry::StartSpanOptions options;
  options.trace_id = telemetry::TraceIdFromClaimUid(ref.uid);
  options.start_time = start_;
  if (call.IsValid()) {
    // The kubelet call lives in its own trace; the link leads from the claim to the call that
    // carried it (and the call span's "claim" events lead back).
    options.links.push_back(telemetry::SpanLink{.context = call, .attributes = {}});
  }
  span_ = tracer.StartSpan(operation == Operation::kPrepare ? "PrepareClaim" : "UnprepareClaim",
                           options);
  span_->SetAttribute("k8s.namespace.name", ref.namespace_name);
  span_->SetAttribute("k8s.resourceclaim.name", ref.name);
  span_->SetAttribute("k8s.resourceclaim.uid", ref.uid);
  span_->SetAttribute("dra.pool", std::string(pool));
  span_->SetAttribute("k8s.node.name", std::string(pool));
  metrics_.in_flight_now[IndexOf(operation_)]->Increment();
}

ClaimTelemetry::~ClaimTelemetry() {
  if (!finished_) {
    Finish(absl::InternalError("claim handling ended without an outcome"));
  }
}

void ClaimTelemetry::SetAttribute(absl::string_view key, telemetry::AttributeValue value) {
  span_->SetAttribute(key, std::move(value));
}

void ClaimTelemetry::AddEvent(absl::string_view name) { span_->AddEvent(name); }

void ClaimTelemetry::Finish(const absl::Status& status) {
  if (finished_) {
    return;
  }
  finished_ = true;
  const FailureReason reason = ReasonOf(status);
  if (status.ok()) {
    span_->SetStatus(telemetry::StatusCode::kOk);
  } else {
    span_->SetAttribute("error.type", std::string(ToString(reason)));
    span_->SetStatus(telemetry::StatusCode::kError, status.message());
  }
  const absl::Duration took = clock_.Now() - start_;
  const telemetry::SpanContext context = span_->context();
  const std::string trace_id = context.IsValid() ? context.trace_id.ToHex() : "";
  metrics_.in_flight_now[IndexOf(operation_)]->Decrement();
  metrics_.RecordClaim(operation_, reason, took, trace_id);
  log_.Add(
      {.time = start_,
       .operation = operation_,
       .namespace_name = ref_.namespace_name,
       .name = ref_.name,
       .uid = ref_.uid,
       .reason = reason,
       .error = std::string(status.message()),
       .duration = took,
       // The lifecycle trace id is known even when this span was not sampled.
       .trace_id = trace_id.empty() ? telemetry::TraceIdFromClaimUid(ref_.uid).ToHex() : trace_id});
  span_->End();
}

ClaimTelemetry::PhaseScope::PhaseScope(ClaimTelemetry& claim, Phase phase)
    : claim_(claim),
      phase_(phase),
      start_(claim.clock_.Now()),
      span_(claim.span_->StartChild(ToString(phase))) {}

ClaimTelemetry::PhaseScope::~PhaseScope() {
  claim_.metrics_.phases[static_cast<int>(phase_)]->Observe(
      absl::ToDoubleSeconds(claim_.clock_.Now() - start_));
  span_->End();
}

void ClaimTelemetry::PhaseScope::Fail(const absl::Status& status) {
  span_->SetStatus(telemetry::StatusCode::kError, status.message());
}

}  // namespace dralens::driver::prepare
