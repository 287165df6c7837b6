#include "src/telemetry/tracing/otlp_http_exporter.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/telemetry/tracing/batch_span_processor.h"
#include "src/telemetry/tracing/tracer_provider.h"
#include "tests/src/telemetry/tracing/test_receiver.h"

namespace dralens::telemetry {
namespace {

using ::testing::HasSubstr;
using testing::Reply;
using testing::SteppingClock;
using testing::TestReceiver;
using Json = nlohmann::json;

std::vector<SpanData> Spans(int n) {
  std::vector<SpanData> spans(n);
  for (int i = 0; i < n; ++i) {
    spans[i].context.trace_id = TraceIdFromClaimUid("claim");
    SpanId::Bytes id{};
    id[7] = static_cast<uint8_t>(i + 1);
    spans[i].context.span_id = SpanId(id);
    spans[i].name = "span-" + std::to_string(i);
    spans[i].start_time = absl::FromUnixSeconds(1700000000);
    spans[i].end_time = absl::FromUnixSeconds(1700000001);
  }
  return spans;
}

// Holds a bound TCP port that does not listen: connecting to it is refused, and nobody else can
// take the port while the test runs.
class RefusingPort {
 public:
  RefusingPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~RefusingPort() { close(fd_); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1/traces"; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

class OtlpHttpExporterTest : public ::testing::Test {
 protected:
  std::unique_ptr<OtlpHttpExporter> MakeExporter(const std::string& url,
                                                 absl::Duration timeout = absl::Seconds(10)) {
    OtlpHttpExporterOptions options;
    options.url = url;
    options.timeout = timeout;
    options.resource.attributes = {{"service.name", std::string("test")}};
    absl::StatusOr<std::unique_ptr<OtlpHttpExporter>> exporter =
        OtlpHttpExporter::Create(options, stats_, clock_);
    EXPECT_TRUE(exporter.ok()) << exporter.status();
    return exporter.ok() ? *std::move(exporter) : nullptr;
  }

  SteppingClock clock_;
  TracingStats stats_;
  // Declared after the clock and before exporters, so it outlives their connections.
  TestReceiver receiver_{clock_};
};

TEST_F(OtlpHttpExporterTest, PostsJsonToTheTracesPath) {
  auto exporter = MakeExporter(receiver_.traces_url());
  const ExportResult result = exporter->Export(Spans(2), absl::Seconds(30));
  EXPECT_TRUE(result.success);
  EXPECT_EQ(result.rejected_spans, 0u);
  std::vector<testing::ReceivedRequest> requests = receiver_.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "POST");
  EXPECT_EQ(requests[0].path, "/v1/traces");
  EXPECT_EQ(requests[0].Header("Content-Type"), "application/json");
  EXPECT_EQ(requests[0].Header("Content-Encoding"), "");
  const Json body = Json::parse(requests[0].body);
  const Json& spans = body["resourceSpans"][0]["scopeSpans"][0]["spans"];
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[1]["spanId"], "0000000000000002");
  EXPECT_EQ(stats_.requests_success.load(), 1u);
  EXPECT_EQ(clock_.slept(), absl::ZeroDuration());
}

TEST_F(OtlpHttpExporterTest, GzipWhenAsked) {
  OtlpHttpExporterOptions options;
  options.url = receiver_.traces_url();
  options.gzip = true;
  auto exporter = OtlpHttpExporter::Create(options, stats_, clock_);
  ASSERT_TRUE(exporter.ok());
  EXPECT_TRUE((*exporter)->Export(Spans(50), absl::Seconds(30)).success);
  std::vector<testing::ReceivedRequest> requests = receiver_.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].Header("Content-Encoding"), "gzip");
  // httplib's server inflates gzip bodies itself; inflate here if it did not.
  std::string body = requests[0].body;
  if (body.size() >= 2 && body[0] == '\x1f' && body[1] == '\x8b') {
    body = testing::Gunzip(body);
  }
  const Json json = Json::parse(body);
  EXPECT_EQ(json["resourceSpans"][0]["scopeSpans"][0]["spans"].size(), 50u);
  // What went over the wire was the compressed form.
  EXPECT_LT(std::stoul(requests[0].Header("Content-Length")), body.size() / 4);
}

