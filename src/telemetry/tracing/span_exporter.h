// SpanExporter: sends finished spans somewhere. Called by a span processor's thread.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "src/telemetry/tracing/span_data.h"

namespace dralens::telemetry {

struct ExportResult {
  // True when the receiver took the batch; `rejected_spans` of it may still have been refused.
  bool success = false;
  uint64_t rejected_spans = 0;
};

class SpanExporter {
 public:
  virtual ~SpanExporter() = default;
  // Exports one batch, retries included, returning within `timeout` (plus the time to notice
  // it passed). Thread-safe; calls may be serialized internally.
  virtual ExportResult Export(absl::Span<const SpanData> spans,
                              absl::Duration timeout) noexcept = 0;
  // Cuts short any export in progress (waits between retries, a request in flight) and makes
  // later exports fail at once. Idempotent; may be called from any thread.
  virtual void Shutdown() noexcept = 0;
};
using SpanExporterPtr = std::unique_ptr<SpanExporter>;

}  // namespace dralens::telemetry
