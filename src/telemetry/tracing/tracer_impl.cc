#include "src/telemetry/tracing/tracer_impl.h"

#include <algorithm>
#include <string>
#include <utility>

namespace dralens::telemetry {
namespace {

class NoopSpanImpl final : public Span {
 public:
  // Span
  void SetAttribute(absl::string_view, AttributeValue) noexcept override {}
  void AddEvent(absl::string_view, Attributes) noexcept override {}
  void SetStatus(StatusCode, absl::string_view) noexcept override {}
  void End() noexcept override {}
  SpanPtr StartChild(absl::string_view, SpanKind) noexcept override { return NoopSpan(); }
  SpanContext context() const noexcept override { return SpanContext(); }
  bool IsRecording() const noexcept override { return false; }

 protected:
  void Destroy() noexcept override {}
};

}  // namespace

class RecordingSpan final : public Span {
 public:
  RecordingSpan(TracerImpl& tracer, SpanData data)
      : tracer_(tracer), context_(data.context), data_(std::move(data)) {}
  ~RecordingSpan() override { End(); }

  // Span
  void SetAttribute(absl::string_view key, AttributeValue value) noexcept override {
    if (ended_) {
      return;
    }
    auto it = std::find_if(data_.attributes.begin(), data_.attributes.end(),
                           [&](const Attribute& a) { return a.key == key; });
    if (it != data_.attributes.end()) {
      it->value = std::move(value);
    } else if (data_.attributes.size() < kMaxSpanAttributes) {
      data_.attributes.push_back({std::string(key), std::move(value)});
    } else {
      ++data_.dropped_attributes;
    }
  }

  void AddEvent(absl::string_view name, Attributes attributes) noexcept override {
    if (ended_) {
      return;
    }
    if (data_.events.size() >= kMaxSpanEvents) {
      ++data_.dropped_events;
      return;
    }
    data_.events.push_back({tracer_.clock_.Now(), std::string(name), std::move(attributes)});
  }

  void SetStatus(StatusCode code, absl::string_view message) noexcept override {
    // As the OTel API: Unset never overrides, and Ok is final.
    if (ended_ || code == StatusCode::kUnset || data_.status_code == StatusCode::kOk) {
      return;
    }
    data_.status_code = code;
    data_.status_message = code == StatusCode::kError ? std::string(message) : std::string();
  }

  void End() noexcept override {
    if (ended_) {
      return;
    }
    ended_ = true;
    data_.end_time = std::max(tracer_.clock_.Now(), data_.start_time);
    tracer_.processor_.OnEnd(std::move(data_));
  }

  SpanPtr StartChild(absl::string_view name, SpanKind kind) noexcept override {
    return tracer_.StartSpan(name, {.kind = kind, .parent = context_});
  }

  SpanContext context() const noexcept override { return context_; }
  bool IsRecording() const noexcept override { return !ended_; }

 protected:
  void Destroy() noexcept override { delete this; }

 private:
  TracerImpl& tracer_;
  const SpanContext context_;
  SpanData data_;
  bool ended_ = false;
};

SpanPtr NoopSpan() noexcept {
  // Never destroyed: spans may be released during static destruction.
  static NoopSpanImpl* const span = new NoopSpanImpl();
  return SpanPtr(span);
}

SpanPtr NoopTracer::StartSpan(absl::string_view, const StartSpanOptions&) noexcept {
  return NoopSpan();
}

TracerImpl::TracerImpl(SpanProcessor& processor, SamplerPtr sampler, common::Clock& clock,
                       IdGeneratorPtr ids)
    : processor_(processor),
      sampler_(std::move(sampler)),
      clock_(clock),
      ids_(ids != nullptr ? std::move(ids) : std::make_unique<RandomIdGenerator>()) {}

SpanPtr TracerImpl::StartSpan(absl::string_view name, const StartSpanOptions& options) noexcept {
  std::optional<SpanContext> parent;
  if (options.parent.has_value() && options.parent->IsValid()) {
    parent = options.parent;
  }
  TraceId trace_id;
  if (parent.has_value()) {
    trace_id = parent->trace_id;
  } else if (options.trace_id.has_value() && options.trace_id->IsValid()) {
    trace_id = *options.trace_id;
  } else {
    trace_id = ids_->NewTraceId();
  }
  if (!sampler_->ShouldSample(parent, trace_id)) {
    return NoopSpan();
  }
  SpanData data;
  data.context.trace_id = trace_id;
  data.context.span_id = ids_->NewSpanId();
  data.context.trace_flags = kTraceFlagSampled;
  if (parent.has_value()) {
    data.parent_span_id = parent->span_id;
  }
  data.name = std::string(name);
  data.kind = options.kind;
  data.start_time = options.start_time.value_or(clock_.Now());
  for (const SpanLink& link : options.links) {
    if (!link.context.IsValid()) {
      continue;
    }
    if (data.links.size() >= kMaxSpanLinks) {
      ++data.dropped_links;
      continue;
    }
    data.links.push_back(link);
  }
  return SpanPtr(new RecordingSpan(*this, std::move(data)));
}

}  // namespace dralens::telemetry
