// BatchSpanProcessor: queues ended spans and exports them in batches from one background
// thread, so Span::End() never waits on the network.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/telemetry/tracing/span_exporter.h"
#include "src/telemetry/tracing/span_processor.h"
#include "src/telemetry/tracing/tracing_stats.h"

namespace dralens::telemetry {

// Defaults are the OTEL_BSP_* defaults.
struct BatchSpanProcessorOptions {
  // Spans held at most; more are dropped and counted.
  size_t max_queue_size = 2048;
  // Longest a span waits before its batch is exported.
  absl::Duration schedule_delay = absl::Milliseconds(5000);
  // Spans per export call; a full batch is exported without waiting for the delay.
  size_t max_export_batch_size = 512;
  // Time given to one export call, retries included.
  absl::Duration export_timeout = absl::Milliseconds(30000);
};

// OnEnd() takes a mutex for a queue push and never waits for the exporter: a full queue drops
// the span (stats.spans_dropped_queue_full). Flush and shutdown deadlines are in real time
// (absl::Now()). Thread-safe.
class BatchSpanProcessor : public SpanProcessor {
 public:
  // Starts the export thread. `stats` must outlive the processor. Options must hold positive
  // sizes and durations with max_export_batch_size <= max_queue_size (TracingConfigFromEnv
  // checks this); out-of-range values are clamped.
  BatchSpanProcessor(SpanExporterPtr exporter, const BatchSpanProcessorOptions& options,
                     TracingStats& stats);
  // Shuts down with a deadline of one export timeout if Shutdown() was not called.
  ~BatchSpanProcessor() override;

  // SpanProcessor
  void OnEnd(SpanData&& span) noexcept override;
  bool ForceFlush(absl::Time deadline) noexcept override;
  bool Shutdown(absl::Time deadline) noexcept override;

 private:
  void Run();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SpanExporterPtr exporter_;
  const BatchSpanProcessorOptions options_;
  TracingStats& stats_;

  absl::Mutex mu_;
  std::deque<SpanData> queue_ ABSL_GUARDED_BY(mu_);
  // Running totals: spans queued, taken by the export thread, and done with (exported,
  // failed or dropped). Flushes wait on these rather than on the queue being empty.
  uint64_t accepted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t taken_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t finished_ ABSL_GUARDED_BY(mu_) = 0;
  // Export without waiting for the schedule delay until taken_ reaches this.
  uint64_t flush_target_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_thread_ ABSL_GUARDED_BY(mu_) = false;

  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
  bool shutdown_result_ ABSL_GUARDED_BY(shutdown_mu_) = false;

  std::thread thread_;
};

}  // namespace dralens::telemetry
