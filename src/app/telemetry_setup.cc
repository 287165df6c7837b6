#include "src/app/telemetry_setup.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/time/clock.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/telemetry/catalog.h"
#include "src/telemetry/tracing/tracing_config.h"

namespace dralens::app {

ProcessTelemetry NewProcessTelemetry(absl::string_view role) {
  ProcessTelemetry t;
  t.registry = std::make_shared<prometheus::Registry>();
  t.exemplars = std::make_unique<telemetry::ExemplarStore>();
  t.tracing = telemetry::TracerProvider::CreateNoop();
  t.tracing_metrics = std::make_unique<telemetry::TracingStatsCollectable>(t.tracing->stats());
  telemetry::BuildGauge(*t.registry, "dralens_build_info")
      .Add({{"version", DRALENS_VERSION}, {"role", std::string(role)}})
      .Set(1);
  return t;
}

void ProcessTelemetry::Shutdown(absl::Duration grace) {
  if (tracing != nullptr && tracing->enabled()) {
    if (!tracing->Shutdown(absl::Now() + grace)) {
      DLOG(kWarn, "tracing", "spans still queued at shutdown were dropped",
           {{"grace", absl::FormatDuration(grace)}});
    }
  }
}

absl::Status StartTracing(ProcessTelemetry& telemetry, absl::string_view service_name,
                          const telemetry::Attributes& resource, const std::string& otlp_endpoint) {
  absl::StatusOr<telemetry::TracingConfig> config = telemetry::TracingConfigFromEnv(
      [&otlp_endpoint](const char* name) -> const char* {
        if (!otlp_endpoint.empty()) {
          if (std::strcmp(name, "OTEL_EXPORTER_OTLP_ENDPOINT") == 0) {
            return otlp_endpoint.c_str();
          }
          if (std::strcmp(name, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == 0) {
            return nullptr;
          }
        }
        return std::getenv(name);
      },
      service_name);
  RETURN_IF_ERROR_CTX(config.status(), "tracing configuration");
  for (const telemetry::Attribute& extra : resource) {
    bool set = false;
    for (const telemetry::Attribute& a : config->resource_attributes) {
      set = set || a.key == extra.key;
    }
    if (!set) {
      config->resource_attributes.push_back(extra);
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<telemetry::TracerProvider> provider,
                   telemetry::TracerProvider::Create(*config, DRALENS_VERSION));
  if (config->enabled) {
    DLOG(kInfo, "tracing", "exporting spans", {{"endpoint", config->traces_url}});
  } else {
    DLOG(kInfo, "tracing", "tracing off", {{"reason", config->disabled_reason}});
  }
  // The collectable reads the stats of the pipeline it is given; swap both together.
  telemetry.tracing = std::move(provider);
  telemetry.tracing_metrics =
      std::make_unique<telemetry::TracingStatsCollectable>(telemetry.tracing->stats());
  return absl::OkStatus();
}

exporter::MetricsServerSecurity MetricsSecurity(const FlagValues& flags) {
  exporter::MetricsServerSecurity security;
  security.tls_cert_file = flags.Get("metrics-tls-cert-file");
  security.tls_key_file = flags.Get("metrics-tls-key-file");
  security.bearer_token_file = flags.Get("metrics-bearer-token-file");
  return security;
}

}  // namespace dralens::app
