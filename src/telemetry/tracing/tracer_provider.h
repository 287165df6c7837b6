// TracerProvider: owns one tracing pipeline (exporter -> batch processor -> tracer) built from
// a TracingConfig, or a no-op tracer when tracing is off. The composition root creates one per
// process and shuts it down last.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "src/common/clock.h"
#include "src/telemetry/tracing/batch_span_processor.h"
#include "src/telemetry/tracing/sampler.h"
#include "src/telemetry/tracing/span_exporter.h"
#include "src/telemetry/tracing/span_processor.h"
#include "src/telemetry/tracing/trace_context.h"
#include "src/telemetry/tracing/tracer.h"
#include "src/telemetry/tracing/tracing_config.h"
#include "src/telemetry/tracing/tracing_stats.h"

namespace dralens::telemetry {

// Thread-safe. Every span must end before the provider is destroyed.
class TracerProvider {
 public:
  // The OTLP/HTTP JSON pipeline `config` describes, or a no-op one when !config.enabled.
  // `version` is the dralens version, sent as the instrumentation scope version. Fails only on
  // an endpoint the exporter cannot use. `clock` timestamps spans and must outlive the provider.
  static absl::StatusOr<std::unique_ptr<TracerProvider>> Create(
      const TracingConfig& config, absl::string_view version,
      common::Clock& clock = common::RealClock());

  // A pipeline around any exporter (tests: InMemorySpanExporter). A null `ids` means random.
  static std::unique_ptr<TracerProvider> CreateWithExporter(SpanExporterPtr exporter,
                                                            const SamplerConfig& sampler,
                                                            const BatchSpanProcessorOptions& batch,
                                                            common::Clock& clock,
                                                            IdGeneratorPtr ids = nullptr);

  // Tracing off: a NoopTracer; flush and shutdown succeed at once.
  static std::unique_ptr<TracerProvider> CreateNoop();

  ~TracerProvider();

  Tracer& tracer() { return *tracer_; }
  // Counters for the metrics registry.
  const TracingStats& stats() const { return *stats_; }
  bool enabled() const { return processor_ != nullptr; }

  // See SpanProcessor; deadlines are in real time.
  bool ForceFlush(absl::Time deadline);
  bool Shutdown(absl::Time deadline);

 private:
  TracerProvider() = default;

  // Declared first so it is destroyed last: the processor and exporter count into it.
  std::unique_ptr<TracingStats> stats_ = std::make_unique<TracingStats>();
  SpanProcessorPtr processor_;
  TracerPtr tracer_;
};

}  // namespace dralens::telemetry
