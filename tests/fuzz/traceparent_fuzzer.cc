// Fuzzes the W3C traceparent parser (src/telemetry/tracing/trace_context.h): an accepted header
// has valid ids, is marked remote, and formats back to a header that parses to the same
// context; a version-00 header of 55 characters formats back to itself.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "src/telemetry/tracing/trace_context.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using dralens::telemetry::SpanContext;
  absl::string_view header(reinterpret_cast<const char*>(data), size);
  std::optional<SpanContext> context = dralens::telemetry::ParseTraceparent(header);
  if (!context.has_value()) {
    return 0;
  }
  FUZZ_CHECK(context->IsValid(), "an accepted header has valid ids");
  FUZZ_CHECK(context->remote, "an accepted header is remote");
  std::string formatted = dralens::telemetry::FormatTraceparent(*context);
  if (header.size() == 55 && header.substr(0, 2) == "00") {
    FUZZ_CHECK(formatted == header, "a version-00 header formats back to itself");
  }
  std::optional<SpanContext> again = dralens::telemetry::ParseTraceparent(formatted);
  FUZZ_CHECK(again.has_value() && *again == *context, "the formatted header parses back");
  FUZZ_CHECK(dralens::telemetry::TraceId::FromHex(context->trace_id.ToHex()) == context->trace_id,
             "trace id hex round-trips");
  return 0;
}