TEST_F(OtlpHttpExporterTest, RetriesOn503ThenSucceeds) {
  receiver_.Script({{.status = 503}, {.status = 503}, {.status = 200}});
  auto exporter = MakeExporter(receiver_.traces_url());
  EXPECT_TRUE(exporter->Export(Spans(1), absl::Seconds(30)).success);
  std::vector<testing::ReceivedRequest> requests = receiver_.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].body, requests[2].body);
  EXPECT_EQ(stats_.requests_retryable_status.load(), 2u);
  EXPECT_EQ(stats_.requests_success.load(), 1u);
  // Exponential backoff with jitter: [100, 200] ms, then [200, 400] ms (clock time, not wall).
  const absl::Duration first = requests[1].arrival - requests[0].arrival;
  const absl::Duration second = requests[2].arrival - requests[1].arrival;
  EXPECT_GE(first, absl::Milliseconds(100));
  EXPECT_LE(first, absl::Milliseconds(200));
  EXPECT_GE(second, absl::Milliseconds(200));
  EXPECT_LE(second, absl::Milliseconds(400));
}

TEST_F(OtlpHttpExporterTest, RetriesExactlyTheRetryableCodes) {
  for (int status : {429, 502, 503, 504}) {
    receiver_.Script({{.status = status}, {.status = 200}});
    const size_t before = receiver_.requests().size();
    auto exporter = MakeExporter(receiver_.traces_url());
    EXPECT_TRUE(exporter->Export(Spans(1), absl::Seconds(30)).success) << status;
    EXPECT_EQ(receiver_.requests().size() - before, 2u) << status;
  }
  EXPECT_EQ(stats_.requests_retryable_status.load(), 4u);
  for (int status : {400, 401, 404, 408, 413, 500, 501}) {
    receiver_.Script({{.status = status}, {.status = 200}});
    const size_t before = receiver_.requests().size();
    auto exporter = MakeExporter(receiver_.traces_url());
    EXPECT_FALSE(exporter->Export(Spans(1), absl::Seconds(30)).success) << status;
    EXPECT_EQ(receiver_.requests().size() - before, 1u) << status;
  }
  EXPECT_EQ(stats_.requests_failed_status.load(), 7u);
}

TEST_F(OtlpHttpExporterTest, HonoursRetryAfter) {
  receiver_.Script({{.status = 429, .headers = {{"Retry-After", "2"}}},
                    {.status = 503, .headers = {{"Retry-After", "1"}}},
                    {.status = 200}});
  auto exporter = MakeExporter(receiver_.traces_url());
  EXPECT_TRUE(exporter->Export(Spans(1), absl::Seconds(30)).success);
  std::vector<testing::ReceivedRequest> requests = receiver_.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[1].arrival - requests[0].arrival, absl::Seconds(2));
  EXPECT_EQ(requests[2].arrival - requests[1].arrival, absl::Seconds(1));
}

TEST_F(OtlpHttpExporterTest, RetryAfterBeyondTheDeadlineGivesUp) {
  receiver_.Script({{.status = 429, .headers = {{"Retry-After", "60"}}}, {.status = 200}});
  auto exporter = MakeExporter(receiver_.traces_url(), absl::Seconds(10));
  EXPECT_FALSE(exporter->Export(Spans(1), absl::Seconds(30)).success);
  EXPECT_EQ(receiver_.requests().size(), 1u);
  EXPECT_EQ(clock_.slept(), absl::ZeroDuration());
}

