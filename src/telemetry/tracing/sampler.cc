#include "src/telemetry/tracing/sampler.h"

#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dralens::telemetry {
namespace {

class AlwaysOnSampler : public Sampler {
 public:
  // Sampler
  bool ShouldSample(const std::optional<SpanContext>&, const TraceId&) const noexcept override {
    return true;
  }
  std::string Description() const override { return "AlwaysOnSampler"; }
};

class AlwaysOffSampler : public Sampler {
 public:
  // Sampler
  bool ShouldSample(const std::optional<SpanContext>&, const TraceId&) const noexcept override {
    return false;
  }
  std::string Description() const override { return "AlwaysOffSampler"; }
};

class TraceIdRatioSampler : public Sampler {
 public:
  explicit TraceIdRatioSampler(double ratio) : ratio_(ratio), bound_(Bound(ratio)) {}

  // Sampler
  bool ShouldSample(const std::optional<SpanContext>&,
                    const TraceId& trace_id) const noexcept override {
    if (ratio_ >= 1.0) {
      return true;
    }
    uint64_t x = 0;
    for (size_t i = 8; i < TraceId::kSize; ++i) {
      x = x << 8 | trace_id.bytes()[i];
    }
    return (x >> 1) < bound_;
  }
  std::string Description() const override {
    return absl::StrCat("TraceIdRatioBased{", ratio_, "}");
  }

 private:
  static uint64_t Bound(double ratio) {
    // NaN fails both comparisons and samples nothing.
    if (!(ratio > 0.0)) {
      return 0;
    }
    if (ratio >= 1.0) {
      return uint64_t{1} << 63;
    }
    return static_cast<uint64_t>(ratio * 0x1p63);
  }

  double ratio_;
  uint64_t bound_;
};

class ParentBasedSampler : public Sampler {
 public:
  explicit ParentBasedSampler(SamplerPtr root) : root_(std::move(root)) {}

  // Sampler
  bool ShouldSample(const std::optional<SpanContext>& parent,
                    const TraceId& trace_id) const noexcept override {
    if (parent.has_value() && parent->IsValid()) {
      return parent->IsSampled();
    }
    return root_->ShouldSample(std::nullopt, trace_id);
  }
  std::string Description() const override {
    return absl::StrCat("ParentBased{root=", root_->Description(), "}");
  }

 private:
  SamplerPtr root_;
};

constexpr struct {
  SamplerKind kind;
  absl::string_view name;
} kSamplerNames[] = {
    {SamplerKind::kAlwaysOn, "always_on"},
    {SamplerKind::kAlwaysOff, "always_off"},
    {SamplerKind::kTraceIdRatio, "traceidratio"},
    {SamplerKind::kParentBasedAlwaysOn, "parentbased_always_on"},
    {SamplerKind::kParentBasedAlwaysOff, "parentbased_always_off"},
    {SamplerKind::kParentBasedTraceIdRatio, "parentbased_traceidratio"},
};

}  // namespace

SamplerPtr MakeAlwaysOnSampler() { return std::make_unique<AlwaysOnSampler>(); }

SamplerPtr MakeAlwaysOffSampler() { return std::make_unique<AlwaysOffSampler>(); }

SamplerPtr MakeTraceIdRatioSampler(double ratio) {
  return std::make_unique<TraceIdRatioSampler>(ratio);
}

SamplerPtr MakeParentBasedSampler(SamplerPtr root) {
  return std::make_unique<ParentBasedSampler>(std::move(root));
}

absl::string_view ToString(SamplerKind kind) {
  for (const auto& entry : kSamplerNames) {
    if (entry.kind == kind) {
      return entry.name;
    }
  }
  return "unknown";
}

absl::StatusOr<SamplerConfig> ParseSamplerConfig(const char* sampler, const char* sampler_arg) {
  SamplerConfig config;
  const absl::string_view name = sampler == nullptr ? "" : absl::StripAsciiWhitespace(sampler);
  if (!name.empty()) {
    bool found = false;
    for (const auto& entry : kSamplerNames) {
      if (entry.name == name) {
        config.kind = entry.kind;
        found = true;
        break;
      }
    }
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(
          "OTEL_TRACES_SAMPLER=\"", name,
          "\" is not supported: use always_on, always_off, traceidratio, parentbased_always_on "
          "(the default), parentbased_always_off or parentbased_traceidratio"));
    }
  }
  if (config.kind != SamplerKind::kTraceIdRatio &&
      config.kind != SamplerKind::kParentBasedTraceIdRatio) {
    return config;
  }
  const absl::string_view arg =
      sampler_arg == nullptr ? "" : absl::StripAsciiWhitespace(sampler_arg);
  if (arg.empty()) {
    return config;
  }
  double ratio = 0;
  if (!absl::SimpleAtod(arg, &ratio) || !std::isfinite(ratio) || ratio < 0.0 || ratio > 1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("OTEL_TRACES_SAMPLER_ARG=\"", arg, "\" is not a valid ratio for ",
                     ToString(config.kind), ": use a number from 0 to 1, e.g. 0.25"));
  }
  config.ratio = ratio;
  return config;
}

SamplerPtr MakeSampler(const SamplerConfig& config) {
  switch (config.kind) {
    case SamplerKind::kAlwaysOn:
      return MakeAlwaysOnSampler();
    case SamplerKind::kAlwaysOff:
      return MakeAlwaysOffSampler();
    case SamplerKind::kTraceIdRatio:
      return MakeTraceIdRatioSampler(config.ratio);
    case SamplerKind::kParentBasedAlwaysOn:
      return MakeParentBasedSampler(MakeAlwaysOnSampler());
    case SamplerKind::kParentBasedAlwaysOff:
      return MakeParentBasedSampler(MakeAlwaysOffSampler());
    case SamplerKind::kParentBasedTraceIdRatio:
      return MakeParentBasedSampler(MakeTraceIdRatioSampler(config.ratio));
  }
  return MakeParentBasedSampler(MakeAlwaysOnSampler());
}

}  // namespace dralens::telemetry
