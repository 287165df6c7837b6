// The HTTP endpoint: format negotiation, gzip, readiness, and scrapes while series change.
#include "exporter/http/metrics_server.h"

#include <httplib.h>

#include <atomic>
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
#include "src/telemetry/exemplar.h"
#include "src/telemetry/exposition.h"
#include "src/telemetry/text_family.h"
#include "tests/testing/gunzip.h"

namespace dralens::exporter {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kTrace[] = "0af7651916cd43dd8448eb211c80319c";
constexpr char kPrometheusAccept[] =
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& duration = prometheus::BuildHistogram()
                         .Name("dralens_prepare_duration_seconds")
                         .Help("Prepare duration.")
                         .Register(*registry_);
    histogram_ = std::make_unique<telemetry::ExemplarHistogram>(
        telemetry::ExemplarHistogram::Add(store_, duration, {}, {0.01, 0.1, 1}));
    histogram_->Observe(0.05, kTrace);
    server_ = std::make_unique<MetricsServer>(
        registry_, [this] { return ready_; }, &store_);
    ASSERT_TRUE(server_->Start("127.0.0.1:0").ok());
  }

  httplib::Result Get(const std::string& path, httplib::Headers headers = {}) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_decompress(false);  // see the bytes as sent
    return c.Get(path.c_str(), headers);
  }

  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  telemetry::ExemplarStore store_;
  std::unique_ptr<telemetry::ExemplarHistogram> histogram_;
  absl::Status ready_ = absl::UnavailableError("waiting for the kubelet");
  std::unique_ptr<MetricsServer> server_;
};

TEST_F(MetricsServerTest, ClassicTextByDefault) {
  auto res = Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), telemetry::kPrometheusTextContentType);
  EXPECT_THAT(res->body, HasSubstr("dralens_prepare_duration_seconds_bucket{le=\"0.1\"} 1\n"));
  EXPECT_THAT(res->body, Not(HasSubstr("# EOF")));
  EXPECT_THAT(res->body, Not(HasSubstr("trace_id")));
}

TEST_F(MetricsServerTest, OpenMetricsWithExemplarsWhenPrometheusAsksForIt) {
  auto res = Get("/metrics", {{"Accept", kPrometheusAccept}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->get_header_value("Content-Type"), telemetry::kOpenMetricsContentType);
  EXPECT_THAT(res->body,
              HasSubstr(absl::StrCat("dralens_prepare_duration_seconds_bucket{le=\"0.1\"} "
                                     "1 # {trace_id=\"",
                                     kTrace, "\"} 0.05 ")));
  EXPECT_TRUE(absl::EndsWith(res->body, "# EOF\n"));
}

TEST_F(MetricsServerTest, GzipInBothFormatsWhenAccepted) {
  for (const char* accept : {kPrometheusAccept, "text/plain"}) {
    SCOPED_TRACE(accept);
    auto res = Get("/metrics", {{"Accept", accept}, {"Accept-Encoding", "gzip"}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->get_header_value("Content-Encoding"), "gzip");
    EXPECT_THAT(::dralens::testing::Gunzip(res->body),
                HasSubstr("dralens_prepare_duration_seconds_count 1"));
  }
  auto plain = Get("/metrics", {{"Accept", kPrometheusAccept}});
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->get_header_value("Content-Encoding"), "");
}

// A body of many pieces (the cluster role's at fleet scale is megabytes) is sent as it is
// rendered, chunked, and arrives whole and identical to a one-piece render, in each format,
// compressed or not.
TEST(MetricsServerLargeBodyTest, SentInPiecesAndIdenticalToTheWholeRender) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge().Name("dralens_up").Help("Up.").Register(*registry).Add({}).Set(1);
  telemetry::TextFamilies text;
  telemetry::TextFamily<prometheus::Gauge>& gpus = text.AddGauge("dralens_cluster_gpus");
  for (int i = 0; i < 20000; ++i) {
    gpus.Add({{"node", absl::StrCat("node-", i)}, {"state", "free"}}).Set(i % 8);
  }
  MetricsServer server(registry, [] { return absl::OkStatus(); });
  server.AddTextSource(&text);
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  httplib::Client c("127.0.0.1", server.port());
  c.set_decompress(false);
  for (const telemetry::ExpositionFormat format :
       {telemetry::ExpositionFormat::kPrometheusText, telemetry::ExpositionFormat::kOpenMetrics}) {
    const std::string accept = format == telemetry::ExpositionFormat::kOpenMetrics
                                   ? "application/openmetrics-text;version=1.0.0"
                                   : "text/plain;version=0.0.4";
    for (const bool gzip : {false, true}) {
      SCOPED_TRACE(absl::StrCat(accept, gzip ? " gzip" : ""));
      // The registry holds the server's scrape durations too: each scrape is observed after it
      // was written, so this render is what the next scrape sends.
      const std::string want = telemetry::Render(registry->Collect(), nullptr, format, {&text});
      ASSERT_GT(want.size(), 1000000u);
      httplib::Headers headers = {{"Accept", accept}};
      if (gzip) {
        headers.emplace("Accept-Encoding", "gzip");
      }
      auto res = c.Get("/metrics", headers);
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 200);
      EXPECT_EQ(res->get_header_value("Transfer-Encoding"), "chunked");
      EXPECT_EQ(res->get_header_value("Content-Type"), telemetry::ContentType(format));
      EXPECT_EQ(res->get_header_value("Content-Encoding"), gzip ? "gzip" : "");
      const std::string body = gzip ? ::dralens::testing::Gunzip(res->body) : res->body;
      EXPECT_TRUE(body == want) << body.size() << " bytes against " << want.size();
    }
  }
  server.Stop();
}

