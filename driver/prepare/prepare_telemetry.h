// Metrics and spans of one claim operation (prepare or unprepare).
//
//   dralens_node_claims_total{operation,result,reason}      one per claim
//   dralens_node_claim_duration_seconds{operation,result}   per claim, trace_id exemplars
//   dralens_node_phase_duration_seconds{phase}              fetch_claim, checkpoint, mig,
//                                                           sharing, cdi
//   dralens_node_in_flight{operation}
//
// Spans: one root span per claim whose trace id is TraceIdFromClaimUid(uid), so the node's spans
// join the claim's lifecycle trace that the cluster role writes, linked to the kubelet call span
// that carried the claim (that span is in the call's own trace); a child per phase. The claim
// span's trace id is the exemplar on the duration histogram, which is how a slow bucket leads to
// its claim. Claim state changes add their events through ClaimLedger.
#pragma once

#include <array>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "driver/prepare/claim_handler.h"
#include "driver/prepare/decision_log.h"
#include "driver/prepare/failure_reason.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/telemetry/exemplar.h"
#include "src/telemetry/tracing/tracer.h"

namespace dralens::driver::prepare {

enum class Phase { kFetchClaim, kCheckpoint, kMig, kSharing, kCdi };
inline constexpr int kPhaseCount = 5;
absl::string_view ToString(Phase phase);

inline constexpr int kOperationCount = 2;
inline constexpr int kFailureReasonCount =
    static_cast<int>(sizeof(kAllFailureReasons) / sizeof(kAllFailureReasons[0]));

// Every series of the families above, created at start (rates and alerts see zeros rather than
// nothing), so that recording an outcome looks nothing up.
struct PrepareMetrics {
  prometheus::Family<prometheus::Counter>& claims_total;
  prometheus::Family<prometheus::Histogram>& claim_duration;
  prometheus::Family<prometheus::Histogram>& phase_duration;
  prometheus::Family<prometheus::Gauge>& in_flight;
  // [operation][reason]
  std::array<std::array<prometheus::Counter*, kFailureReasonCount>, kOperationCount> claims{};
  // [operation][ok ? 0 : 1]
  std::array<std::array<std::optional<telemetry::ExemplarHistogram>, 2>, kOperationCount>
      durations{};
  std::array<prometheus::Histogram*, kPhaseCount> phases{};
  std::array<prometheus::Gauge*, kOperationCount> in_flight_now{};

  static PrepareMetrics Create(prometheus::Registry& registry, telemetry::ExemplarStore& exemplars);

  void RecordClaim(Operation operation, FailureReason reason, absl::Duration duration,
                   absl::string_view trace_id);
};

// One claim's telemetry: a root span in the claim's lifecycle trace, phase children, and the
// per-claim metrics and decision-log entry at Finish.
class ClaimTelemetry {
 public:
  // `call` is the kubelet call span that carried the claim (invalid when tracing is off): the
  // claim span links to it. References are not owned and must outlive this object.
  ClaimTelemetry(PrepareMetrics& metrics, telemetry::Tracer& tracer, common::Clock& clock,
                 DecisionLog& log, Operation operation, const ClaimRef& ref, absl::string_view pool,
                 const telemetry::SpanContext& call);
  ~ClaimTelemetry();  // Finish(Internal) if Finish was not called
  ClaimTelemetry(const ClaimTelemetry&) = delete;
  ClaimTelemetry& operator=(const ClaimTelemetry&) = delete;

  // Times one phase as a child span and a histogram observation, until the returned object
  // goes out of scope.
  class PhaseScope {
   public:
    PhaseScope(ClaimTelemetry& claim, Phase phase);
    ~PhaseScope();
    PhaseScope(const PhaseScope&) = delete;
    PhaseScope& operator=(const PhaseScope&) = delete;
    void Fail(const absl::Status& status);

   private:
    ClaimTelemetry& claim_;
    Phase phase_;
    absl::Time start_;
    telemetry::SpanPtr span_;
  };
  PhaseScope Time(Phase phase) { return PhaseScope(*this, phase); }

  void SetAttribute(absl::string_view key, telemetry::AttributeValue value);
  void AddEvent(absl::string_view name);
  // Records the outcome once; later calls do nothing.
  void Finish(const absl::Status& status);

  const ClaimRef& ref() const { return ref_; }
  // The claim span, for the ledger's state events.
  telemetry::Span& span() { return *span_; }
  telemetry::SpanContext context() const { return span_->context(); }

 private:
  PrepareMetrics& metrics_;
  DecisionLog& log_;
  common::Clock& clock_;
  ClaimRef ref_;
  Operation operation_;
  absl::Time start_;
  telemetry::SpanPtr span_;
  bool finished_ = false;
};

}  // namespace dralens::driver::prepare
