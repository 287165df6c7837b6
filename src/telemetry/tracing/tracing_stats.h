// Counters of the tracing pipeline, as plain atomics so the hot path pays one relaxed add and
// the metrics registry can read them without depending on this library's internals.
#pragma once

#include <atomic>
#include <cstdint>

namespace dralens::telemetry {

// Shared by a BatchSpanProcessor and its exporter; outlives both. All fields only grow.
struct TracingStats {
  // Spans the receiver accepted (a partial success counts the accepted part only).
  std::atomic<uint64_t> spans_exported{0};
  // Spans not queued because the queue was full.
  std::atomic<uint64_t> spans_dropped_queue_full{0};
  // Spans ended after shutdown began, or still queued when the shutdown deadline passed.
  std::atomic<uint64_t> spans_dropped_shutdown{0};
  // Spans in batches whose export failed for good (non-retryable status, retries exhausted).
  std::atomic<uint64_t> spans_dropped_export_failed{0};
  // Spans the receiver reported in `partialSuccess.rejectedSpans`.
  std::atomic<uint64_t> spans_rejected{0};

  // Export HTTP requests by outcome; each retry is one more request.
  std::atomic<uint64_t> requests_success{0};           // 2xx (partial success included)
  std::atomic<uint64_t> requests_retryable_status{0};  // 429, 502, 503, 504
  std::atomic<uint64_t> requests_failed_status{0};     // any other status: not retried
  std::atomic<uint64_t> requests_connection_error{0};  // no response: refused, reset, TLS, ...
  std::atomic<uint64_t> requests_timeout{0};           // no response within the time left
};

}  // namespace dralens::telemetry
