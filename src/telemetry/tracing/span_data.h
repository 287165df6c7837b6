// The value types of a finished span: what the tracer hands to processors and exporters.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/time/time.h"
#include "src/telemetry/tracing/trace_context.h"

namespace dralens::telemetry {

// The numeric values are OTLP's `Span.SpanKind`.
enum class SpanKind : int {
  kInternal = 1,
  kServer = 2,
  kClient = 3,
  kProducer = 4,
  kConsumer = 5,
};

// The numeric values are OTLP's `Status.StatusCode`.
enum class StatusCode : int {
  kUnset = 0,
  kOk = 1,
  kError = 2,
};

// A string literal or std::string selects std::string, not bool (C++20 converting-constructor
// rules); an `int` selects int64_t. absl::string_view (not std::string_view in this build) and
// unsigned 64-bit values must be converted by the caller.
using AttributeValue = std::variant<std::string, int64_t, double, bool>;

struct Attribute {
  std::string key;
  AttributeValue value;

  friend bool operator==(const Attribute&, const Attribute&) = default;
};
using Attributes = std::vector<Attribute>;

struct SpanEvent {
  absl::Time time;
  std::string name;
  Attributes attributes;
};

// A pointer from one span to another span, usually in another trace: OTLP `Span.Link`.
struct SpanLink {
  SpanContext context;
  Attributes attributes;
};

// Per-span caps, as the OTel SDK defaults: a runaway caller cannot grow a span without bound.
inline constexpr size_t kMaxSpanAttributes = 128;
inline constexpr size_t kMaxSpanEvents = 128;
inline constexpr size_t kMaxSpanLinks = 128;

struct SpanData {
  SpanContext context;
  // Invalid for a root span.
  SpanId parent_span_id;
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  absl::Time start_time;
  absl::Time end_time;
  Attributes attributes;
  std::vector<SpanEvent> events;
  std::vector<SpanLink> links;
  StatusCode status_code = StatusCode::kUnset;
  // Only meaningful with kError.
  std::string status_message;
  uint32_t dropped_attributes = 0;
  uint32_t dropped_events = 0;
  uint32_t dropped_links = 0;
};

}  // namespace dralens::telemetry
