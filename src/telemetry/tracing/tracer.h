// Tracer and Span: the tracing facade the rest of dralens codes against.
//
//   SpanPtr claim = tracer.StartSpan("PrepareClaim",
//                                    {.kind = SpanKind::kInternal,
//                                     .trace_id = TraceIdFromClaimUid(uid)});
//   claim->SetAttribute("k8s.resourceclaim.uid", uid);
//   SpanPtr phase = claim->StartChild("checkpoint");
//   ...
//   phase->End();
//
// When tracing is off, or the sampler drops the trace, StartSpan returns a no-op span whose
// methods do nothing and whose children are no-op too: call sites never test whether tracing
// is on.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "src/telemetry/tracing/span_data.h"
#include "src/telemetry/tracing/trace_context.h"

namespace dralens::telemetry {

class Span;

// Destroys a span through Span::Destroy(), so the shared no-op span is never freed.
struct SpanDeleter {
  void operator()(Span* span) const noexcept;
};
using SpanPtr = std::unique_ptr<Span, SpanDeleter>;

struct StartSpanOptions {
  SpanKind kind = SpanKind::kInternal;
  // A valid parent (another span's context, or a parsed `traceparent`) makes this a child in
  // the parent's trace; `trace_id` is then ignored.
  std::optional<SpanContext> parent = std::nullopt;
  // For a root span: use this trace id (e.g. TraceIdFromClaimUid) instead of a random one.
  // Ignored when invalid.
  std::optional<TraceId> trace_id = std::nullopt;
  // Defaults to the tracer's clock.
  std::optional<absl::Time> start_time = std::nullopt;
  // Spans this one points at (e.g. the call that carried the work it does); links to invalid
  // contexts are dropped, and beyond kMaxSpanLinks counted as dropped.
  std::vector<SpanLink> links = {};
};

// One operation. A span belongs to one thread at a time: its methods are not synchronized.
// context() is immutable and may be read from anywhere. A span must not outlive its Tracer.
class Span {
 public:
  virtual ~Span() = default;

  // Replaces the value of an existing key. Beyond kMaxSpanAttributes keys, new keys are
  // dropped and counted.
  virtual void SetAttribute(absl::string_view key, AttributeValue value) noexcept = 0;
  // Timestamped from the tracer's clock.
  virtual void AddEvent(absl::string_view name, Attributes attributes = {}) noexcept = 0;
  // `message` is kept for kError only, as OTLP prescribes.
  virtual void SetStatus(StatusCode code, absl::string_view message = "") noexcept = 0;
  // Records the end time and hands the span to the processor. Idempotent; the destructor
  // ends a span that was not ended.
  virtual void End() noexcept = 0;
  // A child in this span's trace, or a no-op span if this one is a no-op.
  virtual SpanPtr StartChild(absl::string_view name,
                             SpanKind kind = SpanKind::kInternal) noexcept = 0;
  // Invalid for a no-op span.
  virtual SpanContext context() const noexcept = 0;
  // False for a no-op span.
  virtual bool IsRecording() const noexcept = 0;

 protected:
  friend struct SpanDeleter;
  // `delete this` for owned spans; nothing for the shared no-op span.
  virtual void Destroy() noexcept = 0;
};

inline void SpanDeleter::operator()(Span* span) const noexcept { span->Destroy(); }

// Starts spans. Implementations are thread-safe.
class Tracer {
 public:
  virtual ~Tracer() = default;
  virtual SpanPtr StartSpan(absl::string_view name,
                            const StartSpanOptions& options = {}) noexcept = 0;
};
using TracerPtr = std::unique_ptr<Tracer>;

}  // namespace dralens::telemetry
