#include "src/telemetry/tracing/otlp_json.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dralens::telemetry {
namespace {

using Json = nlohmann::json;

std::vector<SpanData> TwoSpans() {
  const absl::Time t0 = absl::FromUnixSeconds(1700000000);
  SpanData root;
  root.context.trace_id = *TraceId::FromHex("0af7651916cd43dd8448eb211c80319c");
  root.context.span_id = *SpanId::FromHex("b7ad6b7169203331");
  root.context.trace_flags = kTraceFlagSampled;
  root.name = "NodePrepareResources";
  root.kind = SpanKind::kServer;
  root.start_time = t0;
  root.end_time = t0 + absl::Milliseconds(250);
  root.attributes = {{"k8s.resourceclaim.uid", std::string("uid-1")},
                     {"devices", int64_t{-9007199254740993}},
                     {"ratio", 0.25},
                     {"shared", false}};
  root.events = {{t0 + absl::Milliseconds(100), "checkpoint.written", {{"bytes", int64_t{512}}}}};
  root.status_code = StatusCode::kOk;

  SpanData child;
  child.context.trace_id = root.context.trace_id;
  child.context.span_id = *SpanId::FromHex("00f067aa0ba902b7");
  child.parent_span_id = root.context.span_id;
  child.name = "checkpoint";
  child.kind = SpanKind::kClient;
  child.start_time = t0 + absl::Nanoseconds(1);
  child.end_time = t0 + absl::Milliseconds(10);
  child.status_code = StatusCode::kError;
  child.status_message = "fsync: EIO";
  child.dropped_attributes = 2;
  return {root, child};
}

// Every object key in an OTLP JSON body is lowerCamelCase.
void ExpectCamelCaseKeys(const Json& json, const std::string& where) {
  if (json.is_object()) {
    for (const auto& [key, value] : json.items()) {
      EXPECT_EQ(key.find('_'), std::string::npos) << where << "." << key;
      EXPECT_TRUE(!key.empty() && std::islower(static_cast<unsigned char>(key[0])))
          << where << "." << key;
      ExpectCamelCaseKeys(value, where + "." + key);
    }
  } else if (json.is_array()) {
    for (size_t i = 0; i < json.size(); ++i) {
      ExpectCamelCaseKeys(json[i], where + "[" + std::to_string(i) + "]");
    }
  }
}

TEST(OtlpJsonTest, ExactShape) {
  const Resource resource{
      {{"service.name", std::string("dralens-node")}, {"k8s.node.name", std::string("node-a")}}};
  const std::string body = EncodeTraceRequest(resource, {"dralens", "0.1.0"}, TwoSpans());
  const Json json = Json::parse(body);
  ExpectCamelCaseKeys(json, "$");

  ASSERT_EQ(json.size(), 1u);
  ASSERT_EQ(json["resourceSpans"].size(), 1u);
  const Json& rs = json["resourceSpans"][0];
  EXPECT_EQ(rs["resource"]["attributes"],
            Json::parse(R"([{"key":"service.name","value":{"stringValue":"dralens-node"}},
                            {"key":"k8s.node.name","value":{"stringValue":"node-a"}}])"));
  ASSERT_EQ(rs["scopeSpans"].size(), 1u);
  EXPECT_EQ(rs["scopeSpans"][0]["scope"], Json::parse(R"({"name":"dralens","version":"0.1.0"})"));
  const Json& spans = rs["scopeSpans"][0]["spans"];
  ASSERT_EQ(spans.size(), 2u);

  EXPECT_EQ(spans[0], Json::parse(R"({
    "traceId": "0af7651916cd43dd8448eb211c80319c",
    "spanId": "b7ad6b7169203331",
    "name": "NodePrepareResources",
    "kind": 2,
    "startTimeUnixNano": "1700000000000000000",
    "endTimeUnixNano": "1700000000250000000",
    "attributes": [
      {"key": "k8s.resourceclaim.uid", "value": {"stringValue": "uid-1"}},
      {"key": "devices", "value": {"intValue": "-9007199254740993"}},
      {"key": "ratio", "value": {"doubleValue": 0.25}},
      {"key": "shared", "value": {"boolValue": false}}
    ],
    "events": [{"timeUnixNano": "1700000000100000000", "name": "checkpoint.written",
                "attributes": [{"key": "bytes", "value": {"intValue": "512"}}]}],
    "status": {"code": 1}
  })"))
      << spans[0].dump(2);

  EXPECT_EQ(spans[1], Json::parse(R"({
    "traceId": "0af7651916cd43dd8448eb211c80319c",
    "spanId": "00f067aa0ba902b7",
    "parentSpanId": "b7ad6b7169203331",
    "name": "checkpoint",
    "kind": 3,
    "startTimeUnixNano": "1700000000000000001",
    "endTimeUnixNano": "1700000000010000000",
    "attributes": [],
    "droppedAttributesCount": 2,
    "events": [],
    "status": {"code": 2, "message": "fsync: EIO"}
  })"))
      << spans[1].dump(2);
}

TEST(OtlpJsonTest, LinksCarryTheirIdsAndAttributes) {
  std::vector<SpanData> spans = TwoSpans();
  SpanLink link;
  link.context.trace_id = *TraceId::FromHex("4bf92f3577b34da6a3ce929d0e0e4736");
  link.context.span_id = *SpanId::FromHex("00f067aa0ba902b7");
  link.attributes = {{"why", std::string("carried")}};
  spans[0].links = {link};
  spans[0].dropped_links = 3;
  const Json json = Json::parse(EncodeTraceRequest({}, {"dralens", ""}, spans));
  const Json& encoded = json["resourceSpans"][0]["scopeSpans"][0]["spans"];
  EXPECT_EQ(encoded[0]["links"], Json::parse(R"([{"traceId": "4bf92f3577b34da6a3ce929d0e0e4736",
      "spanId": "00f067aa0ba902b7",
      "attributes": [{"key": "why", "value": {"stringValue": "carried"}}]}])"));
  EXPECT_EQ(encoded[0]["droppedLinksCount"], 3);
  EXPECT_FALSE(encoded[1].contains("links"));  // none recorded: none sent
}