TEST_F(MetricsServerTest, EachScrapeIsTimedByFormat) {
  ASSERT_TRUE(Get("/metrics"));
  ASSERT_TRUE(Get("/metrics", {{"Accept", kPrometheusAccept}}));
  // The third scrape reports the two before it.
  auto res = Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_THAT(res->body, HasSubstr("dralens_scrape_duration_seconds_count{format=\"text\"} 1\n"));
  EXPECT_THAT(res->body,
              HasSubstr("dralens_scrape_duration_seconds_count{format=\"openmetrics\"} 1\n"));
}

TEST_F(MetricsServerTest, ReadinessSaysWhatIsMissing) {
  auto res = Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_THAT(res->body, HasSubstr("waiting for the kubelet"));
  ready_ = absl::OkStatus();
  res = Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  res = Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

// Concurrent scrapers over real connections while another thread observes and adds series.
TEST_F(MetricsServerTest, ConcurrentScrapesWhileMetricsChange) {
  auto& per_claim = prometheus::BuildCounter()
                        .Name("dralens_claim_prepares_total")
                        .Help("Prepares per claim.")
                        .Register(*registry_);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      histogram_->Observe(0.001 * (i % 500), kTrace);
      auto& c = per_claim.Add({{"claim", absl::StrCat("c-", i % 100)}});
      c.Increment();
      if (i % 7 == 0) {
        per_claim.Remove(&c);
      }
    }
  });
  std::atomic<int> good{0};
  std::vector<std::thread> scrapers;
  for (int s = 0; s < 4; ++s) {
    scrapers.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        auto res = Get("/metrics", {{"Accept", kPrometheusAccept}});
        if (res && res->status == 200 && absl::EndsWith(res->body, "# EOF\n") &&
            absl::StrContains(res->body, "# TYPE dralens_prepare_duration_seconds histogram")) {
          ++good;
        }
      }
    });
  }
  for (std::thread& t : scrapers) {
    t.join();
  }
  stop = true;
  writer.join();
  EXPECT_EQ(good.load(), 100);
}

// A role whose start fails right after the metrics server started stops it at once; Stop() must
// return then too (the listen thread may not have reached its accept loop yet). A hang here is
// the failure, caught by the test timeout.
TEST(MetricsServerJsonTest, PrefixEndpointsServeWhatTheLookupFindsAnd404Otherwise) {
  MetricsServer server(std::make_shared<prometheus::Registry>(), [] { return absl::OkStatus(); });
  server.AddJsonEndpoint("/debug/claims", [] { return nlohmann::json{{"claims", 1}}; });
  std::vector<std::string> asked;
  server.AddJsonPrefixEndpoint(
      "/debug/claims/", [&asked](const std::string& rest) -> std::optional<nlohmann::json> {
        asked.push_back(rest);
        if (rest != "team/train") {
          return std::nullopt;
        }
        return nlohmann::json{{"name", "train"}, {"note", "caf\xc3"}};  // a stray byte
      });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  httplib::Client c("127.0.0.1", server.port());
  auto found = c.Get("/debug/claims/team/train");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->status, 200);
  EXPECT_EQ(found->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(nlohmann::json::parse(found->body)["name"], "train");
  auto missing = c.Get("/debug/claims/team/nobody");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(nlohmann::json::parse(missing->body)["error"], "not found");
  // The exact path is still the list.
  EXPECT_EQ(nlohmann::json::parse(c.Get("/debug/claims")->body)["claims"], 1);
  EXPECT_EQ(asked, (std::vector<std::string>{"team/train", "team/nobody"}));
  server.Stop();
}

TEST(MetricsServerStopTest, StopRightAfterStartReturns) {
  auto registry = std::make_shared<prometheus::Registry>();
  for (int i = 0; i < 200; ++i) {
    MetricsServer server(
        registry, [] { return absl::OkStatus(); }, nullptr);
    ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
    server.Stop();
  }
}

}  // namespace
}  // namespace dralens::exporter
