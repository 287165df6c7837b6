// Head samplers, as named by OTEL_TRACES_SAMPLER. A sampler decides when a span starts whether
// it is recorded and exported; an unsampled span is a no-op.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/telemetry/tracing/trace_context.h"

namespace dralens::telemetry {

// Thread-safe, immutable after construction; called on every span start.
class Sampler {
 public:
  virtual ~Sampler() = default;
  // `parent` is the parent's context when the span has a valid one (local or remote), else
  // nullopt (a root span). `trace_id` is the id the new span will carry.
  virtual bool ShouldSample(const std::optional<SpanContext>& parent,
                            const TraceId& trace_id) const noexcept = 0;
  // E.g. "ParentBased{root=TraceIdRatioBased{0.25}}", for logs.
  virtual std::string Description() const = 0;
};
using SamplerPtr = std::unique_ptr<Sampler>;

SamplerPtr MakeAlwaysOnSampler();
SamplerPtr MakeAlwaysOffSampler();

// TraceIdRatioBased, decided from the trace id alone so that every process (and every SDK that
// follows the OTel reference) reaches the same verdict for a trace: bytes 8..15 of the trace id
// are read as a big-endian uint64 `x`; the span is sampled iff `(x >> 1) < bound`, where
// bound = uint64(ratio * 2^63). ratio >= 1 samples everything, ratio <= 0 nothing. This is
// the rule of the OTel Go and Java SDKs, so claim-derived trace ids sample alike everywhere.
SamplerPtr MakeTraceIdRatioSampler(double ratio);

// ParentBased: a span with a valid parent is sampled iff the parent's sampled flag is set;
// a root span is decided by `root`.
SamplerPtr MakeParentBasedSampler(SamplerPtr root);

enum class SamplerKind {
  kAlwaysOn,
  kAlwaysOff,
  kTraceIdRatio,
  kParentBasedAlwaysOn,
  kParentBasedAlwaysOff,
  kParentBasedTraceIdRatio,
};

// The OTEL_TRACES_SAMPLER name: "always_on", "parentbased_traceidratio", ...
absl::string_view ToString(SamplerKind kind);

struct SamplerConfig {
  SamplerKind kind = SamplerKind::kParentBasedAlwaysOn;
  // Used by the two ratio kinds only; within [0, 1].
  double ratio = 1.0;
};

// Parses OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (either may be null or empty: the
// default sampler, ratio 1.0). The argument is read only for the ratio samplers and must then
// be a number within [0, 1]. Errors name the variable and list what is allowed.
absl::StatusOr<SamplerConfig> ParseSamplerConfig(const char* sampler, const char* sampler_arg);

SamplerPtr MakeSampler(const SamplerConfig& config);

}  // namespace dralens::telemetry
