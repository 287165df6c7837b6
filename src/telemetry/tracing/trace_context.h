// Trace and span ids, the span context that travels between spans and processes, and the W3C
// `traceparent` header (Trace Context Level 1, https://www.w3.org/TR/trace-context/).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace dralens::telemetry {

// A 16-byte trace id. The default value (all zeros) is the invalid id.
class TraceId {
 public:
  static constexpr size_t kSize = 16;
  using Bytes = std::array<uint8_t, kSize>;

  constexpr TraceId() = default;
  constexpr explicit TraceId(const Bytes& bytes) : bytes_(bytes) {}

  // Parses exactly 32 lowercase hex digits, the only form W3C and dralens emit. The result may
  // be the invalid (all-zero) id; check IsValid().
  static std::optional<TraceId> FromHex(absl::string_view hex);

  const Bytes& bytes() const { return bytes_; }
  bool IsValid() const;
  // 32 lowercase hex digits.
  std::string ToHex() const;

  friend bool operator==(const TraceId&, const TraceId&) = default;

 private:
  Bytes bytes_{};
};

// An 8-byte span id. The default value (all zeros) is the invalid id.
class SpanId {
 public:
  static constexpr size_t kSize = 8;
  using Bytes = std::array<uint8_t, kSize>;

  constexpr SpanId() = default;
  constexpr explicit SpanId(const Bytes& bytes) : bytes_(bytes) {}

  // Parses exactly 16 lowercase hex digits; the result may be invalid (all zeros).
  static std::optional<SpanId> FromHex(absl::string_view hex);

  const Bytes& bytes() const { return bytes_; }
  bool IsValid() const;
  // 16 lowercase hex digits.
  std::string ToHex() const;

  friend bool operator==(const SpanId&, const SpanId&) = default;

 private:
  Bytes bytes_{};
};

// The `sampled` bit of the W3C trace-flags byte.
inline constexpr uint8_t kTraceFlagSampled = 0x01;

// What identifies a span to its children, to other processes and to exemplars.
struct SpanContext {
  TraceId trace_id;
  SpanId span_id;
  uint8_t trace_flags = 0;
  // True when the context came from another process (a parsed `traceparent`).
  bool remote = false;

  // Both ids valid. A no-op span reports an invalid context, so callers that attach trace ids
  // to exemplars or logs skip it.
  bool IsValid() const { return trace_id.IsValid() && span_id.IsValid(); }
  bool IsSampled() const { return (trace_flags & kTraceFlagSampled) != 0; }

  friend bool operator==(const SpanContext&, const SpanContext&) = default;
};

// Parses a `traceparent` header value: `<version>-<trace-id>-<parent-id>-<flags>`, all lowercase
// hex. Version `00` must be exactly 55 characters. A higher version (not `ff`) is parsed by the
// version-00 layout and may carry more fields after a `-` at offset 55. Uppercase hex, version
// `ff`, an all-zero trace or parent id, or any other deviation yields nullopt (the caller then
// starts a new trace). The returned context is marked remote and keeps the flags byte as sent.
std::optional<SpanContext> ParseTraceparent(absl::string_view header);

// Formats `00-<trace-id>-<span-id>-<flags>`. Precondition: context.IsValid().
std::string FormatTraceparent(const SpanContext& context);

// The trace id of one ResourceClaim's lifecycle, the same in every process that touches the
// claim, so that their spans stitch into one trace without propagation:
//
//   TraceIdFromClaimUid(uid) = first 16 bytes of SHA-256("dralens.claim/" + uid)
//
// where `uid` is hashed as its bytes, unchanged (no case folding or trimming). If those 16 bytes
// were all zero (probability 2^-128), the last byte is set to 0x01 so the id is never invalid.
// Example: uid "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0" -> trace id
// "117d33e025ab6cb25d8ec1628ac7199c" (see trace_context_test.cc for the checked vectors).
TraceId TraceIdFromClaimUid(absl::string_view uid);

// Source of new ids. Implementations never return invalid (all-zero) ids and are thread-safe.
class IdGenerator {
 public:
  virtual ~IdGenerator() = default;
  virtual TraceId NewTraceId() = 0;
  virtual SpanId NewSpanId() = 0;
};
using IdGeneratorPtr = std::unique_ptr<IdGenerator>;

// Random ids from absl::BitGen behind a mutex.
class RandomIdGenerator : public IdGenerator {
 public:
  // IdGenerator
  TraceId NewTraceId() override;
  SpanId NewSpanId() override;

 private:
  absl::Mutex mu_;
  absl::BitGen bitgen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dralens::telemetry
