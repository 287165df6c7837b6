// The telemetry one process of a role owns: its metrics registry (with dralens_build_info), the
// exemplar store its histograms write trace ids into, and its tracing pipeline.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "exporter/http/metrics_server.h"
#include "prometheus/registry.h"
#include "src/app/flags.h"
#include "src/telemetry/exemplar.h"
#include "src/telemetry/tracing/span_data.h"
#include "src/telemetry/tracing/tracer.h"
#include "src/telemetry/tracing/tracer_provider.h"
#include "src/telemetry/tracing_metrics.h"

namespace dralens::app {

struct ProcessTelemetry {
  std::shared_ptr<prometheus::Registry> registry;
  std::unique_ptr<telemetry::ExemplarStore> exemplars;
  // A no-op pipeline until StartTracing() replaces it.
  std::unique_ptr<telemetry::TracerProvider> tracing;
  // dralens_otlp_*: hand it to the metrics server (MetricsServer::AddCollectable).
  std::unique_ptr<telemetry::TracingStatsCollectable> tracing_metrics;

  telemetry::Tracer& tracer() { return tracing->tracer(); }
  // Exports what is queued, waiting at most `grace`. Call once, at the end.
  void Shutdown(absl::Duration grace = absl::Seconds(5));
};

// `role` is the build-info label: "node", "cluster" or "demo".
ProcessTelemetry NewProcessTelemetry(absl::string_view role);

// Builds the tracing pipeline from the OTEL_* environment: service.name defaults to
// `service_name`; `resource` attributes are added unless the environment sets them. Bad
// OTEL_* values are an error naming the variable. Logs whether tracing is on and where to.
// A non-empty `otlp_endpoint` (the demo's --otlp-endpoint) stands for OTEL_EXPORTER_OTLP_ENDPOINT
// and hides OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, so the flag wins over both variables.
absl::Status StartTracing(ProcessTelemetry& telemetry, absl::string_view service_name,
                          const telemetry::Attributes& resource = {},
                          const std::string& otlp_endpoint = "");

// TLS and bearer-token settings of the metrics endpoint from --metrics-tls-cert-file,
// --metrics-tls-key-file and --metrics-bearer-token-file.
exporter::MetricsServerSecurity MetricsSecurity(const FlagValues& flags);

}  // namespace dralens::app
