#include "src/telemetry/tracing/trace_context.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/telemetry/tracing/sha256.h"

namespace dralens::telemetry {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";
// Version 00: "00-" + 32 + "-" + 16 + "-" + 2.
constexpr size_t kTraceparentSize = 55;

int LowerHexValue(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  return -1;
}

template <size_t N>
bool ParseLowerHex(absl::string_view hex, std::array<uint8_t, N>& out) {
  if (hex.size() != 2 * N) {
    return false;
  }
  for (size_t i = 0; i < N; ++i) {
    const int high = LowerHexValue(hex[2 * i]);
    const int low = LowerHexValue(hex[2 * i + 1]);
    if (high < 0 || low < 0) {
      return false;
    }
    out[i] = static_cast<uint8_t>(high << 4 | low);
  }
  return true;
}

template <size_t N>
std::string ToLowerHex(const std::array<uint8_t, N>& bytes) {
  std::string out(2 * N, '0');
  for (size_t i = 0; i < N; ++i) {
    out[2 * i] = kHexDigits[bytes[i] >> 4];
    out[2 * i + 1] = kHexDigits[bytes[i] & 0xF];
  }
  return out;
}

template <size_t N>
bool AllZero(const std::array<uint8_t, N>& bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
}

}  // namespace

std::optional<TraceId> TraceId::FromHex(absl::string_view hex) {
  Bytes bytes;
  if (!ParseLowerHex(hex, bytes)) {
    return std::nullopt;
  }
  return TraceId(bytes);
}

bool TraceId::IsValid() const { return !AllZero(bytes_); }

std::string TraceId::ToHex() const { return ToLowerHex(bytes_); }

std::optional<SpanId> SpanId::FromHex(absl::string_view hex) {
  Bytes bytes;
  if (!ParseLowerHex(hex, bytes)) {
    return std::nullopt;
  }
  return SpanId(bytes);
}

bool SpanId::IsValid() const { return !AllZero(bytes_); }

std::string SpanId::ToHex() const { return ToLowerHex(bytes_); }

std::optional<SpanContext> ParseTraceparent(absl::string_view header) {
  if (header.size() < kTraceparentSize) {
    return std::nullopt;
  }
  std::array<uint8_t, 1> version;
  if (!ParseLowerHex(header.substr(0, 2), version) || version[0] == 0xff) {
    return std::nullopt;
  }
  // Version 00 has exactly four fields; a later version may append fields after a dash, and
  // W3C asks parsers to read the version-00 prefix of it.
  if (version[0] == 0x00 ? header.size() != kTraceparentSize
                         : header.size() > kTraceparentSize && header[kTraceparentSize] != '-') {
    return std::nullopt;
  }
  if (header[2] != '-' || header[35] != '-' || header[52] != '-') {
    return std::nullopt;
  }
  SpanContext context;
  std::optional<TraceId> trace_id = TraceId::FromHex(header.substr(3, 32));
  std::optional<SpanId> span_id = SpanId::FromHex(header.substr(36, 16));
  std::array<uint8_t, 1> flags;
  if (!trace_id || !span_id || !ParseLowerHex(header.substr(53, 2), flags)) {
    return std::nullopt;
  }
  context.trace_id = *trace_id;
  context.span_id = *span_id;
  context.trace_flags = flags[0];
  context.remote = true;
  if (!context.IsValid()) {
    return std::nullopt;
  }
  return context;
}

std::string FormatTraceparent(const SpanContext& context) {
  return absl::StrCat("00-", context.trace_id.ToHex(), "-", context.span_id.ToHex(), "-",
                      ToLowerHex(std::array<uint8_t, 1>{context.trace_flags}));
}

TraceId TraceIdFromClaimUid(absl::string_view uid) {
  const Sha256Digest digest = Sha256(absl::StrCat("dralens.claim/", uid));
  TraceId::Bytes bytes;
  std::copy_n(digest.begin(), bytes.size(), bytes.begin());
  if (AllZero(bytes)) {
    bytes.back() = 0x01;
  }
  return TraceId(bytes);
}

TraceId RandomIdGenerator::NewTraceId() {
  absl::MutexLock lock(&mu_);
  TraceId::Bytes bytes;
  do {
    for (uint8_t& b : bytes) {
      b = absl::Uniform<uint8_t>(bitgen_);
    }
  } while (AllZero(bytes));
  return TraceId(bytes);
}

SpanId RandomIdGenerator::NewSpanId() {
  absl::MutexLock lock(&mu_);
  SpanId::Bytes bytes;
  do {
    for (uint8_t& b : bytes) {
      b = absl::Uniform<uint8_t>(bitgen_);
    }
  } while (AllZero(bytes));
  return SpanId(bytes);
}

}  // namespace dralens::telemetry
