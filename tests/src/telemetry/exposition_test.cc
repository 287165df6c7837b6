// The exposition writer: golden output in both formats, exemplars, negotiation, gzip, and real
// parsers (promtool for classic text, the prometheus_client OpenMetrics parser) on its output.
#include "src/telemetry/exposition.h"

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/summary.h"
#include "src/common/clock.h"
#include "src/telemetry/exemplar.h"

namespace dralens::telemetry {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kTrace[] = "0af7651916cd43dd8448eb211c80319c";
constexpr char kOtherTrace[] = "4bf92f3577b34da6a3ce929d0e0e4736";

// A registry with one family of every kind, as the node role declares them.
class ExpositionTest : public ::testing::Test {
 protected:
  ExpositionTest() : store_(clock_) {
    auto& requests = prometheus::BuildCounter()
                         .Name("dralens_prepare_requests_total")
                         .Help("NodePrepareResources calls by result.")
                         .Register(*registry_);
    ok_ = std::make_unique<ExemplarCounter>(
        ExemplarCounter::Add(store_, requests, {{"result", "ok"}}));
    requests.Add({{"result", "error"}}).Increment(2);

    auto& info = prometheus::BuildGauge()
                     .Name("dralens_device_info")
                     .Help("One series per device; the value is always 1.")
                     .Register(*registry_);
    info.Add({{"device", "gpu-0"}, {"product", "NVIDIA H100 80GB HBM3"}}).Set(1);

    auto& memory = prometheus::BuildGauge()
                       .Name("dralens_device_memory_bytes")
                       .Help("Device memory.\nIn \"bytes\", with a backslash \\.")
                       .Register(*registry_);
    memory.Add({{"device", "gpu-0"}}).Set(85520809984);
    memory.Add({{"device", "quoted \"\\\n"}}).Set(0.25);

    auto& duration = prometheus::BuildHistogram()
                         .Name("dralens_prepare_duration_seconds")
                         .Help("NodePrepareResources duration per claim.")
                         .Register(*registry_);
    histogram_ = std::make_unique<ExemplarHistogram>(
        ExemplarHistogram::Add(store_, duration, {{"result", "ok"}}, {0.005, 0.1, 1, 120}));

    auto& scrape = prometheus::BuildSummary()
                       .Name("dralens_scrape_duration_seconds")
                       .Help("Scrape duration.")
                       .Register(*registry_);
    scrape.Add({}, prometheus::Summary::Quantiles{{0.5, 0.05}}).Observe(0.001);

    // A family without series is left out.
    prometheus::BuildGauge().Name("dralens_unused").Help("No series.").Register(*registry_);
  }

  std::string Write(ExpositionFormat format) {
    return Render(registry_->Collect(), &store_, format);
  }

  // Writes `text` to a temporary file and returns its path.
  std::string TempFile(const std::string& text) {
    std::string path = (std::filesystem::temp_directory_path() /
                        absl::StrCat("dralens-exposition-", getpid(), "-", files_++))
                           .string();
    std::ofstream(path) << text;
    paths_.push_back(path);
    return path;
  }

  ~ExpositionTest() override {
    for (const std::string& p : paths_) {
      std::filesystem::remove(p);
    }
  }

