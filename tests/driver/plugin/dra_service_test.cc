// PrepareClaims / UnprepareClaims: the proto-free core of the DRA adapter.
#include "driver/plugin/dra_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/telemetry/exemplar.h"
#include "src/telemetry/tracing/in_memory_span_exporter.h"
#include "src/telemetry/tracing/sampler.h"
#include "src/telemetry/tracing/simple_span_processor.h"
#include "src/telemetry/tracing/trace_context.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "tests/driver/plugin/fake_claim_handler.h"

namespace dralens::driver::plugin {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::SizeIs;

ClaimRef Claim(const std::string& uid, const std::string& name = "claim") {
  return ClaimRef{.namespace_name = "default", .uid = uid, .name = name};
}

TEST(PrepareClaimsTest, OneEntryPerDistinctUidAndHandlerSeesEachOnce) {
  FakeClaimHandler handler;
  auto results =
      PrepareClaims(handler, {Claim("a", "first"), Claim("b"), Claim("a", "second")}, "v1", {});
  ASSERT_THAT(results, SizeIs(2));
  EXPECT_EQ(results["a"].devices, std::vector{FakeClaimHandler::DefaultDevice("a")});
  EXPECT_EQ(results["b"].error, "");
  ASSERT_THAT(handler.PrepareCalls(), SizeIs(1));
  EXPECT_THAT(handler.PrepareCalls()[0],
              ElementsAre(Field(&ClaimRef::name, "first"), Field(&ClaimRef::uid, "b")));
}

TEST(PrepareClaimsTest, MissingAndUnrequestedEntries) {
  FakeClaimHandler handler;
  handler.Omit("b");
  handler.AddUnrequested("zzz");
  auto results = PrepareClaims(handler, {Claim("a"), Claim("b")}, "v1", {});
  ASSERT_THAT(results, SizeIs(2));
  EXPECT_EQ(results["a"].error, "");
  EXPECT_EQ(results["b"].error, "driver returned no result for this claim");
  EXPECT_THAT(results["b"].devices, IsEmpty());
}

TEST(PrepareClaimsTest, MalformedClaimsNeverReachTheHandler) {
  FakeClaimHandler handler;
  auto results = PrepareClaims(
      handler, {Claim("a", ""), ClaimRef{.namespace_name = "", .uid = "b", .name = "x"}, Claim("")},
      "v1beta1", {});
  EXPECT_THAT(results,
              ElementsAre(Pair("", Field(&PrepareResult::error, "claim has no uid")),
                          Pair("a", Field(&PrepareResult::error, "claim has no name")),
                          Pair("b", Field(&PrepareResult::error, "claim has no namespace"))));
  EXPECT_THAT(handler.PrepareCalls(), IsEmpty());
}

TEST(PrepareClaimsTest, HandlerExceptionBecomesPerClaimErrors) {
  FakeClaimHandler handler;
  handler.Throw();
  auto results = PrepareClaims(handler, {Claim("a"), Claim("b")}, "v1", {});
  EXPECT_THAT(
      results,
      ElementsAre(Pair("a", Field(&PrepareResult::error, "internal error: fake handler failure")),
                  Pair("b", Field(&PrepareResult::error, "internal error: fake handler failure"))));
  auto unprepared = UnprepareClaims(handler, {Claim("a")}, "v1", {});
  EXPECT_THAT(unprepared, ElementsAre(Pair("a", "internal error: fake handler failure")));
}

TEST(UnprepareClaimsTest, OneEntryPerDistinctUid) {
  FakeClaimHandler handler;
  handler.SetError("b", "busy");
  handler.Omit("c");
  handler.AddUnrequested("zzz");
  auto results =
      UnprepareClaims(handler, {Claim("a"), Claim("b"), Claim("c"), Claim("a")}, "v1", {});
  EXPECT_THAT(results, ElementsAre(Pair("a", ""), Pair("b", "busy"),
                                   Pair("c", "driver returned no result for this claim")));
  ASSERT_THAT(handler.UnprepareCalls(), SizeIs(1));
  EXPECT_THAT(handler.UnprepareCalls()[0], SizeIs(3));
}

TEST(UnprepareClaimsTest, EmptyInputDoesNotCallTheHandler) {
  FakeClaimHandler handler;
  EXPECT_THAT(UnprepareClaims(handler, {}, "v1", {}), IsEmpty());
  EXPECT_THAT(PrepareClaims(handler, {}, "v1", {}), IsEmpty());
  EXPECT_THAT(handler.PrepareCalls(), IsEmpty());
  EXPECT_THAT(handler.UnprepareCalls(), IsEmpty());
}

// The service's own telemetry: a server span per non-empty call that names each claim's
// trace, and the call counter by API version and result. The liveness probe records nothing.
TEST(DraServiceTelemetryTest, OneSpanAndOneCountPerNonEmptyCall) {
  prometheus::Registry registry;
  telemetry::ExemplarStore exemplars;
  KubeletCallMetrics metrics = KubeletCallMetrics::Create(registry);
  telemetry::TracingStats stats;
  auto exporter = std::make_unique<telemetry::InMemorySpanExporter>();
  auto spans = exporter->storage();
  telemetry::SimpleSpanProcessor processor(std::move(exporter), stats);
  telemetry::TracerImpl tracer(processor, telemetry::MakeAlwaysOnSampler(), common::RealClock());
  FakeClaimHandler handler;
  handler.SetError("b", "busy");
  DraServiceV1 v1(handler, CallTelemetry{.metrics = metrics, .tracer = tracer});
  DraServiceV1beta1 v1beta1(handler, CallTelemetry{.metrics = metrics, .tracer = tracer});

  dra_v1::NodePrepareResourcesRequest empty;
  dra_v1::NodePrepareResourcesResponse empty_response;
  ASSERT_TRUE(v1.NodePrepareResources(nullptr, &empty, &empty_response).ok());
  EXPECT_THAT(spans->spans(), IsEmpty());

  dra_v1::NodePrepareResourcesRequest request;
  for (const char* uid : {"a", "b"}) {
    auto* c = request.add_claims();
    c->set_namespace_("default");
    c->set_name(uid);
    c->set_uid(uid);
  }
  dra_v1::NodePrepareResourcesResponse response;
  ASSERT_TRUE(v1.NodePrepareResources(nullptr, &request, &response).ok());
  dra_v1beta1::NodeUnprepareResourcesRequest unprepare;
  auto* c = unprepare.add_claims();
  c->set_namespace_("default");
  c->set_name("a");
  c->set_uid("a");
  dra_v1beta1::NodeUnprepareResourcesResponse unprepared;
  ASSERT_TRUE(v1beta1.NodeUnprepareResources(nullptr, &unprepare, &unprepared).ok());

  std::vector<telemetry::SpanData> all = spans->spans();
  ASSERT_THAT(all, SizeIs(2));
  EXPECT_EQ(all[0].name, "NodePrepareResources");
  EXPECT_EQ(all[0].kind, telemetry::SpanKind::kServer);
  EXPECT_EQ(all[0].status_code, telemetry::StatusCode::kError);  // claim b failed
  ASSERT_THAT(all[0].events, SizeIs(2));
  bool names_trace = false;
  for (const telemetry::Attribute& a : all[0].events[0].attributes) {
    names_trace = names_trace ||
                  (a.key == "claim.trace_id" &&
                   std::get<std::string>(a.value) == telemetry::TraceIdFromClaimUid("a").ToHex());
  }
  EXPECT_TRUE(names_trace);
  EXPECT_EQ(all[1].name, "NodeUnprepareResources");
  EXPECT_EQ(all[1].status_code, telemetry::StatusCode::kOk);
  // The handler was told which call carried the claims: each claim span links to it.
  std::vector<KubeletCall> told = handler.KubeletCalls();
  ASSERT_THAT(told, SizeIs(2));
  EXPECT_EQ(told[0].span.span_id, all[0].context.span_id);
  EXPECT_EQ(told[0].span.trace_id, all[0].context.trace_id);
  EXPECT_EQ(told[1].span.span_id, all[1].context.span_id);

  // Every (operation, api, result) series exists from the start; two moved.
  std::map<std::string, double> calls;
  int series = 0;
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    if (f.name != "dralens_node_requests_total") {
      continue;
    }
    for (const prometheus::ClientMetric& m : f.metric) {
      ++series;
      std::string key;
      for (const auto& l : m.label) {
        key += l.name + "=" + l.value + ",";
      }
      if (m.counter.value != 0) {
        calls[key] = m.counter.value;
      }
    }
  }
  EXPECT_EQ(series, 8);
  EXPECT_THAT(calls, ElementsAre(Pair("api=v1,operation=prepare,result=error,", 1),
                                 Pair("api=v1beta1,operation=unprepare,result=ok,", 1)));
}

}  // namespace
}  // namespace dralens::driver::plugin
