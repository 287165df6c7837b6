// Exposes the tracing pipeline's counters (TracingStats, plain atomics written on the export
// path) as dralens_otlp_* families, read when a scrape collects them.
#pragma once

#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "src/telemetry/tracing/tracing_stats.h"

namespace dralens::telemetry {

class TracingStatsCollectable : public prometheus::Collectable {
 public:
  // `stats` must outlive this object.
  explicit TracingStatsCollectable(const TracingStats& stats) : stats_(stats) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const TracingStats& stats_;
};

}  // namespace dralens::telemetry
