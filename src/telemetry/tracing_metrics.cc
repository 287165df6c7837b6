#include "src/telemetry/tracing_metrics.h"

#include <atomic>
#include <string>
#include <utility>

#include "src/telemetry/catalog.h"

namespace dralens::telemetry {
namespace {

prometheus::MetricFamily Counters(
    const std::string& name,
    const std::vector<std::pair<const char*, const std::atomic<uint64_t>*>>& outcomes) {
  const MetricSpec& spec = Spec(name);
  prometheus::MetricFamily family;
  family.name = spec.name;
  family.help = spec.help;
  family.type = prometheus::MetricType::Counter;
  for (const auto& [outcome, value] : outcomes) {
    prometheus::ClientMetric m;
    m.label.push_back({"outcome", outcome});
    m.counter.value = static_cast<double>(value->load(std::memory_order_relaxed));
    family.metric.push_back(std::move(m));
  }
  return family;
}

}  // namespace

std::vector<prometheus::MetricFamily> TracingStatsCollectable::Collect() const {
  return {Counters("dralens_otlp_spans_total",
                   {{"exported", &stats_.spans_exported},
                    {"rejected", &stats_.spans_rejected},
                    {"dropped_queue_full", &stats_.spans_dropped_queue_full},
                    {"dropped_shutdown", &stats_.spans_dropped_shutdown},
                    {"dropped_export_failed", &stats_.spans_dropped_export_failed}}),
          Counters("dralens_otlp_requests_total",
                   {{"success", &stats_.requests_success},
                    {"retryable_status", &stats_.requests_retryable_status},
                    {"failed_status", &stats_.requests_failed_status},
                    {"connection_error", &stats_.requests_connection_error},
                    {"timeout", &stats_.requests_timeout}})};
}

}  // namespace dralens::telemetry
