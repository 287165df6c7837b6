// TextFamily renders exactly what Render writes for the same series held in a prometheus-cpp
// family, in both formats, while keeping each series' label text from the moment it is added.
#include "src/telemetry/text_family.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "src/common/fnv.h"
#include "src/telemetry/catalog.h"
#include "src/telemetry/exposition.h"

namespace dralens::telemetry {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kGauge[] = "dralens_cluster_gpus";
constexpr char kCounter[] = "dralens_cluster_stranded_gpu_seconds_total";

// The same series, set the same way, in a registry and in text families.
struct Both {
  prometheus::Registry registry;
  TextFamilies text;
  TextFamily<prometheus::Gauge>& gauge = text.AddGauge(kGauge);
  TextFamily<prometheus::Counter>& counter = text.AddCounter(kCounter);

  void SetGauge(const prometheus::Labels& labels, double v) {
    BuildGauge(registry, kGauge).Add(labels).Set(v);
    gauge.Add(labels).Set(v);
  }
  void AddCounter(const prometheus::Labels& labels, double v) {
    BuildCounter(registry, kCounter).Add(labels).Increment(v);
    counter.Add(labels).Increment(v);
  }
};

// The exposition split into its families (each from its "# HELP" line), sorted, with each
// family's samples sorted (a TextFamily writes its series in its own order, which the formats
// leave free).
std::vector<std::string> Families(std::string text) {
  constexpr absl::string_view kEof = "# EOF\n";  // OpenMetrics' end, after every family
  if (absl::EndsWith(text, kEof)) {
    text.resize(text.size() - kEof.size());
  }
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t next = text.find("# HELP ", start + 1);
    if (next == std::string::npos) {
      next = text.size();
    }
    std::vector<std::string> lines = absl::StrSplit(text.substr(start, next - start), '\n');
    auto samples = std::find_if(lines.begin(), lines.end(),
                                [](const std::string& l) { return !absl::StartsWith(l, "#"); });
    std::sort(samples, lines.end());
    out.push_back(absl::StrJoin(lines, "\n"));
    start = next;
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(TextFamilyTest, AddTextIsAddOfTheSameLabels) {
  // Values that need escaping, and names given in order.
  const prometheus::Labels labels = {
      {"kind", "free"}, {"node", "n\"1\\x\ny"}, {"product", ""}, {"state", "a,b"}};
  const LabelView views[] = {
      {"kind", "free"}, {"node", "n\"1\\x\ny"}, {"product", ""}, {"state", "a,b"}};
  std::vector<prometheus::ClientMetric::Label> vector;
  for (const auto& [name, value] : labels) {
    vector.push_back({name, value});
  }
  EXPECT_EQ(LabelTextOf(views), LabelText(vector));
  EXPECT_EQ(LabelTextOf({}), "");

  TextFamilies families;
  TextFamily<prometheus::Gauge>& gauge = families.AddGauge(kGauge);
  prometheus::Gauge& added = gauge.Add(labels);
  prometheus::Gauge& by_text = gauge.AddText(LabelTextOf(views));
  EXPECT_EQ(&added, &by_text) << "one series, whichever way its labels came";
  EXPECT_EQ(gauge.size(), 1u);
  prometheus::Gauge& other = gauge.AddText(LabelTextOf({{"kind", "free"}}));
  EXPECT_NE(&other, &added);
  EXPECT_EQ(gauge.size(), 2u);
  gauge.Remove(&by_text);
  EXPECT_EQ(gauge.size(), 1u);
}

TEST(TextFamilyTest, RendersWhatRenderWritesInBothFormats) {
  Both b;
  // Out of order on purpose, with values that need escaping and fractions.
  b.SetGauge(
      {{"node", "node-b"}, {"driver", "gpu.dralens.dev"}, {"product", "H100"}, {"state", "free"}},
      0.25);
  b.SetGauge({{"node", "node-a"},
              {"driver", "gpu.dralens.dev"},
              {"product", "A\"100\\n"},
              {"state", "allocated"}},
             3);
  b.SetGauge({{"node", "node-a"},
              {"driver", "gpu.dralens.dev"},
              {"product", "H100"},
              {"state", "unavailable"}},
             1e-7);
  b.AddCounter({{"kind", "allocated_not_running"},
                {"node", "node-a"},
                {"product", "H100"},
                {"device_class", ""}},
               12.5);
  for (ExpositionFormat format :
       {ExpositionFormat::kPrometheusText, ExpositionFormat::kOpenMetrics}) {
    // Family by family: the registry's order of families is its own.
    EXPECT_EQ(Families(Render({}, nullptr, format, {&b.text})),
              Families(Render(b.registry.Collect(), nullptr, format)));
  }
  // OpenMetrics names the counter family without _total, and its samples with it.
  const std::string om = Render({}, nullptr, ExpositionFormat::kOpenMetrics, {&b.text});
  EXPECT_TRUE(absl::EndsWith(om, "# EOF\n"));
  EXPECT_THAT(om, HasSubstr("# TYPE dralens_cluster_stranded_gpu_seconds counter\n"));
  EXPECT_THAT(om, HasSubstr("dralens_cluster_stranded_gpu_seconds_total{"));
}

TEST(TextFamilyTest, AddReturnsTheSameSeriesAndRemoveDropsIt) {
  TextFamilies text;
  TextFamily<prometheus::Gauge>& g = text.AddGauge(kGauge);
  prometheus::Gauge& a = g.Add({{"node", "a"}});
  EXPECT_EQ(&g.Add({{"node", "a"}}), &a);
  prometheus::Gauge& b = g.Add({{"node", "b"}});
  a.Set(1);
  b.Set(2);
  EXPECT_EQ(g.size(), 2u);
  g.Remove(&a);
  g.Remove(&a);  // twice: nothing
  EXPECT_EQ(g.size(), 1u);
  std::string out = Render({}, nullptr, ExpositionFormat::kPrometheusText, {&text});
  EXPECT_THAT(out, HasSubstr("dralens_cluster_gpus{node=\"b\"} 2\n"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("node=\"a\"")));
  // Collect gives the same series to code that reads families.
  std::vector<prometheus::MetricFamily> families = text.Collect();
  ASSERT_EQ(families.size(), 1u);
  ASSERT_EQ(families[0].metric.size(), 1u);
  EXPECT_EQ(families[0].metric[0].gauge.value, 2);
  // A family without series writes nothing.
  g.Remove(&b);
  EXPECT_EQ(Render({}, nullptr, ExpositionFormat::kPrometheusText, {&text}), "");
  EXPECT_TRUE(text.Collect().empty());
}

TEST(TextFamilyTest, CollectGivesBackTheLabelsFromTheirText) {
  TextFamilies text;
  TextFamily<prometheus::Gauge>& g = text.AddGauge(kGauge);
  const prometheus::Labels odd = {{"a", ""},
                                  {"b", "quote \" back\\slash new\nline = , } {"},
                                  {"c", "\\"},
                                  {"node", "gpu-node-1"}};
  g.Add(odd).Set(3);
  g.Add({}).Set(4);
  std::vector<prometheus::MetricFamily> families = text.Collect();
  ASSERT_EQ(families.size(), 1u);
  ASSERT_EQ(families[0].metric.size(), 2u);
  const int bare = families[0].metric[0].label.empty() ? 0 : 1;  // the series without labels
  EXPECT_TRUE(families[0].metric[bare].label.empty());
  EXPECT_EQ(families[0].metric[bare].gauge.value, 4);
  prometheus::Labels back;
  for (const auto& l : families[0].metric[1 - bare].label) {
    back[l.name] = l.value;
  }
  EXPECT_EQ(back, odd);
  EXPECT_EQ(families[0].metric[1 - bare].gauge.value, 3);
}

TEST(TextFamilyTest, RefusesANameOfAnotherKind) {
  EXPECT_THROW(TextFamily<prometheus::Counter>{kGauge}, std::logic_error);
  EXPECT_THROW(TextFamily<prometheus::Gauge>{kCounter}, std::logic_error);
}

// A scrape is written in pieces: each piece ends on a whole line, they add up to the text of a
// one-piece render, and the family's lock is not held while a piece is handed on, so series can
// change in between (as between two scrapes) without a torn or repeated line.
TEST(TextFamilyTest, PiecesAddUpToTheWholeTextAndReleaseTheLockInBetween) {
  TextFamilies text;
  TextFamily<prometheus::Gauge>& g = text.AddGauge(kGauge);
  std::vector<prometheus::Gauge*> series;
  for (int i = 0; i < 1000; ++i) {
    series.push_back(&g.Add({{"node", absl::StrFormat("node-%04d", i)}}));
    series.back()->Set(i);
  }
  const std::string whole = Render({}, nullptr, ExpositionFormat::kOpenMetrics, {&text});
  std::vector<std::string> pieces;
  TextWriter out(1024, [&](absl::string_view piece) {
    pieces.emplace_back(piece);
    return true;
  });
  RenderTo({}, nullptr, ExpositionFormat::kOpenMetrics, {&text}, out);
  EXPECT_GT(pieces.size(), 20u);
  EXPECT_EQ(absl::StrJoin(pieces, ""), whole);
  for (const std::string& piece : pieces) {
    EXPECT_LT(piece.size(), 1024u + 64u);  // a piece, plus the line that filled it
    EXPECT_TRUE(absl::EndsWith(piece, "\n"));
  }

  // Changes made while a piece is handed on (Add and Remove take the family's lock): a series
  // after the last one written appears, one removed before it was written does not, and one
  // added before the cursor waits for the next scrape. Where a series falls is the family's
  // order: the FNV-1a hash of its label text.
  auto place = [](const std::string& node) { return common::Fnv1a64(LabelText({{"node", node}})); };
  auto name_with = [&](const std::string& prefix, const std::function<bool(uint64_t)>& where) {
    for (int i = 0;; ++i) {
      std::string node = absl::StrCat(prefix, i);
      if (where(place(node))) {
        return node;
      }
    }
  };
  std::vector<std::string> lines = absl::StrSplit(whole, '\n', absl::SkipEmpty());
  auto node_of = [](absl::string_view line) {
    const size_t start = line.find("node=\"") + 6;
    return std::string(line.substr(start, line.find('"', start) - start));
  };
  const std::string last_line = lines[lines.size() - 2];  // before "# EOF"
  const std::string unwritten = node_of(last_line);
  std::string late, early;
  pieces.clear();
  TextWriter changing(1024, [&](absl::string_view piece) {
    if (pieces.empty()) {
      std::vector<std::string> written = absl::StrSplit(piece, '\n', absl::SkipEmpty());
      const uint64_t cursor = place(node_of(written.back()));
      late = name_with("late-", [&](uint64_t h) { return h > cursor; });
      early = name_with("early-", [&](uint64_t h) { return h < cursor; });
      g.Add({{"node", late}}).Set(7);
      g.Remove(series[std::stoi(unwritten.substr(5))]);
      g.Add({{"node", early}}).Set(8);
    }
    pieces.emplace_back(piece);
    return true;
  });
  RenderTo({}, nullptr, ExpositionFormat::kPrometheusText, {&text}, changing);
  const std::string during = absl::StrJoin(pieces, "");
  EXPECT_THAT(during, HasSubstr(absl::StrCat("dralens_cluster_gpus{node=\"", late, "\"} 7\n")));
  EXPECT_THAT(during, Not(HasSubstr(absl::StrCat("node=\"", unwritten, "\""))));
  EXPECT_THAT(during, Not(HasSubstr(absl::StrCat("node=\"", early, "\""))));
  EXPECT_EQ(std::count(during.begin(), during.end(), '\n'), 2 + 1000);  // HELP, TYPE, series
  EXPECT_THAT(Render({}, nullptr, ExpositionFormat::kPrometheusText, {&text}),
              HasSubstr(absl::StrCat("dralens_cluster_gpus{node=\"", early, "\"} 8\n")));
}

// Pieces smaller than a line: every pass writes at least one series, so every series (the one
// without labels too, whose label text is empty) is written once even when the header alone
// fills a piece.
TEST(TextFamilyTest, PiecesSmallerThanALineStillWriteEverySeriesOnce) {
  TextFamilies text;
  TextFamily<prometheus::Gauge>& g = text.AddGauge(kGauge);
  g.Add({}).Set(5);
  g.Add({{"node", "a"}}).Set(1);
  g.Add({{"node", "b"}}).Set(2);
  std::vector<std::string> pieces;
  TextWriter out(1, [&](absl::string_view piece) {
    pieces.emplace_back(piece);
    return true;
  });
  RenderTo({}, nullptr, ExpositionFormat::kPrometheusText, {&text}, out);
  EXPECT_EQ(absl::StrJoin(pieces, ""),
            Render({}, nullptr, ExpositionFormat::kPrometheusText, {&text}));
  EXPECT_THAT(absl::StrJoin(pieces, ""), HasSubstr("\ndralens_cluster_gpus 5\n"));
  EXPECT_EQ(pieces.size(), 3u);  // the header with the first series, then one series a piece
}

// A client that hangs up stops the scrape: nothing more is rendered or handed on.
TEST(TextFamilyTest, AReceiverThatIsGoneStopsTheRender) {
  TextFamilies text;
  TextFamily<prometheus::Gauge>& g = text.AddGauge(kGauge);
  for (int i = 0; i < 1000; ++i) {
    g.Add({{"node", absl::StrFormat("node-%04d", i)}}).Set(i);
  }
  int calls = 0;
  TextWriter out(1024, [&](absl::string_view) {
    ++calls;
    return false;
  });
  RenderTo({}, nullptr, ExpositionFormat::kOpenMetrics, {&text}, out);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(out.failed());
  EXPECT_FALSE(out.Flush());
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace dralens::telemetry