  common::FakeClock clock_{absl::FromUnixMillis(1700000000123)};
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  ExemplarStore store_;
  std::unique_ptr<ExemplarCounter> ok_;
  std::unique_ptr<ExemplarHistogram> histogram_;
  int files_ = 0;
  std::vector<std::string> paths_;
};

TEST_F(ExpositionTest, GoldenPrometheusText) {
  ok_->Increment(1, kTrace);
  histogram_->Observe(0.05, kTrace);
  histogram_->Observe(300);
  EXPECT_EQ(Write(ExpositionFormat::kPrometheusText),
            R"(# HELP dralens_prepare_requests_total NodePrepareResources calls by result.
# TYPE dralens_prepare_requests_total counter
dralens_prepare_requests_total{result="error"} 2
dralens_prepare_requests_total{result="ok"} 1
# HELP dralens_device_info One series per device; the value is always 1.
# TYPE dralens_device_info gauge
dralens_device_info{device="gpu-0",product="NVIDIA H100 80GB HBM3"} 1
# HELP dralens_device_memory_bytes Device memory.\nIn "bytes", with a backslash \\.
# TYPE dralens_device_memory_bytes gauge
dralens_device_memory_bytes{device="gpu-0"} 85520809984
dralens_device_memory_bytes{device="quoted \"\\\n"} 0.25
# HELP dralens_prepare_duration_seconds NodePrepareResources duration per claim.
# TYPE dralens_prepare_duration_seconds histogram
dralens_prepare_duration_seconds_bucket{result="ok",le="0.005"} 0
dralens_prepare_duration_seconds_bucket{result="ok",le="0.1"} 1
dralens_prepare_duration_seconds_bucket{result="ok",le="1"} 1
dralens_prepare_duration_seconds_bucket{result="ok",le="120"} 1
dralens_prepare_duration_seconds_bucket{result="ok",le="+Inf"} 2
dralens_prepare_duration_seconds_sum{result="ok"} 300.05
dralens_prepare_duration_seconds_count{result="ok"} 2
# HELP dralens_scrape_duration_seconds Scrape duration.
# TYPE dralens_scrape_duration_seconds summary
dralens_scrape_duration_seconds{quantile="0.5"} 0.001
dralens_scrape_duration_seconds_sum 0.001
dralens_scrape_duration_seconds_count 1
)");
}

TEST_F(ExpositionTest, GoldenOpenMetricsWithExemplars) {
  ok_->Increment(1, kTrace);
  histogram_->Observe(0.05, kTrace);
  histogram_->Observe(0.07, kOtherTrace);  // the latest exemplar of a bucket wins
  histogram_->Observe(300, "");            // no trace id: counted, no exemplar
  EXPECT_EQ(Write(ExpositionFormat::kOpenMetrics),
            R"(# HELP dralens_prepare_requests NodePrepareResources calls by result.
# TYPE dralens_prepare_requests counter
dralens_prepare_requests_total{result="error"} 2
dralens_prepare_requests_total{result="ok"} 1 # {trace_id="0af7651916cd43dd8448eb211c80319c"} 1 1700000000.123
# HELP dralens_device One series per device; the value is always 1.
# TYPE dralens_device info
dralens_device_info{device="gpu-0",product="NVIDIA H100 80GB HBM3"} 1
# HELP dralens_device_memory_bytes Device memory.\nIn \"bytes\", with a backslash \\.
# TYPE dralens_device_memory_bytes gauge
dralens_device_memory_bytes{device="gpu-0"} 85520809984
dralens_device_memory_bytes{device="quoted \"\\\n"} 0.25
# HELP dralens_prepare_duration_seconds NodePrepareResources duration per claim.
# TYPE dralens_prepare_duration_seconds histogram
dralens_prepare_duration_seconds_bucket{result="ok",le="0.005"} 0
dralens_prepare_duration_seconds_bucket{result="ok",le="0.1"} 2 # {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} 0.07 1700000000.123
dralens_prepare_duration_seconds_bucket{result="ok",le="1"} 2
dralens_prepare_duration_seconds_bucket{result="ok",le="120"} 2
dralens_prepare_duration_seconds_bucket{result="ok",le="+Inf"} 3
dralens_prepare_duration_seconds_sum{result="ok"} 300.12
dralens_prepare_duration_seconds_count{result="ok"} 3
# HELP dralens_scrape_duration_seconds Scrape duration.
# TYPE dralens_scrape_duration_seconds summary
dralens_scrape_duration_seconds{quantile="0.5"} 0.001
dralens_scrape_duration_seconds_sum 0.001
dralens_scrape_duration_seconds_count 1
# EOF
)");
}

TEST_F(ExpositionTest, ValuesAtBucketBoundsAndInfinityLandWherePrometheusCountsThem) {
  histogram_->Observe(0.1, kTrace);  // exactly on a bound: that bucket (le is inclusive)
  histogram_->Observe(std::numeric_limits<double>::infinity(), kOtherTrace);
  const std::string om = Write(ExpositionFormat::kOpenMetrics);
  EXPECT_THAT(om, HasSubstr(absl::StrCat(R"(le="0.1"} 1 # {trace_id=")", kTrace, R"("} 0.1 )")));
  EXPECT_THAT(om,
              HasSubstr(absl::StrCat(R"(le="+Inf"} 2 # {trace_id=")", kOtherTrace, R"("} +Inf )")));
}

TEST_F(ExpositionTest, InvalidTraceIdsLeaveNoExemplar) {
  for (const char* bad :
       {"", "00000000000000000000000000000000", "0AF7651916CD43DD8448EB211C80319C",
        "0af7651916cd43dd8448eb211c80319", "not-a-trace-id-not-a-trace-id-xx"}) {
    ok_->Increment(1, bad);
    histogram_->Observe(0.05, bad);
  }
  EXPECT_THAT(Write(ExpositionFormat::kOpenMetrics), Not(HasSubstr("trace_id")));
}

TEST_F(ExpositionTest, RemovedSeriesTakeTheirExemplarsWithThem) {
  histogram_->Observe(0.05, kTrace);
  EXPECT_EQ(store_.SeriesCount(), 2u);
  store_.Remove("dralens_prepare_duration_seconds", {{"result", "ok"}});
  EXPECT_EQ(store_.SeriesCount(), 1u);
  EXPECT_EQ(store_.Find(SeriesKey("dralens_prepare_duration_seconds", {{"result", "ok"}})),
            nullptr);
}

TEST(FormatValueTest, IntegersSpecialsAndShortestRoundTrip) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(85520809984), "85520809984");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(1e-9), "1e-09");
  EXPECT_EQ(FormatValue(1e300), "1e+300");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  for (double v : {0.3, 1.0 / 3, 2.5e-7, 123456.789}) {
    EXPECT_EQ(std::stod(FormatValue(v)), v);
  }
}

