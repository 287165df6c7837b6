// The per-object series store: series by key, replaced and erased one at a time, each reading
// its age when collected, and collected through the leader gate only while leading.
#include "exporter/cluster/object_series.h"

#include <memory>

#include "exporter/cluster/leader_gate.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/telemetry/text_family.h"

namespace dralens::exporter::cluster {
namespace {

constexpr char kFamily[] = "dralens_cluster_pending_claim_age_seconds";

TEST(ObjectSeriesTest, SetReplaceAgeErase) {
  common::FakeClock clock;
  const absl::Time t0 = clock.Now();
  ObjectSeries series(kFamily, &clock);
  EXPECT_TRUE(series.Collect().empty());
  series.Set("team/b", {{"claim", "b"}, {"reason", "no_capacity"}}, t0);
  series.Set("team/a", {{"claim", "a"}, {"reason", "tainted"}}, t0 - absl::Seconds(5));
  series.Set("team/b", {{"claim", "b"}, {"reason", "waiting_for_pod"}},
             t0 + absl::Seconds(1));  // replaces
  // The ages are read when collected: nothing refreshes them.
  clock.Advance(absl::Seconds(2));
  std::vector<prometheus::MetricFamily> families = series.Collect();
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].name, kFamily);
  EXPECT_FALSE(families[0].help.empty());
  EXPECT_EQ(families[0].type, prometheus::MetricType::Gauge);
  ASSERT_EQ(families[0].metric.size(), 2u);
  EXPECT_EQ(families[0].metric[0].label[0].value, "a");  // key order
  EXPECT_EQ(families[0].metric[0].gauge.value, 7);
  EXPECT_EQ(families[0].metric[1].label[1].value, "waiting_for_pod");
  EXPECT_EQ(families[0].metric[1].gauge.value, 1);
  // A time still ahead (a claim created by a clock ahead of this one) reads 0, not less.
  series.Set("team/c", {{"claim", "c"}}, clock.Now() + absl::Seconds(30));
  EXPECT_EQ(series.Collect()[0].metric[2].gauge.value, 0);
  series.Erase("team/c");
  series.Erase("team/a");
  series.Erase("team/a");
  EXPECT_EQ(series.size(), 1u);
  series.Erase("team/b");
  EXPECT_TRUE(series.Collect().empty());
}

TEST(ObjectSeriesTest, RendersAsTextWhatItCollects) {
  common::FakeClock clock;
  ObjectSeries series(kFamily, &clock);
  series.Set("team/b", {{"namespace", "team"}, {"claim", "b\"x"}}, clock.Now());
  series.Set("team/a", {{"namespace", "team"}, {"claim", "a"}}, clock.Now() - absl::Seconds(7));
  clock.Advance(absl::Milliseconds(2500));
  for (auto format :
       {telemetry::ExpositionFormat::kPrometheusText, telemetry::ExpositionFormat::kOpenMetrics}) {
    EXPECT_EQ(telemetry::Render({}, nullptr, format, {&series}),
              telemetry::Render(series.Collect(), nullptr, format));
  }
}

TEST(ObjectSeriesTest, TheGateExportsThemOnlyWhileLeading) {
  auto cluster = std::make_shared<prometheus::Registry>();
  prometheus::Registry process;
  common::FakeClock clock;
  auto series = std::make_shared<ObjectSeries>(kFamily, &clock);
  series->Set("team/a", {{"claim", "a"}}, clock.Now() - absl::Seconds(3));
  LeaderGate gate(cluster, process);
  gate.AddCollectable(series);
  EXPECT_TRUE(gate.Collect().empty());
  gate.SetLeader(true);
  std::vector<prometheus::MetricFamily> families = gate.Collect();
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].name, kFamily);
  EXPECT_EQ(families[0].metric.at(0).gauge.value, 3);
}

TEST(ObjectSeriesTest, TheGateRendersTextFamiliesOnlyWhileLeading) {
  auto cluster = std::make_shared<prometheus::Registry>();
  prometheus::Registry process;
  auto text = std::make_shared<telemetry::TextFamilies>();
  text->AddGauge("dralens_cluster_gpus").Add({{"node", "a"}, {"state", "free"}}).Set(2);
  LeaderGate gate(cluster, process);
  gate.AddTextSource(text);
  EXPECT_EQ(telemetry::Render({}, nullptr, telemetry::ExpositionFormat::kPrometheusText, {&gate}),
            "");
  gate.SetLeader(true);
  const std::string out =
      telemetry::Render({}, nullptr, telemetry::ExpositionFormat::kPrometheusText, {&gate});
  EXPECT_NE(out.find("dralens_cluster_gpus{node=\"a\",state=\"free\"} 2\n"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace dralens::exporter::cluster
