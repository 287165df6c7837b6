// Tracing configuration from the standard OTEL_* environment variables (observability.md §7.6).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "src/telemetry/tracing/batch_span_processor.h"
#include "src/telemetry/tracing/sampler.h"
#include "src/telemetry/tracing/span_data.h"

namespace dralens::telemetry {

// Returns the variable's value or nullptr, like std::getenv.
using GetEnvFunction = std::function<const char*(const char*)>;

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct TracingConfig {
  // False when OTEL_SDK_DISABLED=true or neither endpoint variable is set; spans are then
  // no-ops and nothing is exported.
  bool enabled = false;
  // Why tracing is off, for the startup log line.
  std::string disabled_reason;

  // The full traces URL: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as is, or
  // OTEL_EXPORTER_OTLP_ENDPOINT with "/v1/traces" appended.
  std::string traces_url;
  // OTEL_EXPORTER_OTLP_HEADERS, then OTEL_EXPORTER_OTLP_TRACES_HEADERS overriding by name.
  HeaderList headers;
  // OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT, milliseconds.
  absl::Duration export_timeout = absl::Seconds(10);
  // OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION=gzip.
  bool gzip = false;
  // OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE, _CLIENT_CERTIFICATE, _CLIENT_KEY: PEM files for
  // https endpoints, checked to be readable. The client pair comes both or neither.
  std::string ca_file;
  std::string client_cert_file;
  std::string client_key_file;
  // service.name first (OTEL_SERVICE_NAME, else OTEL_RESOURCE_ATTRIBUTES' service.name, else
  // the default), then the other OTEL_RESOURCE_ATTRIBUTES in their order.
  Attributes resource_attributes;
  // OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG.
  SamplerConfig sampler;
  // OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
  // OTEL_BSP_EXPORT_TIMEOUT.
  BatchSpanProcessorOptions batch;
  // OTEL_PROPAGATORS, default {"tracecontext", "baggage"}. dralens reads and writes
  // `traceparent` only when "tracecontext" is listed; "baggage" is accepted and carries
  // nothing (dralens has no baggage to propagate).
  std::vector<std::string> propagators = {"tracecontext", "baggage"};
};

// Reads every variable through `getenv`. Bad input is an error naming the variable and what
// it allows; nothing falls back silently. With OTEL_SDK_DISABLED=true the other variables are
// not read. `default_service_name` is used when neither OTEL_SERVICE_NAME nor a service.name
// resource attribute is set.
absl::StatusOr<TracingConfig> TracingConfigFromEnv(const GetEnvFunction& getenv,
                                                   absl::string_view default_service_name);

// Decodes %XX escapes (either hex case). A '%' not followed by two hex digits is an error.
absl::StatusOr<std::string> PercentDecode(absl::string_view text);

// Parses `k=v,k2=v2` as OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES use it (the
// W3C Baggage list syntax without properties): entries split on ',', key and value on the
// first '=', both trimmed of spaces and tabs, then percent-decoded. Empty entries are skipped;
// an entry without '=' or with an empty key is an error. `variable` names the source in errors.
absl::StatusOr<HeaderList> ParseKeyValueList(absl::string_view text, absl::string_view variable);

}  // namespace dralens::telemetry
