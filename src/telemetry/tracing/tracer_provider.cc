#include "src/telemetry/tracing/tracer_provider.h"

#include <utility>

#include "src/common/log.h"
#include "src/telemetry/tracing/otlp_http_exporter.h"
#include "src/telemetry/tracing/tracer_impl.h"

namespace dralens::telemetry {

absl::StatusOr<std::unique_ptr<TracerProvider>> TracerProvider::Create(const TracingConfig& config,
                                                                       absl::string_view version,
                                                                       common::Clock& clock) {
  if (!config.enabled) {
    DLOG(kInfo, "tracing", "tracing off", {{"reason", config.disabled_reason}});
    return CreateNoop();
  }
  std::unique_ptr<TracerProvider> provider(new TracerProvider());
  OtlpHttpExporterOptions options;
  options.url = config.traces_url;
  options.headers = config.headers;
  options.timeout = config.export_timeout;
  options.gzip = config.gzip;
  options.ca_file = config.ca_file;
  options.client_cert_file = config.client_cert_file;
  options.client_key_file = config.client_key_file;
  options.resource.attributes = config.resource_attributes;
  options.scope.version = std::string(version);
  absl::StatusOr<std::unique_ptr<OtlpHttpExporter>> exporter =
      OtlpHttpExporter::Create(std::move(options), *provider->stats_, clock);
  if (!exporter.ok()) {
    return exporter.status();
  }
  SamplerPtr sampler = MakeSampler(config.sampler);
  DLOG(kInfo, "tracing", "exporting spans",
       {{"endpoint", config.traces_url}, {"sampler", sampler->Description()}});
  provider->processor_ =
      std::make_unique<BatchSpanProcessor>(*std::move(exporter), config.batch, *provider->stats_);
  provider->tracer_ =
      std::make_unique<TracerImpl>(*provider->processor_, std::move(sampler), clock);
  return provider;
}

std::unique_ptr<TracerProvider> TracerProvider::CreateWithExporter(
    SpanExporterPtr exporter, const SamplerConfig& sampler, const BatchSpanProcessorOptions& batch,
    common::Clock& clock, IdGeneratorPtr ids) {
  std::unique_ptr<TracerProvider> provider(new TracerProvider());
  provider->processor_ =
      std::make_unique<BatchSpanProcessor>(std::move(exporter), batch, *provider->stats_);
  provider->tracer_ = std::make_unique<TracerImpl>(*provider->processor_, MakeSampler(sampler),
                                                   clock, std::move(ids));
  return provider;
}

std::unique_ptr<TracerProvider> TracerProvider::CreateNoop() {
  std::unique_ptr<TracerProvider> provider(new TracerProvider());
  provider->tracer_ = std::make_unique<NoopTracer>();
  return provider;
}

TracerProvider::~TracerProvider() {
  // The tracer goes first; the processor's destructor flushes with its own deadline.
  tracer_.reset();
  processor_.reset();
}

bool TracerProvider::ForceFlush(absl::Time deadline) {
  return processor_ == nullptr || processor_->ForceFlush(deadline);
}

bool TracerProvider::Shutdown(absl::Time deadline) {
  return processor_ == nullptr || processor_->Shutdown(deadline);
}

}  // namespace dralens::telemetry
