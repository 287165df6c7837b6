#include "src/telemetry/tracing/tracing_config.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::telemetry {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

class FakeEnv {
 public:
  FakeEnv(std::initializer_list<std::pair<const std::string, std::string>> vars) : vars_(vars) {}
  GetEnvFunction Function() const {
    return [this](const char* name) -> const char* {
      auto it = vars_.find(name);
      return it == vars_.end() ? nullptr : it->second.c_str();
    };
  }

 private:
  std::map<std::string, std::string> vars_;
};

absl::StatusOr<TracingConfig> Load(
    std::initializer_list<std::pair<const std::string, std::string>> vars) {
  FakeEnv env(vars);
  return TracingConfigFromEnv(env.Function(), "dralens");
}

// Loads with a valid endpoint plus `vars`; expects an error that names `variable`.
void ExpectError(std::initializer_list<std::pair<const std::string, std::string>> vars,
                 const std::string& variable) {
  std::map<std::string, std::string> all(vars);
  all.emplace("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
  GetEnvFunction getenv = [&all](const char* name) -> const char* {
    auto it = all.find(name);
    return it == all.end() ? nullptr : it->second.c_str();
  };
  absl::StatusOr<TracingConfig> config = TracingConfigFromEnv(getenv, "dralens");
  ASSERT_FALSE(config.ok()) << variable;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr(variable));
}

TEST(TracingConfigTest, NoEndpointMeansDisabled) {
  absl::StatusOr<TracingConfig> config = Load({});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->enabled);
  EXPECT_THAT(config->disabled_reason, HasSubstr("OTEL_EXPORTER_OTLP_ENDPOINT"));
}

