#include "src/telemetry/tracing/otlp_json.h"

#include <cmath>
#include <type_traits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace dralens::telemetry {
namespace {

using Json = nlohmann::ordered_json;

std::string UnixNanos(absl::Time time) {
  const int64_t nanos = absl::ToUnixNanos(time);
  return absl::StrCat(nanos < 0 ? 0 : nanos);
}

Json EncodeValue(const AttributeValue& value) {
  return std::visit(
      [](const auto& v) -> Json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return Json{{"stringValue", v}};
        } else if constexpr (std::is_same_v<T, bool>) {
          return Json{{"boolValue", v}};
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return Json{{"intValue", absl::StrCat(v)}};
        } else {
          if (std::isnan(v)) {
            return Json{{"doubleValue", "NaN"}};
          }
          if (std::isinf(v)) {
            return Json{{"doubleValue", v > 0 ? "Infinity" : "-Infinity"}};
          }
          return Json{{"doubleValue", v}};
        }
      },
      value);
}

Json EncodeAttributes(const Attributes& attributes) {
  Json out = Json::array();
  for (const Attribute& attribute : attributes) {
    out.push_back(Json{{"key", attribute.key}, {"value", EncodeValue(attribute.value)}});
  }
  return out;
}

Json EncodeSpan(const SpanData& span) {
  Json out;
  out["traceId"] = span.context.trace_id.ToHex();
  out["spanId"] = span.context.span_id.ToHex();
  if (span.parent_span_id.IsValid()) {
    out["parentSpanId"] = span.parent_span_id.ToHex();
  }
  out["name"] = span.name;
  out["kind"] = static_cast<int>(span.kind);
  out["startTimeUnixNano"] = UnixNanos(span.start_time);
  out["endTimeUnixNano"] = UnixNanos(span.end_time);
  out["attributes"] = EncodeAttributes(span.attributes);
  if (span.dropped_attributes > 0) {
    out["droppedAttributesCount"] = span.dropped_attributes;
  }
  Json events = Json::array();
  for (const SpanEvent& event : span.events) {
    events.push_back(Json{{"timeUnixNano", UnixNanos(event.time)},
                          {"name", event.name},
                          {"attributes", EncodeAttributes(event.attributes)}});
  }
  out["events"] = std::move(events);
  if (span.dropped_events > 0) {
    out["droppedEventsCount"] = span.dropped_events;
  }
  if (!span.links.empty()) {
    Json links = Json::array();
    for (const SpanLink& link : span.links) {
      links.push_back(Json{{"traceId", link.context.trace_id.ToHex()},
                           {"spanId", link.context.span_id.ToHex()},
                           {"attributes", EncodeAttributes(link.attributes)}});
    }
    out["links"] = std::move(links);
  }
  if (span.dropped_links > 0) {
    out["droppedLinksCount"] = span.dropped_links;
  }
  Json status{{"code", static_cast<int>(span.status_code)}};
  if (span.status_code == StatusCode::kError && !span.status_message.empty()) {
    status["message"] = span.status_message;
  }
  out["status"] = std::move(status);
  return out;
}

}  // namespace

std::string EncodeTraceRequest(const Resource& resource, const InstrumentationScope& scope,
                               absl::Span<const SpanData> spans) {
  Json encoded_spans = Json::array();
  for (const SpanData& span : spans) {
    encoded_spans.push_back(EncodeSpan(span));
  }
  Json encoded_scope{{"name", scope.name}};
  if (!scope.version.empty()) {
    encoded_scope["version"] = scope.version;
  }
  Json request{{"resourceSpans",
                Json::array({Json{
                    {"resource", Json{{"attributes", EncodeAttributes(resource.attributes)}}},
                    {"scopeSpans", Json::array({Json{{"scope", std::move(encoded_scope)},
                                                     {"spans", std::move(encoded_spans)}}})}}})}};
  // Replacing bad UTF-8 keeps one odd attribute from failing (throwing on) the whole batch.
  return request.dump(-1, ' ', false, Json::error_handler_t::replace);
}

PartialSuccess ParsePartialSuccess(absl::string_view body) {
  PartialSuccess result;
  const Json parsed = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) {
    return result;
  }
  auto partial = parsed.find("partialSuccess");
  if (partial == parsed.end() || !partial->is_object()) {
    return result;
  }
  auto rejected = partial->find("rejectedSpans");
  if (rejected != partial->end()) {
    if (rejected->is_string()) {
      uint64_t n = 0;
      if (absl::SimpleAtoi(rejected->get_ref<const std::string&>(), &n)) {
        result.rejected_spans = n;
      }
    } else if (rejected->is_number_unsigned()) {
      result.rejected_spans = rejected->get<uint64_t>();
    } else if (rejected->is_number_integer() && rejected->get<int64_t>() > 0) {
      result.rejected_spans = static_cast<uint64_t>(rejected->get<int64_t>());
    }
  }
  auto message = partial->find("errorMessage");
  if (message != partial->end() && message->is_string()) {
    result.error_message = message->get<std::string>();
  }
  return result;
}

}  // namespace dralens::telemetry
