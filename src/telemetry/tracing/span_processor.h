// SpanProcessor: receives every ended, sampled span.
#pragma once

#include <memory>

#include "absl/time/time.h"
#include "src/telemetry/tracing/span_data.h"

namespace dralens::telemetry {

class SpanProcessor {
 public:
  virtual ~SpanProcessor() = default;
  // Called from Span::End() on the caller's thread, so it must be cheap and never wait on
  // I/O. Thread-safe.
  virtual void OnEnd(SpanData&& span) noexcept = 0;
  // Exports every span ended before the call. Returns false if `deadline` passed first.
  virtual bool ForceFlush(absl::Time deadline) noexcept = 0;
  // Exports what is queued, then stops; later spans are dropped. Returns false if `deadline`
  // passed first (what was still queued is dropped and counted). Idempotent.
  virtual bool Shutdown(absl::Time deadline) noexcept = 0;
};
using SpanProcessorPtr = std::unique_ptr<SpanProcessor>;

}  // namespace dralens::telemetry