TEST_F(OtlpHttpExporterTest, BadRequestIsNotRetriedAndIsCounted) {
  receiver_.Script({{.status = 400, .body = R"({"code":3,"message":"bad span"})"}});
  TracingStats& stats = stats_;
  {
    BatchSpanProcessor processor(MakeExporter(receiver_.traces_url()),
                                 {.schedule_delay = absl::Hours(1)}, stats);
    for (SpanData& span : Spans(3)) {
      processor.OnEnd(std::move(span));
    }
    EXPECT_TRUE(processor.ForceFlush(absl::Now() + absl::Seconds(10)));
  }
  EXPECT_EQ(receiver_.requests().size(), 1u);
  EXPECT_EQ(stats.requests_failed_status.load(), 1u);
  EXPECT_EQ(stats.spans_dropped_export_failed.load(), 3u);
  EXPECT_EQ(stats.spans_exported.load(), 0u);
}

TEST_F(OtlpHttpExporterTest, PartialSuccessIsCountedNotRetried) {
  receiver_.Script(
      {{.status = 200,
        .body = R"({"partialSuccess":{"rejectedSpans":"2","errorMessage":"too old"}})"}});
  {
    BatchSpanProcessor processor(MakeExporter(receiver_.traces_url()),
                                 {.schedule_delay = absl::Hours(1)}, stats_);
    for (SpanData& span : Spans(5)) {
      processor.OnEnd(std::move(span));
    }
    EXPECT_TRUE(processor.ForceFlush(absl::Now() + absl::Seconds(10)));
  }
  EXPECT_EQ(receiver_.requests().size(), 1u);
  EXPECT_EQ(stats_.spans_rejected.load(), 2u);
  EXPECT_EQ(stats_.spans_exported.load(), 3u);
  EXPECT_EQ(stats_.requests_success.load(), 1u);
}

TEST_F(OtlpHttpExporterTest, ReceiverDownIsRetriedThenDropped) {
  RefusingPort down;
  {
    BatchSpanProcessor processor(MakeExporter(down.url(), absl::Seconds(3)),
                                 {.schedule_delay = absl::Hours(1)}, stats_);
    // Ending spans only queues them, whatever the exporter is going through.
    for (SpanData& span : Spans(4)) {
      processor.OnEnd(std::move(span));
    }
    EXPECT_TRUE(processor.ForceFlush(absl::Now() + absl::Seconds(10)));
  }
  EXPECT_GE(stats_.requests_connection_error.load(), 2u);
  EXPECT_EQ(stats_.requests_success.load(), 0u);
  EXPECT_EQ(stats_.spans_dropped_export_failed.load(), 4u);
  // Retries waited on the clock and stopped within the 3 s export timeout.
  EXPECT_GT(clock_.slept(), absl::ZeroDuration());
  EXPECT_LT(clock_.slept(), absl::Seconds(3));
}

TEST(OtlpHttpExporterSlowTest, SlowReceiverHitsTheTimeout) {
  TracingStats stats;
  TestReceiver receiver;
  receiver.Hang();
  OtlpHttpExporterOptions options;
  options.url = receiver.traces_url();
  options.timeout = absl::Milliseconds(300);
  auto exporter = OtlpHttpExporter::Create(options, stats);
  ASSERT_TRUE(exporter.ok());
  EXPECT_FALSE((*exporter)->Export(Spans(1), absl::Seconds(30)).success);
  receiver.Release();
  EXPECT_EQ(stats.requests_timeout.load(), 1u);
  EXPECT_EQ(stats.requests_success.load(), 0u);
  EXPECT_EQ(stats.requests_connection_error.load(), 0u);
}

