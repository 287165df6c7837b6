#include "src/telemetry/tracing/tracer.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/common/clock.h"
#include "src/telemetry/tracing/in_memory_span_exporter.h"
#include "src/telemetry/tracing/simple_span_processor.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "src/telemetry/tracing/tracer_provider.h"

namespace dralens::telemetry {
namespace {

// Ids 1, 2, 3, ... so tests can name them.
class SequentialIds : public IdGenerator {
 public:
  TraceId NewTraceId() override {
    TraceId::Bytes bytes{};
    bytes[15] = static_cast<uint8_t>(++next_trace_);
    return TraceId(bytes);
  }
  SpanId NewSpanId() override {
    SpanId::Bytes bytes{};
    bytes[7] = static_cast<uint8_t>(++next_span_);
    return SpanId(bytes);
  }

 private:
  int next_trace_ = 0;
  int next_span_ = 0;
};

class TracerTest : public ::testing::Test {
 protected:
  void MakeTracer(SamplerConfig sampler = {}) {
    auto exporter = std::make_unique<InMemorySpanExporter>();
    storage_ = exporter->storage();
    processor_ = std::make_unique<SimpleSpanProcessor>(std::move(exporter), stats_);
    tracer_ = std::make_unique<TracerImpl>(*processor_, MakeSampler(sampler), clock_,
                                           std::make_unique<SequentialIds>());
  }
  void SetUp() override { MakeTracer(); }

  common::FakeClock clock_{absl::FromUnixSeconds(1700000000)};
  TracingStats stats_;
  std::shared_ptr<InMemorySpanExporter::Storage> storage_;
  std::unique_ptr<SimpleSpanProcessor> processor_;
  std::unique_ptr<TracerImpl> tracer_;
};

TEST(NoopTracerTest, SpansAreSharedNoOps) {
  NoopTracer tracer;
  SpanPtr span = tracer.StartSpan("op");
  EXPECT_FALSE(span->IsRecording());
  EXPECT_FALSE(span->context().IsValid());
  span->SetAttribute("k", "v");
  span->AddEvent("e", {{"k", int64_t{1}}});
  span->SetStatus(StatusCode::kError, "boom");
  SpanPtr child = span->StartChild("child", SpanKind::kClient);
  EXPECT_FALSE(child->IsRecording());
  EXPECT_FALSE(child->context().IsValid());
  // No allocation per span: every no-op span is the same object.
  EXPECT_EQ(span.get(), child.get());
  EXPECT_EQ(span.get(), NoopSpan().get());
  span->End();
  span->End();
}

TEST(NoopTracerTest, DisabledProviderHandsOutNoOps) {
  TracingConfig config;
  config.enabled = false;
  config.disabled_reason = "test";
  absl::StatusOr<std::unique_ptr<TracerProvider>> provider =
      TracerProvider::Create(config, "0.1.0");
  ASSERT_TRUE(provider.ok()) << provider.status();
  EXPECT_FALSE((*provider)->enabled());
  SpanPtr span = (*provider)->tracer().StartSpan("op", {.trace_id = TraceIdFromClaimUid("u")});
  EXPECT_FALSE(span->IsRecording());
  EXPECT_FALSE(span->context().IsValid());
  EXPECT_TRUE((*provider)->ForceFlush(absl::Now()));
  EXPECT_TRUE((*provider)->Shutdown(absl::Now()));
}

TEST_F(TracerTest, SampledOutSpansAreNoOpsAndNotExported) {
  MakeTracer({.kind = SamplerKind::kAlwaysOff});
  SpanPtr span = tracer_->StartSpan("op");
  EXPECT_FALSE(span->IsRecording());
  EXPECT_FALSE(span->context().IsValid());
  SpanPtr child = span->StartChild("child");
  EXPECT_FALSE(child->IsRecording());
  child->End();
  span->End();
  EXPECT_TRUE(storage_->spans().empty());
  EXPECT_EQ(storage_->export_calls(), 0u);
}

TEST_F(TracerTest, RootAndChildIds) {
  SpanPtr root = tracer_->StartSpan("root", {.kind = SpanKind::kServer});
  ASSERT_TRUE(root->IsRecording());
  const SpanContext root_context = root->context();
  EXPECT_TRUE(root_context.IsValid());
  EXPECT_TRUE(root_context.IsSampled());
  EXPECT_FALSE(root_context.remote);
  EXPECT_EQ(root_context.trace_id.ToHex(), "00000000000000000000000000000001");
  EXPECT_EQ(root_context.span_id.ToHex(), "0000000000000001");

  SpanPtr child = root->StartChild("child", SpanKind::kClient);
  const SpanContext child_context = child->context();
  EXPECT_EQ(child_context.trace_id, root_context.trace_id);
  EXPECT_EQ(child_context.span_id.ToHex(), "0000000000000002");
  SpanPtr grandchild = child->StartChild("grandchild");
  child->End();
  root->End();
  grandchild.reset();  // the destructor ends it

  std::vector<SpanData> spans = storage_->spans();
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0].name, "child");
  EXPECT_EQ(spans[0].kind, SpanKind::kClient);
  EXPECT_EQ(spans[0].parent_span_id, root_context.span_id);
  EXPECT_EQ(spans[1].name, "root");
  EXPECT_EQ(spans[1].kind, SpanKind::kServer);
  EXPECT_FALSE(spans[1].parent_span_id.IsValid());
  EXPECT_EQ(spans[2].name, "grandchild");
  EXPECT_EQ(spans[2].kind, SpanKind::kInternal);
  EXPECT_EQ(spans[2].parent_span_id, child_context.span_id);
  EXPECT_EQ(spans[2].context.trace_id, root_context.trace_id);
}