TEST(OtlpJsonTest, ScopeWithoutVersionOmitsIt) {
  const std::string body = EncodeTraceRequest({}, {"dralens", ""}, TwoSpans());
  const Json json = Json::parse(body);
  EXPECT_EQ(json["resourceSpans"][0]["scopeSpans"][0]["scope"],
            Json::parse(R"({"name":"dralens"})"));
}

TEST(OtlpJsonTest, NonFiniteDoublesAreStrings) {
  std::vector<SpanData> spans = TwoSpans();
  spans[0].attributes = {{"nan", std::numeric_limits<double>::quiet_NaN()},
                         {"inf", std::numeric_limits<double>::infinity()},
                         {"ninf", -std::numeric_limits<double>::infinity()}};
  const Json json = Json::parse(EncodeTraceRequest({}, {}, spans));
  const Json& attributes = json["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"];
  EXPECT_EQ(attributes[0]["value"]["doubleValue"], "NaN");
  EXPECT_EQ(attributes[1]["value"]["doubleValue"], "Infinity");
  EXPECT_EQ(attributes[2]["value"]["doubleValue"], "-Infinity");
}

TEST(OtlpJsonTest, InvalidUtf8DoesNotThrow) {
  std::vector<SpanData> spans = TwoSpans();
  spans[0].name = std::string("bad\xff\xfe name");
  std::string body;
  ASSERT_NO_THROW(body = EncodeTraceRequest({}, {}, spans));
  const Json json = Json::parse(body);
  EXPECT_EQ(json["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"],
            "bad\xEF\xBF\xBD\xEF\xBF\xBD name");
}

TEST(OtlpJsonTest, ParsePartialSuccess) {
  PartialSuccess p =
      ParsePartialSuccess(R"({"partialSuccess":{"rejectedSpans":"3","errorMessage":"too old"}})");
  EXPECT_EQ(p.rejected_spans, 3u);
  EXPECT_EQ(p.error_message, "too old");
  EXPECT_EQ(ParsePartialSuccess(R"({"partialSuccess":{"rejectedSpans":4}})").rejected_spans, 4u);
  EXPECT_EQ(ParsePartialSuccess("").rejected_spans, 0u);
  EXPECT_EQ(ParsePartialSuccess("{}").rejected_spans, 0u);
  EXPECT_EQ(ParsePartialSuccess(R"({"partialSuccess":{}})").rejected_spans, 0u);
  EXPECT_EQ(ParsePartialSuccess("not json").rejected_spans, 0u);
  EXPECT_EQ(ParsePartialSuccess(R"({"partialSuccess":{"rejectedSpans":"x"}})").rejected_spans, 0u);
}

}  // namespace
}  // namespace dralens::telemetry
