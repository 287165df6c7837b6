// The metric catalogue: every metric family dralens exports, with its type, label names and
// help, in one table. Components build their families from it (BuildCounter/... below), so a
// family cannot exist without an entry, and the metric reference in docs/metrics.md is
// generated from it (a test keeps the two in step).
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace dralens::telemetry {

enum class MetricKind { kCounter, kGauge, kHistogram, kInfo };
absl::string_view ToString(MetricKind kind);

// What a user may build on, as Kubernetes' metric stability levels:
//   stable  name, type and labels do not change without a deprecation period;
//   beta    labels may gain values; a change is announced in the release notes;
//   alpha   may change or go in any release.
enum class Stability { kAlpha, kBeta, kStable };
absl::string_view ToString(Stability stability);

struct MetricSpec {
  std::string name;
  MetricKind kind;
  std::vector<std::string> labels;  // in the order they are documented
  std::string roles;                // which roles export it: "node", "cluster", "all"
  std::string help;
  Stability stability = Stability::kAlpha;
};

// Every family, grouped by subsystem, in the order of docs/metrics.md.
const std::vector<MetricSpec>& Catalog();

// The entry for `name`. An unknown name is a programming error: it throws std::logic_error so
// that a test exercising the component fails at once.
const MetricSpec& Spec(absl::string_view name);

// Builders that take name, help and kind from the catalogue. The kind must match the builder.
prometheus::Family<prometheus::Counter>& BuildCounter(prometheus::Registry& registry,
                                                      absl::string_view name);
prometheus::Family<prometheus::Gauge>& BuildGauge(prometheus::Registry& registry,
                                                  absl::string_view name);  // gauges and infos
prometheus::Family<prometheus::Histogram>& BuildHistogram(prometheus::Registry& registry,
                                                          absl::string_view name);

// Buckets for durations from 1 ms up to 120 s (a prepare that takes longer has already missed
// the kubelet's 45 s deadline; the top buckets show by how much).
const prometheus::Histogram::BucketBoundaries& DurationBuckets();

// The docs/metrics.md table: | metric | type | labels | roles | stability | description |.
std::string CatalogMarkdown();

}  // namespace dralens::telemetry
