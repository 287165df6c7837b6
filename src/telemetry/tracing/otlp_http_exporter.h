// OtlpHttpExporter: POSTs spans as OTLP/HTTP JSON to a collector, retrying only what OTLP
// calls retryable (429, 502, 503, 504 and connection failures).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/common/clock.h"
#include "src/telemetry/tracing/otlp_json.h"
#include "src/telemetry/tracing/span_exporter.h"
#include "src/telemetry/tracing/tracing_stats.h"

namespace httplib {
class ClientImpl;
}

namespace dralens::telemetry {

// An http:// or https:// URL split for httplib.
struct HttpUrl {
  std::string scheme;  // "http" or "https", lowercase
  std::string host;    // without IPv6 brackets
  int port = 0;        // 80 or 443 when the URL names none
  std::string path;    // "/" when the URL has none; keeps the query
};

// Accepts `http[s]://host[:port][/path][?query]`; host may be an IPv6 literal in brackets.
// User info and fragments are rejected.
absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url);

struct OtlpHttpExporterOptions {
  // The full traces URL, e.g. "http://collector:4318/v1/traces".
  std::string url = "http://localhost:4318/v1/traces";
  // Extra request headers (OTEL_EXPORTER_OTLP_HEADERS). Content-Type, Content-Encoding,
  // Content-Length and Host are the exporter's own and are not overridden.
  std::vector<std::pair<std::string, std::string>> headers{};
  // The most one Export() call takes, retries included (OTEL_EXPORTER_OTLP_TIMEOUT); the
  // caller's timeout shortens it further.
  absl::Duration timeout = absl::Seconds(10);
  bool gzip = false;
  // https only: PEM file of the CA that signs the collector's certificate (else the system
  // trust store), and an optional client certificate and key for mutual TLS.
  std::string ca_file{};
  std::string client_cert_file{};
  std::string client_key_file{};
  Resource resource{};
  InstrumentationScope scope{};
  // Retry waits without Retry-After: uniform in [b/2, b], with b doubling from
  // `initial_backoff` up to `max_backoff`.
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(5);
};

// One Export() at a time (calls are serialized; the batch processor makes one anyway) over a
// kept-alive connection. Every request is counted in TracingStats by outcome. Retries stop at
// the export deadline: a Retry-After that would pass it ends the export at once. Waits use
// `clock`, in slices, so Shutdown() cuts them short; Shutdown() also aborts a request in flight.
class OtlpHttpExporter : public SpanExporter {
 public:
  // Fails on a malformed URL, https without TLS support in httplib, or an unreadable client
  // certificate or key. `stats` and `clock` must outlive the exporter.
  static absl::StatusOr<std::unique_ptr<OtlpHttpExporter>> Create(
      OtlpHttpExporterOptions options, TracingStats& stats,
      common::Clock& clock = common::RealClock());
  ~OtlpHttpExporter() override;

  // SpanExporter
  ExportResult Export(absl::Span<const SpanData> spans, absl::Duration timeout) noexcept override;
  void Shutdown() noexcept override;

 private:
  OtlpHttpExporter(OtlpHttpExporterOptions options, HttpUrl url,
                   std::unique_ptr<httplib::ClientImpl> client, TracingStats& stats,
                   common::Clock& clock);

  ExportResult ExportBody(const std::string& body, bool gzipped, size_t span_count,
                          absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(export_mu_);
  // Sleeps `d` on clock_ unless Shutdown() comes first; returns false if it did.
  bool WaitUnlessShutdown(absl::Duration d);

  const OtlpHttpExporterOptions options_;
  const HttpUrl url_;
  TracingStats& stats_;
  common::Clock& clock_;
  std::atomic<bool> shutdown_{false};

  absl::Mutex export_mu_;
  // Used under export_mu_, except for the thread-safe stop() in Shutdown().
  const std::unique_ptr<httplib::ClientImpl> client_;
  absl::BitGen bitgen_ ABSL_GUARDED_BY(export_mu_);
};

}  // namespace dralens::telemetry
