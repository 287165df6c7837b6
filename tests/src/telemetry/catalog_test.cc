// The metric catalogue follows the naming rules, builds what it declares, and is what the
// metric reference in docs/metrics.md documents.
#include "src/telemetry/catalog.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"

namespace dralens::telemetry {
namespace {

TEST(CatalogTest, NamesFollowPrometheusConventions) {
  std::set<std::string> seen;
  for (const MetricSpec& spec : Catalog()) {
    SCOPED_TRACE(spec.name);
    EXPECT_TRUE(seen.insert(spec.name).second) << "duplicate";
    EXPECT_TRUE(absl::StartsWith(spec.name, "dralens_"));
    EXPECT_FALSE(spec.help.empty());
    // dralens_node_claim_info carries a claim's identity under two naming schemes (ours and
    // dcgm-exporter's) plus dcgm-exporter's device keys: 13 labels.
    EXPECT_LE(spec.labels.size(), 13u);
    switch (spec.kind) {
      case MetricKind::kCounter:
        EXPECT_TRUE(absl::EndsWith(spec.name, "_total"));
        break;
      case MetricKind::kInfo:
        EXPECT_TRUE(absl::EndsWith(spec.name, "_info"));
        break;
      case MetricKind::kHistogram:
        EXPECT_TRUE(absl::EndsWith(spec.name, "_seconds"));
        break;
      case MetricKind::kGauge:
        EXPECT_FALSE(absl::EndsWith(spec.name, "_total"));
        break;
    }
    for (const std::string& label : spec.labels) {
      EXPECT_NE(label, "le");
      EXPECT_NE(label, "quantile");
    }
  }
}

TEST(CatalogTest, BuildersTakeNameKindAndHelpFromTheCatalogue) {
  prometheus::Registry registry;
  auto& c = BuildCounter(registry, "dralens_kube_requests_total");
  EXPECT_EQ(c.GetName(), "dralens_kube_requests_total");
  EXPECT_THROW(BuildCounter(registry, "dralens_no_such_metric_total"), std::logic_error);
  EXPECT_THROW(BuildGauge(registry, "dralens_kube_requests_total"), std::logic_error);
  EXPECT_NO_THROW(BuildGauge(registry, "dralens_build_info"));
  EXPECT_NO_THROW(BuildHistogram(registry, "dralens_node_claim_duration_seconds"));
}

TEST(CatalogTest, DurationBucketsReach120Seconds) {
  const auto& b = DurationBuckets();
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(b.back(), 120);
  EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
}

// On failure the message holds the table to paste between the markers of docs/metrics.md.
TEST(CatalogTest, MetricsDocHoldsTheGeneratedTable) {
  std::ifstream in(std::string(DRALENS_SOURCE_DIR) + "/docs/metrics.md");
  ASSERT_TRUE(in) << "docs/metrics.md not found";
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string begin = "<!-- metrics:begin -->\n";
  const std::string end = "<!-- metrics:end -->";
  const size_t b = doc.find(begin);
  const size_t e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/metrics.md lacks " << begin;
  ASSERT_NE(e, std::string::npos) << "docs/metrics.md lacks " << end;
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), CatalogMarkdown())
      << "regenerate the metric table of docs/metrics.md:\n"
      << CatalogMarkdown();
}

}  // namespace
}  // namespace dralens::telemetry
