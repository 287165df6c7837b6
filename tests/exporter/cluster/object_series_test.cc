// The per-object series store: series by key, replaced and erased one at a time, each reading
// its age when collected, and collected through the leader gate only while leading.
#include "exporter/cluster/object_series.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "exporter/cluster/leader_gate.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/common/fnv.h"
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
  // In the order of the keys' FNV-1a hashes.
  const bool a_first = common::Fnv1a64("team/a") < common::Fnv1a64("team/b");
  const prometheus::ClientMetric& a = families[0].metric[a_first ? 0 : 1];
  const prometheus::ClientMetric& b = families[0].metric[a_first ? 1 : 0];
  EXPECT_EQ(a.label[0].value, "a");
  EXPECT_EQ(a.gauge.value, 7);
  EXPECT_EQ(b.label[0].value, "b");
  EXPECT_EQ(b.label[1].value, "waiting_for_pod");
  EXPECT_EQ(b.gauge.value, 1);
  // A time still ahead (a claim created by a clock ahead of this one) reads 0, not less.
  series.Set("team/c", {{"claim", "c"}}, clock.Now() + absl::Seconds(30));
  bool found = false;
  families = series.Collect();
  for (const prometheus::ClientMetric& m : families[0].metric) {
    if (m.label[0].value == "c") {
      found = true;
      EXPECT_EQ(m.gauge.value, 0);
    }
  }
  EXPECT_TRUE(found);
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

// The order is the keys' (by hash), not the order they were set in; a scrape written in pieces
// adds up to the whole, and a series set or erased while a piece is handed on is written or not
// by where it falls, never twice.
TEST(ObjectSeriesTest, OrderIsTheKeysAndPiecesAddUpToTheWhole) {
  common::FakeClock clock;
  ObjectSeries forward(kFamily, &clock), backward(kFamily, &clock);
  constexpr int kClaims = 2000;
  auto key = [](int i) { return absl::StrFormat("team-%02d/claim-%05d", i % 16, i); };
  for (int i = 0; i < kClaims; ++i) {
    forward.Set(key(i), {{"claim", key(i)}}, clock.Now() - absl::Seconds(i));
  }
  for (int i = kClaims - 1; i >= 0; --i) {
    backward.Set(key(i), {{"claim", key(i)}}, clock.Now() - absl::Seconds(i));
  }
  const auto format = telemetry::ExpositionFormat::kPrometheusText;
  const std::string whole = telemetry::Render({}, nullptr, format, {&forward});
  EXPECT_EQ(whole, telemetry::Render({}, nullptr, format, {&backward}));
  std::vector<std::string> lines = absl::StrSplit(whole, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), kClaims + 2u);  // # HELP, # TYPE
  std::vector<uint64_t> hashes;
  for (size_t i = 2; i < lines.size(); ++i) {
    const size_t start = lines[i].find("claim=\"") + 7;
    hashes.push_back(common::Fnv1a64(lines[i].substr(start, lines[i].find('"', start) - start)));
  }
  EXPECT_TRUE(std::is_sorted(hashes.begin(), hashes.end()));

  std::vector<std::string> pieces;
  telemetry::TextWriter out(1024, [&](absl::string_view piece) {
    if (pieces.empty()) {
      forward.Erase(key(0));  // wherever it falls: at most once in what follows
      forward.Set("late/one", {{"claim", "late/one"}}, clock.Now());
    }
    pieces.emplace_back(piece);
    return true;
  });
  telemetry::RenderTo({}, nullptr, format, {&forward}, out);
  EXPECT_GT(pieces.size(), 20u);
  const std::string changed = absl::StrJoin(pieces, "");
  for (const std::string& claim : {key(0), std::string("late/one"), key(1)}) {
    size_t count = 0;
    for (size_t at = changed.find("\"" + claim + "\""); at != std::string::npos;
         at = changed.find("\"" + claim + "\"", at + 1)) {
      ++count;
    }
    EXPECT_LE(count, 1u) << claim;
  }
  EXPECT_NE(changed.find("\"" + key(1) + "\""), std::string::npos);
  pieces.clear();
  // Unchanged since: a second scrape in pieces is the one-piece render.
  telemetry::TextWriter again(1024, [&](absl::string_view piece) {
    pieces.emplace_back(piece);
    return true;
  });
  telemetry::RenderTo({}, nullptr, format, {&forward}, again);
  EXPECT_EQ(absl::StrJoin(pieces, ""), telemetry::Render({}, nullptr, format, {&forward}));
  EXPECT_EQ(forward.size(), kClaims + 0u);
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