TEST(OtlpHttpExporterSlowTest, ShutdownAbortsARequestInFlight) {
  TracingStats stats;
  TestReceiver receiver;
  receiver.Hang();
  OtlpHttpExporterOptions options;
  options.url = receiver.traces_url();
  options.timeout = absl::Seconds(60);
  auto exporter = OtlpHttpExporter::Create(options, stats);
  ASSERT_TRUE(exporter.ok());
  std::future<ExportResult> result = std::async(
      std::launch::async, [&] { return (*exporter)->Export(Spans(1), absl::Seconds(60)); });
  ASSERT_TRUE(receiver.AwaitRequests(1));
  (*exporter)->Shutdown();
  // Far below the 60 s timeout: only Shutdown() can have ended the export.
  ASSERT_EQ(result.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_FALSE(result.get().success);
  receiver.Release();
  EXPECT_FALSE((*exporter)->Export(Spans(1), absl::Seconds(1)).success);
  EXPECT_EQ(receiver.requests().size(), 1u);
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dralens-otlp-XXXXXX").string();
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(OtlpHttpExporterTlsTest, HttpsWithTheConfiguredCa) {
  TempDir dir;
  const testing::TestPki pki = testing::TestPki::Make(dir.path());
  TracingStats stats;
  TestReceiver receiver(common::RealClock(), std::make_unique<httplib::SSLServer>(
                                                 pki.server_crt.c_str(), pki.server_key.c_str()));
  OtlpHttpExporterOptions options;
  options.url = receiver.traces_url();
  ASSERT_THAT(options.url, ::testing::StartsWith("https://"));
  options.ca_file = pki.ca_crt;
  auto exporter = OtlpHttpExporter::Create(options, stats);
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  EXPECT_TRUE((*exporter)->Export(Spans(2), absl::Seconds(10)).success);
  std::vector<testing::ReceivedRequest> requests = receiver.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(Json::parse(requests[0].body)["resourceSpans"][0]["scopeSpans"][0]["spans"].size(), 2u);

  // A collector signed by another CA fails the handshake once, without retries.
  options.ca_file = pki.other_ca_crt;
  auto untrusting = OtlpHttpExporter::Create(options, stats);
  ASSERT_TRUE(untrusting.ok());
  EXPECT_FALSE((*untrusting)->Export(Spans(1), absl::Seconds(10)).success);
  EXPECT_EQ(stats.requests_connection_error.load(), 1u);
  EXPECT_EQ(receiver.requests().size(), 1u);
}

TEST(ParseHttpUrlTest, Valid) {
  absl::StatusOr<HttpUrl> url = ParseHttpUrl("http://collector:4318/v1/traces");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->scheme, "http");
  EXPECT_EQ(url->host, "collector");
  EXPECT_EQ(url->port, 4318);
  EXPECT_EQ(url->path, "/v1/traces");

  url = ParseHttpUrl("HTTPS://otel.example.com");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->scheme, "https");
  EXPECT_EQ(url->port, 443);
  EXPECT_EQ(url->path, "/");

  url = ParseHttpUrl("http://[::1]:4318/x?y=1");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->port, 4318);
  EXPECT_EQ(url->path, "/x?y=1");

  url = ParseHttpUrl("http://host?q");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->port, 80);
  EXPECT_EQ(url->path, "/?q");
}

TEST(ParseHttpUrlTest, Invalid) {
  for (const char* bad :
       {"", "collector:4318", "ftp://host/", "http://", "http://:4318/", "http://host:0/",
        "http://host:65536/", "http://host:12a/", "http://host:/", "http://user:pw@host/",
        "http://host/#frag", "http://[::1/"}) {
    EXPECT_FALSE(ParseHttpUrl(bad).ok()) << bad;
  }
}

TEST(OtlpHttpExporterCreateTest, HttpsIsSupportedInThisBuild) {
  TracingStats stats;
  OtlpHttpExporterOptions options;
  options.url = "https://127.0.0.1:1/v1/traces";
  absl::StatusOr<std::unique_ptr<OtlpHttpExporter>> exporter =
      OtlpHttpExporter::Create(options, stats);
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  EXPECT_TRUE(exporter.ok()) << exporter.status();
#else
  EXPECT_FALSE(exporter.ok());
#endif
  options.url = "collector:4318";
  exporter = OtlpHttpExporter::Create(options, stats);
  ASSERT_FALSE(exporter.ok());
  EXPECT_THAT(exporter.status().message(), HasSubstr("OTLP traces endpoint"));
}

