// The two Tracer implementations: NoopTracer (tracing off) and TracerImpl (samples, records and
// hands ended spans to a SpanProcessor).
#pragma once

#include "src/common/clock.h"
#include "src/telemetry/tracing/sampler.h"
#include "src/telemetry/tracing/span_processor.h"
#include "src/telemetry/tracing/trace_context.h"
#include "src/telemetry/tracing/tracer.h"

namespace dralens::telemetry {

// The shared no-op span: no allocation, every method does nothing, context() is invalid and
// children are the no-op span again. Thread-safe.
SpanPtr NoopSpan() noexcept;

// Tracing off: every span is the no-op span.
class NoopTracer : public Tracer {
 public:
  // Tracer
  SpanPtr StartSpan(absl::string_view name, const StartSpanOptions& options = {}) noexcept override;
};

// Samples each new trace with `sampler`; sampled spans record attributes, events and status,
// timestamped by `clock`, and go to `processor` when they end. Unsampled spans are the no-op
// span, so a dropped trace costs one sampler call.
//
// Thread-safe. `processor` and `clock` must outlive the tracer and every span it started.
class TracerImpl : public Tracer {
 public:
  // A null `ids` means RandomIdGenerator.
  TracerImpl(SpanProcessor& processor, SamplerPtr sampler, common::Clock& clock,
             IdGeneratorPtr ids = nullptr);

  // Tracer
  SpanPtr StartSpan(absl::string_view name, const StartSpanOptions& options = {}) noexcept override;

 private:
  friend class RecordingSpan;

  SpanProcessor& processor_;
  SamplerPtr sampler_;
  common::Clock& clock_;
  IdGeneratorPtr ids_;
};

}  // namespace dralens::telemetry
