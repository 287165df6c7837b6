// OTLP/HTTP JSON encoding of spans: an ExportTraceServiceRequest in proto3 JSON with OTLP's
// deviations (hex ids, integer enums, 64-bit integers as decimal strings, lowerCamelCase keys).
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/telemetry/tracing/span_data.h"

namespace dralens::telemetry {

// Describes the process; carries `service.name`.
struct Resource {
  Attributes attributes{};
};

struct InstrumentationScope {
  std::string name = "dralens";
  std::string version{};
};

// The request body for `spans`, all under one resource and one scope:
//   {"resourceSpans":[{"resource":{...},"scopeSpans":[{"scope":{...},"spans":[...]}]}]}
// Root spans carry no `parentSpanId`; `links` only when the span has some; NaN and
// infinite doubles are the strings "NaN", "Infinity", "-Infinity" as proto3 JSON requires;
// invalid UTF-8 in strings is replaced by U+FFFD. Precondition: `spans` is not empty, as OTLP
// asks for no empty envelopes. Pure and thread-safe.
std::string EncodeTraceRequest(const Resource& resource, const InstrumentationScope& scope,
                               absl::Span<const SpanData> spans);

// What a 2xx response body says about refused spans.
struct PartialSuccess {
  uint64_t rejected_spans = 0;
  std::string error_message;
};

// Reads `partialSuccess` from an ExportTraceServiceResponse body. An empty or unparsable body,
// or one without the field, means full success (receivers may answer with an empty body).
// `rejectedSpans` is accepted both as an int64 string (proto3 JSON) and as a number.
PartialSuccess ParsePartialSuccess(absl::string_view body);

}  // namespace dralens::telemetry
