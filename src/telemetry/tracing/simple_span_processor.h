// SimpleSpanProcessor: exports each span on the thread that ends it. For tests and debugging
// only: End() then waits on the exporter.
#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "src/telemetry/tracing/span_exporter.h"
#include "src/telemetry/tracing/span_processor.h"
#include "src/telemetry/tracing/tracing_stats.h"

namespace dralens::telemetry {

// Thread-safe; exports are serialized. `stats` must outlive the processor.
class SimpleSpanProcessor : public SpanProcessor {
 public:
  SimpleSpanProcessor(SpanExporterPtr exporter, TracingStats& stats,
                      absl::Duration export_timeout = absl::Seconds(30));

  // SpanProcessor
  void OnEnd(SpanData&& span) noexcept override;
  bool ForceFlush(absl::Time deadline) noexcept override;
  bool Shutdown(absl::Time deadline) noexcept override;

 private:
  const SpanExporterPtr exporter_;
  TracingStats& stats_;
  const absl::Duration export_timeout_;
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dralens::telemetry
