#include "exporter/cluster/lifecycle_tracer.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/common/clock.h"
#include "src/telemetry/tracing/in_memory_span_exporter.h"
#include "src/telemetry/tracing/trace_context.h"
#include "src/telemetry/tracing/tracer_provider.h"

namespace dralens::exporter::cluster {
namespace {

class LifecycleTracerTest : public ::testing::Test {
 protected:
  LifecycleTracerTest() {
    auto exporter = std::make_unique<telemetry::InMemorySpanExporter>();
    spans_ = exporter->storage();
    tracing_ = telemetry::TracerProvider::CreateWithExporter(
        std::move(exporter), telemetry::SamplerConfig{}, {}, clock_);
  }
  ~LifecycleTracerTest() override { tracing_->Shutdown(absl::Now() + absl::Seconds(5)); }

  telemetry::SpanData Only() {
    EXPECT_TRUE(tracing_->ForceFlush(absl::Now() + absl::Seconds(5)));
    std::vector<telemetry::SpanData> all = spans_->spans();
    EXPECT_EQ(all.size(), 1u);
    return all.empty() ? telemetry::SpanData{} : all.front();
  }
  static std::map<std::string, telemetry::AttributeValue> Attributes(
      const telemetry::SpanData& span) {
    std::map<std::string, telemetry::AttributeValue> out;
    for (const telemetry::Attribute& a : span.attributes) {
      out[a.key] = a.value;
    }
    return out;
  }

  common::FakeClock clock_;
  std::shared_ptr<telemetry::InMemorySpanExporter::Storage> spans_;
  std::unique_ptr<telemetry::TracerProvider> tracing_;
};

TEST_F(LifecycleTracerTest, OneSpanFromCreationInTheTraceOfTheClaimUid) {
  LifecycleTracer lifecycle(tracing_->tracer());
  const absl::Time created = clock_.Now() - absl::Minutes(3);
  telemetry::SpanPtr span = lifecycle.Begin("team", "job", "uid-1", "gpu", created);
  LifecycleTracer::OnTransition(*span, Transition::kCreated);
  LifecycleTracer::OnPending(*span, PendingReason::kNoCapacity);
  LifecycleTracer::OnTransition(*span, Transition::kAllocated);
  LifecycleTracer::OnTransition(*span, Transition::kDeleted);
  LifecycleTracer::End(*span, 7200, 6.5);

  const telemetry::SpanData s = Only();
  EXPECT_EQ(s.name, "ResourceClaim");
  EXPECT_EQ(s.context.trace_id, telemetry::TraceIdFromClaimUid("uid-1"));
  EXPECT_EQ(s.start_time, created);
  auto attributes = Attributes(s);
  EXPECT_EQ(std::get<std::string>(attributes["k8s.namespace.name"]), "team");
  EXPECT_EQ(std::get<std::string>(attributes["k8s.resourceclaim.name"]), "job");
  EXPECT_EQ(std::get<std::string>(attributes["k8s.resourceclaim.uid"]), "uid-1");
  EXPECT_EQ(std::get<std::string>(attributes["dra.device_class"]), "gpu");
  EXPECT_DOUBLE_EQ(std::get<double>(attributes["dralens.claim.gpu_hours"]), 2);
  EXPECT_DOUBLE_EQ(std::get<double>(attributes["dralens.claim.cost"]), 6.5);
  std::vector<std::string> events;
  for (const telemetry::SpanEvent& e : s.events) {
    events.push_back(e.name);
  }
  EXPECT_EQ(events, (std::vector<std::string>{"created", "pending", "allocated", "deleted"}));
  ASSERT_EQ(s.events[1].attributes.size(), 1u);
  EXPECT_EQ(s.events[1].attributes[0].key, "reason");
  EXPECT_EQ(std::get<std::string>(s.events[1].attributes[0].value), "no_capacity");
}

TEST_F(LifecycleTracerTest, AClaimThatHeldNothingCarriesNoCost) {
  LifecycleTracer lifecycle(tracing_->tracer());
  telemetry::SpanPtr span = lifecycle.Begin("team", "idle", "uid-2", "gpu", clock_.Now());
  LifecycleTracer::End(*span, 0, 0);
  auto attributes = Attributes(Only());
  EXPECT_EQ(attributes.count("dralens.claim.gpu_hours"), 0u);
  EXPECT_EQ(attributes.count("dralens.claim.cost"), 0u);
}

TEST_F(LifecycleTracerTest, AbandonedSpansEndWithoutCost) {
  LifecycleTracer lifecycle(tracing_->tracer());
  telemetry::SpanPtr span = lifecycle.Begin("team", "open", "uid-3", "gpu", clock_.Now());
  LifecycleTracer::Abandon(*span);
  const telemetry::SpanData s = Only();
  EXPECT_EQ(s.name, "ResourceClaim");
  EXPECT_EQ(Attributes(s).count("dralens.claim.cost"), 0u);
}

}  // namespace
}  // namespace dralens::exporter::cluster