TEST(NegotiateFormatTest, FollowsTheAcceptHeadersQValues) {
  // What Prometheus 2.x sends.
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;version=1.0.0,application/"
                            "openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,"
                            "*/*;q=0.1"),
            ExpositionFormat::kOpenMetrics);
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text"), ExpositionFormat::kOpenMetrics);
  EXPECT_EQ(NegotiateFormat("text/plain;version=0.0.4;q=0.9, application/openmetrics-text;q=0.5"),
            ExpositionFormat::kPrometheusText);
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text; version=2.0.0"),
            ExpositionFormat::kPrometheusText);
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;q=0"), ExpositionFormat::kPrometheusText);
  EXPECT_EQ(NegotiateFormat(""), ExpositionFormat::kPrometheusText);
  EXPECT_EQ(NegotiateFormat("*/*"), ExpositionFormat::kPrometheusText);
  EXPECT_EQ(NegotiateFormat(";;,=q;"), ExpositionFormat::kPrometheusText);
  EXPECT_EQ(ContentType(ExpositionFormat::kOpenMetrics),
            "application/openmetrics-text; version=1.0.0; charset=utf-8");
  EXPECT_EQ(ContentType(ExpositionFormat::kPrometheusText),
            "text/plain; version=0.0.4; charset=utf-8");
}

TEST(AcceptsGzipTest, HonoursQZero) {
  EXPECT_TRUE(AcceptsGzip("gzip"));
  EXPECT_TRUE(AcceptsGzip("deflate, gzip;q=0.5"));
  EXPECT_TRUE(AcceptsGzip("*"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=0"));
  EXPECT_FALSE(AcceptsGzip("identity"));
  EXPECT_FALSE(AcceptsGzip(""));
}

// Runs a command and returns {exit status, output}.
std::pair<int, std::string> RunCommand(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    return {-1, "popen failed"};
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) {
    output.append(buf, n);
  }
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

TEST_F(ExpositionTest, PromtoolAcceptsTheClassicText) {
  ok_->Increment(1, kTrace);
  histogram_->Observe(0.05, kTrace);
  ASSERT_EQ(access("/usr/bin/promtool", X_OK), 0)
      << "promtool is missing: run .ci/install-deps (Debian package prometheus)";
  auto [status, output] = RunCommand("/usr/bin/promtool check metrics < " +
                                     TempFile(Write(ExpositionFormat::kPrometheusText)));
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output, "") << "promtool found lint problems";
}

TEST_F(ExpositionTest, TheOpenMetricsReferenceParserAcceptsOurOutputAndSeesTheExemplars) {
  ok_->Increment(1, kTrace);
  histogram_->Observe(0.05, kOtherTrace);
  auto [status, output] = RunCommand(absl::StrCat("/usr/bin/python3 ", DRALENS_SOURCE_DIR,
                                                  "/tests/schema/check_openmetrics.py ",
                                                  TempFile(Write(ExpositionFormat::kOpenMetrics))));
  EXPECT_EQ(status, 0) << output;
  // Series are sorted by labels, so the order of the lines is fixed.
  EXPECT_EQ(output, absl::StrCat("dralens_prepare_requests_total ", kTrace, "\n",
                                 "dralens_prepare_duration_seconds_bucket ", kOtherTrace, "\n"));

  // And it is strict enough to catch a broken exposition.
  std::string broken = Write(ExpositionFormat::kOpenMetrics);
  broken.resize(broken.size() - std::string("# EOF\n").size());
  std::tie(status, output) =
      RunCommand(absl::StrCat("/usr/bin/python3 ", DRALENS_SOURCE_DIR,
                              "/tests/schema/check_openmetrics.py ", TempFile(broken)));
  EXPECT_EQ(status, 1) << output;
}

// Scrapes while other threads observe, add and remove series: every scrape must be complete
// and well formed (checked by the family header count and the trailer).
TEST_F(ExpositionTest, ConcurrentScrapesWhileSeriesChange) {
  auto& per_claim = prometheus::BuildGauge()
                        .Name("dralens_claim_devices")
                        .Help("Devices prepared per claim.")
                        .Register(*registry_);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < 3; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; !stop.load(); ++i) {
        histogram_->Observe(0.001 * (i % 200), i % 2 == 0 ? kTrace : kOtherTrace);
        ok_->Increment(1, kTrace);
        auto& g = per_claim.Add({{"claim", absl::StrCat("c-", w, "-", i % 50)}});
        g.Set(i);
        if (i % 3 == 0) {
          per_claim.Remove(&g);
        }
      }
    });
  }
  int scrapes = 0;
  for (; scrapes < 300; ++scrapes) {
    const std::string om = Write(ExpositionFormat::kOpenMetrics);
    ASSERT_TRUE(absl::EndsWith(om, "\n# EOF\n"));
    ASSERT_THAT(om, HasSubstr("# TYPE dralens_prepare_duration_seconds histogram\n"));
    const std::string text = Write(ExpositionFormat::kPrometheusText);
    ASSERT_THAT(text, HasSubstr("dralens_prepare_requests_total{result=\"ok\"} "));
  }
  stop = true;
  for (std::thread& t : writers) {
    t.join();
  }
  EXPECT_EQ(scrapes, 300);
}

}  // namespace
}  // namespace dralens::telemetry