// The whole pipeline from environment variables to a receiver: the endpoint gets /v1/traces,
// headers and the service name arrive, and the spans carry the tracer's ids and times.
TEST(TracingEndToEndTest, FromEnvironmentToReceiver) {
  TestReceiver receiver;
  const std::map<std::string, std::string> env = {
      {"OTEL_EXPORTER_OTLP_ENDPOINT", receiver.base_url() + "/"},
      {"OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20abc, x-tenant = t1"},
      {"OTEL_SERVICE_NAME", "dralens-node"},
      {"OTEL_RESOURCE_ATTRIBUTES", "service.name=ignored,k8s.node.name=node%2Da"},
      {"OTEL_BSP_SCHEDULE_DELAY", "3600000"},
  };
  absl::StatusOr<TracingConfig> config = TracingConfigFromEnv(
      [&](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      "dralens");
  ASSERT_TRUE(config.ok()) << config.status();
  common::FakeClock clock(absl::FromUnixSeconds(1700000000));
  absl::StatusOr<std::unique_ptr<TracerProvider>> provider =
      TracerProvider::Create(*config, "0.1.0", clock);
  ASSERT_TRUE(provider.ok()) << provider.status();
  Tracer& tracer = (*provider)->tracer();

  const TraceId claim_trace = TraceIdFromClaimUid("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
  SpanId root_id;
  {
    SpanPtr root = tracer.StartSpan("NodePrepareResources",
                                    {.kind = SpanKind::kServer, .trace_id = claim_trace});
    root_id = root->context().span_id;
    root->SetAttribute("k8s.resourceclaim.uid", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
    root->SetAttribute("devices", 2);
    SpanPtr child = root->StartChild("checkpoint");
    clock.Advance(absl::Milliseconds(250));
    child->AddEvent("checkpoint.written");
  }
  ASSERT_TRUE((*provider)->Shutdown(absl::Now() + absl::Seconds(10)));

  std::vector<testing::ReceivedRequest> requests = receiver.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].path, "/v1/traces");
  EXPECT_EQ(requests[0].Header("authorization"), "Bearer abc");
  EXPECT_EQ(requests[0].Header("x-tenant"), "t1");
  EXPECT_EQ(requests[0].Header("User-Agent"), "dralens/0.1.0");
  const Json body = Json::parse(requests[0].body);
  const Json& rs = body["resourceSpans"][0];
  EXPECT_EQ(rs["resource"]["attributes"][0],
            Json::parse(R"({"key":"service.name","value":{"stringValue":"dralens-node"}})"));
  EXPECT_EQ(rs["resource"]["attributes"][1],
            Json::parse(R"({"key":"k8s.node.name","value":{"stringValue":"node-a"}})"));
  EXPECT_EQ(rs["scopeSpans"][0]["scope"]["name"], "dralens");
  EXPECT_EQ(rs["scopeSpans"][0]["scope"]["version"], "0.1.0");
  const Json& spans = rs["scopeSpans"][0]["spans"];
  ASSERT_EQ(spans.size(), 2u);
  // The child ended first.
  EXPECT_EQ(spans[0]["name"], "checkpoint");
  EXPECT_EQ(spans[0]["kind"], 1);
  EXPECT_EQ(spans[0]["traceId"], claim_trace.ToHex());
  EXPECT_EQ(spans[0]["parentSpanId"], root_id.ToHex());
  EXPECT_EQ(spans[0]["events"][0]["timeUnixNano"], "1700000000250000000");
  EXPECT_EQ(spans[1]["name"], "NodePrepareResources");
  EXPECT_EQ(spans[1]["kind"], 2);
  EXPECT_EQ(spans[1]["traceId"], "117d33e025ab6cb25d8ec1628ac7199c");
  EXPECT_EQ(spans[1]["spanId"], root_id.ToHex());
  EXPECT_FALSE(spans[1].contains("parentSpanId"));
  EXPECT_EQ(spans[1]["startTimeUnixNano"], "1700000000000000000");
  EXPECT_EQ(spans[1]["endTimeUnixNano"], "1700000000250000000");
  EXPECT_EQ(spans[1]["attributes"][1],
            Json::parse(R"({"key":"devices","value":{"intValue":"2"}})"));
  EXPECT_EQ((*provider)->stats().spans_exported.load(), 2u);
}

}  // namespace
}  // namespace dralens::telemetry