TEST_F(TracerTest, ClaimDerivedTraceId) {
  const TraceId claim_trace = TraceIdFromClaimUid("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
  SpanPtr a = tracer_->StartSpan("prepare", {.trace_id = claim_trace});
  SpanPtr b = tracer_->StartSpan("unprepare", {.trace_id = claim_trace});
  EXPECT_EQ(a->context().trace_id, claim_trace);
  EXPECT_EQ(b->context().trace_id, claim_trace);
  EXPECT_NE(a->context().span_id, b->context().span_id);
  // An invalid explicit id falls back to a new one.
  SpanPtr c = tracer_->StartSpan("other", {.trace_id = TraceId()});
  EXPECT_TRUE(c->context().trace_id.IsValid());
  EXPECT_NE(c->context().trace_id, claim_trace);
}

TEST_F(TracerTest, RemoteParentFromTraceparent) {
  std::optional<SpanContext> remote =
      ParseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  ASSERT_TRUE(remote.has_value());
  SpanPtr span = tracer_->StartSpan(
      "server",
      {.kind = SpanKind::kServer, .parent = remote, .trace_id = TraceIdFromClaimUid("x")});
  EXPECT_EQ(span->context().trace_id.ToHex(), "0af7651916cd43dd8448eb211c80319c");
  EXPECT_FALSE(span->context().remote);
  span->End();
  ASSERT_EQ(storage_->spans().size(), 1u);
  EXPECT_EQ(storage_->spans()[0].parent_span_id.ToHex(), "b7ad6b7169203331");

  // The default sampler honours an unsampled remote parent.
  std::optional<SpanContext> unsampled =
      ParseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00");
  SpanPtr dropped = tracer_->StartSpan("server", {.parent = unsampled});
  EXPECT_FALSE(dropped->IsRecording());
}

TEST_F(TracerTest, AttributesEventsStatusAndTimes) {
  SpanPtr span = tracer_->StartSpan("op");
  span->SetAttribute("k8s.resourceclaim.uid", "abc");
  span->SetAttribute("count", 3);
  span->SetAttribute("ratio", 0.5);
  span->SetAttribute("ok", true);
  span->SetAttribute("count", int64_t{4});  // replaces
  clock_.Advance(absl::Milliseconds(100));
  span->AddEvent("checkpoint.written", {{"bytes", int64_t{512}}});
  clock_.Advance(absl::Milliseconds(150));
  span->SetStatus(StatusCode::kOk, "ignored for ok");
  span->SetStatus(StatusCode::kError, "too late: ok is final");
  span->End();
  span->SetAttribute("after", "end");  // ignored
  span->End();                         // idempotent

  std::vector<SpanData> spans = storage_->spans();
  ASSERT_EQ(spans.size(), 1u);
  const SpanData& data = spans[0];
  ASSERT_EQ(data.attributes.size(), 4u);
  EXPECT_EQ(data.attributes[0], (Attribute{"k8s.resourceclaim.uid", std::string("abc")}));
  EXPECT_EQ(data.attributes[1], (Attribute{"count", int64_t{4}}));
  EXPECT_EQ(data.attributes[2], (Attribute{"ratio", 0.5}));
  EXPECT_EQ(data.attributes[3], (Attribute{"ok", true}));
  EXPECT_EQ(data.start_time, absl::FromUnixSeconds(1700000000));
  EXPECT_EQ(data.end_time, absl::FromUnixSeconds(1700000000) + absl::Milliseconds(250));
  ASSERT_EQ(data.events.size(), 1u);
  EXPECT_EQ(data.events[0].name, "checkpoint.written");
  EXPECT_EQ(data.events[0].time, absl::FromUnixSeconds(1700000000) + absl::Milliseconds(100));
  EXPECT_EQ(data.status_code, StatusCode::kOk);
  EXPECT_EQ(data.status_message, "");
  EXPECT_EQ(stats_.spans_exported.load(), 1u);
}

TEST_F(TracerTest, ErrorStatusKeepsMessage) {
  SpanPtr span = tracer_->StartSpan("op");
  span->SetStatus(StatusCode::kError, "first");
  span->SetStatus(StatusCode::kUnset);  // ignored
  span->SetStatus(StatusCode::kError, "second");
  span->End();
  ASSERT_EQ(storage_->spans().size(), 1u);
  EXPECT_EQ(storage_->spans()[0].status_code, StatusCode::kError);
  EXPECT_EQ(storage_->spans()[0].status_message, "second");
}

TEST_F(TracerTest, LimitsDropAndCount) {
  SpanPtr span = tracer_->StartSpan("op");
  for (size_t i = 0; i < kMaxSpanAttributes + 3; ++i) {
    span->SetAttribute("k" + std::to_string(i), static_cast<int64_t>(i));
  }
  for (size_t i = 0; i < kMaxSpanEvents + 2; ++i) {
    span->AddEvent("e");
  }
  span->SetAttribute("k0", "still replaceable");
  span->End();
  const std::vector<SpanData> spans = storage_->spans();
  ASSERT_EQ(spans.size(), 1u);
  const SpanData& data = spans[0];
  EXPECT_EQ(data.attributes.size(), kMaxSpanAttributes);
  EXPECT_EQ(data.dropped_attributes, 3u);
  EXPECT_EQ(data.events.size(), kMaxSpanEvents);
  EXPECT_EQ(data.dropped_events, 2u);
  EXPECT_EQ(data.attributes[0].value, AttributeValue(std::string("still replaceable")));
}

TEST_F(TracerTest, ExplicitStartTime) {
  const absl::Time start = absl::FromUnixSeconds(1600000000);
  SpanPtr span = tracer_->StartSpan("op", {.start_time = start});
  span->End();
  ASSERT_EQ(storage_->spans().size(), 1u);
  EXPECT_EQ(storage_->spans()[0].start_time, start);
  EXPECT_EQ(storage_->spans()[0].end_time, absl::FromUnixSeconds(1700000000));
}

TEST_F(TracerTest, LinksKeepValidContextsOnly) {
  SpanPtr call = tracer_->StartSpan("call");
  const SpanContext target = call->context();
  SpanPtr claim = tracer_->StartSpan(
      "claim",
      {.links = {SpanLink{.context = target, .attributes = {{"why", std::string("carried")}}},
                 SpanLink{.context = SpanContext(), .attributes = {}}}});
  claim->End();
  call->End();
  const std::vector<SpanData> spans = storage_->spans();
  ASSERT_EQ(spans.size(), 2u);
  const SpanData& data = spans[0];
  EXPECT_EQ(data.name, "claim");
  ASSERT_EQ(data.links.size(), 1u);
  EXPECT_EQ(data.links[0].context.span_id, target.span_id);
  EXPECT_EQ(data.links[0].context.trace_id, target.trace_id);
  EXPECT_EQ(data.dropped_links, 0u);
  // A link does not make a parent: the claim span is still a root in its own trace.
  EXPECT_FALSE(data.parent_span_id.IsValid());
}

TEST(TracerProviderTest, BatchPipelineWithInMemoryExporter) {
  common::FakeClock clock;
  auto exporter = std::make_unique<InMemorySpanExporter>();
  auto storage = exporter->storage();
  std::unique_ptr<TracerProvider> provider = TracerProvider::CreateWithExporter(
      std::move(exporter), {}, {.schedule_delay = absl::Hours(1)}, clock);
  EXPECT_TRUE(provider->enabled());
  for (int i = 0; i < 10; ++i) {
    SpanPtr span = provider->tracer().StartSpan("op");
    span->SetAttribute("i", i);
  }
  EXPECT_TRUE(provider->ForceFlush(absl::Now() + absl::Seconds(10)));
  EXPECT_EQ(storage->spans().size(), 10u);
  EXPECT_EQ(provider->stats().spans_exported.load(), 10u);
  EXPECT_TRUE(provider->Shutdown(absl::Now() + absl::Seconds(10)));
}

}  // namespace
}  // namespace dralens::telemetry