TEST(TracingConfigTest, SdkDisabledWinsAndSkipsTheRest) {
  absl::StatusOr<TracingConfig> config = Load({{"OTEL_SDK_DISABLED", "TRUE"},
                                               {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"},
                                               {"OTEL_TRACES_SAMPLER", "bogus"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->enabled);
  EXPECT_EQ(config->disabled_reason, "OTEL_SDK_DISABLED=true");

  config = Load({{"OTEL_SDK_DISABLED", "false"}, {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}});
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(config->enabled);
  ExpectError({{"OTEL_SDK_DISABLED", "yes"}}, "OTEL_SDK_DISABLED");
}

TEST(TracingConfigTest, Defaults) {
  absl::StatusOr<TracingConfig> config = Load({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->enabled);
  EXPECT_EQ(config->traces_url, "http://c:4318/v1/traces");
  EXPECT_TRUE(config->headers.empty());
  EXPECT_EQ(config->export_timeout, absl::Seconds(10));
  EXPECT_FALSE(config->gzip);
  ASSERT_EQ(config->resource_attributes.size(), 1u);
  EXPECT_EQ(config->resource_attributes[0], (Attribute{"service.name", std::string("dralens")}));
  EXPECT_EQ(config->sampler.kind, SamplerKind::kParentBasedAlwaysOn);
  EXPECT_EQ(config->batch.max_queue_size, 2048u);
  EXPECT_EQ(config->batch.schedule_delay, absl::Milliseconds(5000));
  EXPECT_EQ(config->batch.max_export_batch_size, 512u);
  EXPECT_EQ(config->batch.export_timeout, absl::Milliseconds(30000));
  EXPECT_THAT(config->propagators, ElementsAre("tracecontext", "baggage"));
}

TEST(TracingConfigTest, Endpoints) {
  const std::pair<std::string, std::string> kBase[] = {
      {"http://c:4318", "http://c:4318/v1/traces"},
      {"http://c:4318/", "http://c:4318/v1/traces"},
      {"https://c/otlp//", "https://c/otlp/v1/traces"},
      {"http://[::1]:4318", "http://[::1]:4318/v1/traces"},
  };
  for (const auto& [base, want] : kBase) {
    absl::StatusOr<TracingConfig> config = Load({{"OTEL_EXPORTER_OTLP_ENDPOINT", base}});
    ASSERT_TRUE(config.ok()) << base << ": " << config.status();
    EXPECT_EQ(config->traces_url, want) << base;
  }
  // The per-signal URL is used as is and wins.
  absl::StatusOr<TracingConfig> config =
      Load({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318"},
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4318/custom/path"}});
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->traces_url, "http://traces:4318/custom/path");
  config = Load({{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4318"}});
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->traces_url, "http://traces:4318");

  ExpectError({{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318"}},
              "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  absl::StatusOr<TracingConfig> bad = Load({{"OTEL_EXPORTER_OTLP_ENDPOINT", "grpc://c:4317"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("OTEL_EXPORTER_OTLP_ENDPOINT"));
  EXPECT_THAT(bad.status().message(), HasSubstr("http://"));
  bad = Load({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/?x=1"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("OTEL_EXPORTER_OTLP_ENDPOINT"));
}

TEST(TracingConfigTest, Headers) {
  absl::StatusOr<TracingConfig> config = Load(
      {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"},
       {"OTEL_EXPORTER_OTLP_HEADERS", " api-key = s%3Dcret ,X-Scope=a,,Authorization=Basic%20x"},
       {"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "authorization=Bearer%20t"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->headers, ElementsAre(Pair("api-key", "s=cret"), Pair("X-Scope", "a"),
                                           Pair("Authorization", "Bearer t")));

  ExpectError({{"OTEL_EXPORTER_OTLP_HEADERS", "novalue"}}, "OTEL_EXPORTER_OTLP_HEADERS");
  ExpectError({{"OTEL_EXPORTER_OTLP_HEADERS", "=v"}}, "OTEL_EXPORTER_OTLP_HEADERS");
  ExpectError({{"OTEL_EXPORTER_OTLP_HEADERS", "k=%zz"}}, "OTEL_EXPORTER_OTLP_HEADERS");
  ExpectError({{"OTEL_EXPORTER_OTLP_HEADERS", "bad name=v"}}, "OTEL_EXPORTER_OTLP_HEADERS");
  ExpectError({{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "k=a%0D%0AInjected: 1"}},
              "OTEL_EXPORTER_OTLP_TRACES_HEADERS");
}

TEST(TracingConfigTest, TimeoutCompressionProtocol) {
  absl::StatusOr<TracingConfig> config = Load({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"},
                                               {"OTEL_EXPORTER_OTLP_TIMEOUT", "2500"},
                                               {"OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"},
                                               {"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->export_timeout, absl::Milliseconds(2500));
  EXPECT_TRUE(config->gzip);

  config = Load({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"},
                 {"OTEL_EXPORTER_OTLP_TIMEOUT", "2500"},
                 {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "700"},
                 {"OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"},
                 {"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "none"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->export_timeout, absl::Milliseconds(700));
  EXPECT_FALSE(config->gzip);

  for (const char* bad : {"0", "-5", "1.5", "10s", "99999999999"}) {
    ExpectError({{"OTEL_EXPORTER_OTLP_TIMEOUT", bad}}, "OTEL_EXPORTER_OTLP_TIMEOUT");
  }
  ExpectError({{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "x"}}, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT");
  ExpectError({{"OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"}}, "OTEL_EXPORTER_OTLP_COMPRESSION");
  ExpectError({{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}}, "OTEL_EXPORTER_OTLP_PROTOCOL");
  ExpectError({{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"}},
              "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL");
}

TEST(TracingConfigTest, ResourceAndServiceName) {
  absl::StatusOr<TracingConfig> config = Load(
      {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"},
       {"OTEL_RESOURCE_ATTRIBUTES",
        "k8s.node.name=node%20a,service.name=from-attrs,k8s.cluster.name=c1,k8s.node.name=b"}});
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->resource_attributes.size(), 3u);
  EXPECT_EQ(config->resource_attributes[0], (Attribute{"service.name", std::string("from-attrs")}));
  EXPECT_EQ(config->resource_attributes[1], (Attribute{"k8s.node.name", std::string("b")}));
  EXPECT_EQ(config->resource_attributes[2], (Attribute{"k8s.cluster.name", std::string("c1")}));

  config = Load({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"},
                 {"OTEL_SERVICE_NAME", "dralens-node"},
                 {"OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attrs"}});
  ASSERT_TRUE(config.ok());
  ASSERT_EQ(config->resource_attributes.size(), 1u);
  EXPECT_EQ(config->resource_attributes[0],
            (Attribute{"service.name", std::string("dralens-node")}));

  ExpectError({{"OTEL_RESOURCE_ATTRIBUTES", "a=1,b"}}, "OTEL_RESOURCE_ATTRIBUTES");
  ExpectError({{"OTEL_RESOURCE_ATTRIBUTES", "a=%4"}}, "OTEL_RESOURCE_ATTRIBUTES");
}

TEST(TracingConfigTest, SamplerAndPropagators) {
  absl::StatusOr<TracingConfig> config = Load({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"},
                                               {"OTEL_TRACES_SAMPLER", "parentbased_traceidratio"},
                                               {"OTEL_TRACES_SAMPLER_ARG", "0.1"},
                                               {"OTEL_PROPAGATORS", "tracecontext"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->sampler.kind, SamplerKind::kParentBasedTraceIdRatio);
  EXPECT_DOUBLE_EQ(config->sampler.ratio, 0.1);
  EXPECT_THAT(config->propagators, ElementsAre("tracecontext"));

  config = Load({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, {"OTEL_PROPAGATORS", "none"}});
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(config->propagators.empty());

  ExpectError({{"OTEL_TRACES_SAMPLER", "probabilistic"}}, "OTEL_TRACES_SAMPLER");
  ExpectError({{"OTEL_TRACES_SAMPLER", "traceidratio"}, {"OTEL_TRACES_SAMPLER_ARG", "2"}},
              "OTEL_TRACES_SAMPLER_ARG");
  ExpectError({{"OTEL_PROPAGATORS", "tracecontext,b3"}}, "OTEL_PROPAGATORS");
  ExpectError({{"OTEL_PROPAGATORS", "none,tracecontext"}}, "OTEL_PROPAGATORS");
}

TEST(TracingConfigTest, BatchProcessor) {
  absl::StatusOr<TracingConfig> config = Load({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"},
                                               {"OTEL_BSP_MAX_QUEUE_SIZE", "100"},
                                               {"OTEL_BSP_SCHEDULE_DELAY", "250"},
                                               {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "10"},
                                               {"OTEL_BSP_EXPORT_TIMEOUT", "1000"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->batch.max_queue_size, 100u);
  EXPECT_EQ(config->batch.schedule_delay, absl::Milliseconds(250));
  EXPECT_EQ(config->batch.max_export_batch_size, 10u);
  EXPECT_EQ(config->batch.export_timeout, absl::Seconds(1));

  for (const char* name : {"OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_SCHEDULE_DELAY",
                           "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "OTEL_BSP_EXPORT_TIMEOUT"}) {
    for (const char* bad : {"0", "-1", "many", "1e3"}) {
      ExpectError({{name, bad}}, name);
    }
  }
  // A batch may not exceed the queue.
  ExpectError({{"OTEL_BSP_MAX_QUEUE_SIZE", "100"}, {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"}},
              "OTEL_BSP_MAX_EXPORT_BATCH_SIZE");
}

TEST(TracingConfigTest, TlsFiles) {
  const std::string readable = std::string(DRALENS_SOURCE_DIR) + "/CMakeLists.txt";
  absl::StatusOr<TracingConfig> config = Load({{"OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318"},
                                               {"OTEL_EXPORTER_OTLP_CERTIFICATE", readable},
                                               {"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", readable},
                                               {"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", readable}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->ca_file, readable);
  EXPECT_EQ(config->client_cert_file, readable);
  EXPECT_EQ(config->client_key_file, readable);

  ExpectError({{"OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"}},
              "OTEL_EXPORTER_OTLP_CERTIFICATE");
  ExpectError({{"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "/nonexistent/key.pem"}},
              "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY");
  ExpectError({{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", readable}},
              "OTEL_EXPORTER_OTLP_CLIENT_KEY");
}

TEST(PercentDecodeTest, Cases) {
  EXPECT_EQ(*PercentDecode("a%20b%2C%3d%3D"), "a b,==");
  EXPECT_EQ(*PercentDecode("plain"), "plain");
  EXPECT_EQ(*PercentDecode(""), "");
  EXPECT_FALSE(PercentDecode("%").ok());
  EXPECT_FALSE(PercentDecode("%2").ok());
  EXPECT_FALSE(PercentDecode("%g0").ok());
  EXPECT_FALSE(PercentDecode("abc%").ok());
}

TEST(ParseKeyValueListTest, Cases) {
  absl::StatusOr<HeaderList> list = ParseKeyValueList("a=1, b = two ,c=,d=x=y", "VAR");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_THAT(*list,
              ElementsAre(Pair("a", "1"), Pair("b", "two"), Pair("c", ""), Pair("d", "x=y")));
  EXPECT_TRUE(ParseKeyValueList("", "VAR")->empty());
  absl::StatusOr<HeaderList> bad = ParseKeyValueList("a", "VAR");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("VAR"));
  EXPECT_THAT(bad.status().message(), HasSubstr("key=value"));
}

}  // namespace
}  // namespace dralens::telemetry
