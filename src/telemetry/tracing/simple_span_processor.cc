#include "src/telemetry/tracing/simple_span_processor.h"

#include <algorithm>
#include <utility>

namespace dralens::telemetry {

SimpleSpanProcessor::SimpleSpanProcessor(SpanExporterPtr exporter, TracingStats& stats,
                                         absl::Duration export_timeout)
    : exporter_(std::move(exporter)), stats_(stats), export_timeout_(export_timeout) {}

void SimpleSpanProcessor::OnEnd(SpanData&& span) noexcept {
  absl::MutexLock lock(&mu_);
  if (shut_down_) {
    stats_.spans_dropped_shutdown.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const ExportResult result = exporter_->Export(absl::MakeConstSpan(&span, 1), export_timeout_);
  if (result.success) {
    const uint64_t rejected = std::min<uint64_t>(result.rejected_spans, 1);
    stats_.spans_exported.fetch_add(1 - rejected, std::memory_order_relaxed);
    stats_.spans_rejected.fetch_add(rejected, std::memory_order_relaxed);
  } else {
    stats_.spans_dropped_export_failed.fetch_add(1, std::memory_order_relaxed);
  }
}

bool SimpleSpanProcessor::ForceFlush(absl::Time) noexcept { return true; }

bool SimpleSpanProcessor::Shutdown(absl::Time) noexcept {
  absl::MutexLock lock(&mu_);
  if (!shut_down_) {
    shut_down_ = true;
    exporter_->Shutdown();
  }
  return true;
}

}  // namespace dralens::telemetry
