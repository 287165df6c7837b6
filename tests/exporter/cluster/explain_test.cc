// Why a claim pends, and where an allocated one landed: the funnel of each request, one case per
// stage, the nearest miss, the text and JSON forms, and what an allocated claim has cost.
#include "exporter/cluster/explain.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/feed.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/telemetry/tracing/in_memory_span_exporter.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "src/telemetry/tracing/tracer_provider.h"
#include "tests/exporter/cluster/scenario_util.h"

namespace dralens::exporter::cluster {
namespace {

constexpr char kH200[] = "device.attributes[\"gpu.dralens.dev\"].productName == \"H200\"";

using testing::Holding;

std::vector<testing::DeviceSpec> Gpus(const std::string& node, int n, bool tainted_last = false) {
  return testing::WholeGpus(node, n, tainted_last);
}

class ExplainTest : public ::testing::Test {
 protected:
  ExplainTest() : analyzer_(registry_, tracer_, Options()) {
    HandlersFor(k8s::kDeviceClasses, analyzer_).on_add(testing::Class("gpu", "true"));
  }
  AnalyzerOptions Options() {
    AnalyzerOptions o{PriceTable{}, &clock_};
    o.prices.by_class["gpu"] = 3.6;
    return o;
  }
  void Add(const k8s::ResourceType& type, const nlohmann::json& obj) {
    HandlersFor(type, analyzer_).on_add(obj);
  }
  RequestFunnel Funnel(const std::string& claim) {
    std::optional<ClaimExplanation> e = analyzer_.Explain("team", claim);
    EXPECT_TRUE(e.has_value());
    EXPECT_EQ(e->requests.size(), 1u);
    return e->requests.empty() ? RequestFunnel{} : e->requests.front();
  }

  prometheus::Registry registry_;
  telemetry::NoopTracer tracer_;
  common::FakeClock clock_;
  Analyzer analyzer_;
};

TEST_F(ExplainTest, NoCapacityCountsWhoHoldsTheDevices) {
  Add(k8s::kResourceSlices, testing::Slice("a", Gpus("a", 4)));
  Add(k8s::kResourceClaims, Holding("big", {"gpu-0", "gpu-1"}));
  Add(k8s::kResourceClaims, Holding("small", {"gpu-2"}));
  Add(k8s::kResourceClaims, testing::Claim("team", "wants-two", "gpu", "", 2));
  const RequestFunnel f = Funnel("wants-two");
  EXPECT_EQ(f.request, "req");
  EXPECT_EQ(f.class_devices, 4);
  EXPECT_EQ(f.matching, 4);
  EXPECT_EQ(f.untainted, 4);
  EXPECT_EQ(f.free, 1);
  EXPECT_EQ(f.allocated, 3);
  EXPECT_EQ(f.holders, 2);
  EXPECT_EQ(f.reason, PendingReason::kNoCapacity);
  EXPECT_FALSE(f.nearest.has_value());
  EXPECT_EQ(FunnelText(f),
            "class gpu: 4 devices; 4 match the request's selectors; 4 untainted; 1 free (3 "
            "allocated to 2 claims); needs 2");
  // The same verdict as the analyzer's series.
  EXPECT_EQ(analyzer_.PendingReasonOf("team/wants-two"), PendingReason::kNoCapacity);
}

TEST_F(ExplainTest, UnsatisfiableNamesTheSelectorThatKeepsFreeDevicesOut) {
  Add(k8s::kResourceSlices, testing::Slice("a", Gpus("a", 2)));
  Add(k8s::kResourceSlices, testing::Slice("b", Gpus("b", 3)));
  Add(k8s::kResourceClaims, Holding("held", {"gpu-0"}, "b"));
  Add(k8s::kResourceClaims, testing::Claim("team", "h200", "gpu", kH200));
  const RequestFunnel f = Funnel("h200");
  EXPECT_EQ(f.class_devices, 5);
  EXPECT_EQ(f.matching, 0);
  EXPECT_EQ(f.reason, PendingReason::kUnsatisfiable);
  ASSERT_TRUE(f.nearest.has_value());
  EXPECT_EQ(f.nearest->devices, 4);  // the held one is not free
  EXPECT_EQ(f.nearest->product, "H100");
  EXPECT_EQ(f.nearest->nodes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f.nearest->selector, kH200);
  EXPECT_NE(FunnelText(f).find(std::string("nearest: 4 free H100 on nodes a,b would match "
                                           "without `") +
                               kH200 + "`"),
            std::string::npos)
      << FunnelText(f);
}

TEST_F(ExplainTest, TaintedNamesTheTaintToTolerate) {
  std::vector<testing::DeviceSpec> gpus = Gpus("a", 1, /*tainted_last=*/true);
  Add(k8s::kResourceSlices, testing::Slice("a", gpus));
  Add(k8s::kResourceClaims, testing::Claim("team", "one", "gpu"));
  const RequestFunnel f = Funnel("one");
  EXPECT_EQ(f.matching, 1);
  EXPECT_EQ(f.untainted, 0);
  EXPECT_EQ(f.reason, PendingReason::kTainted);
  ASSERT_TRUE(f.nearest.has_value());
  EXPECT_EQ(f.nearest->taint, "dralens.dev/xid:NoSchedule");
  EXPECT_NE(FunnelText(f).find("would match with a toleration for dralens.dev/xid:NoSchedule"),
            std::string::npos);
}

TEST_F(ExplainTest, DevicesOnNodesDownAreNotFree) {
  Add(k8s::kNodes, testing::Node("a", false));
  Add(k8s::kResourceSlices, testing::Slice("a", Gpus("a", 2)));
  Add(k8s::kResourceClaims, testing::Claim("team", "one", "gpu"));
  const RequestFunnel f = Funnel("one");
  EXPECT_EQ(f.untainted, 2);
  EXPECT_EQ(f.free, 0);
  EXPECT_EQ(f.node_down, 2);
  EXPECT_EQ(f.reason, PendingReason::kNoCapacity);
  EXPECT_NE(FunnelText(f).find("0 free (2 on NotReady or gone nodes)"), std::string::npos);
}

TEST_F(ExplainTest, MissingClassAndUnknownClaim) {
  Add(k8s::kResourceClaims, testing::Claim("team", "lost", "no-such-class"));
  const RequestFunnel f = Funnel("lost");
  EXPECT_FALSE(f.class_exists);
  EXPECT_EQ(f.reason, PendingReason::kUnsatisfiable);
  EXPECT_EQ(FunnelText(f), "class no-such-class does not exist");
  EXPECT_FALSE(analyzer_.Explain("team", "nobody").has_value());
}

TEST_F(ExplainTest, FirstAvailableExplainsEachOption) {
  Add(k8s::kResourceSlices, testing::Slice("a", Gpus("a", 1)));
  nlohmann::json claim = testing::Claim("team", "either", "gpu");
  claim["spec"]["devices"]["requests"] =
      nlohmann::json::array({{{"name", "req"},
                              {"firstAvailable",
                               {{{"name", "h200"},
                                 {"deviceClassName", "gpu"},
                                 {"selectors", {{{"cel", {{"expression", kH200}}}}}}},
                                {{"name", "any"}, {"deviceClassName", "gpu"}, {"count", 2}}}}}});
  Add(k8s::kResourceClaims, claim);
  const RequestFunnel f = Funnel("either");
  ASSERT_EQ(f.options.size(), 2u);
  EXPECT_EQ(f.options[0].request, "req/h200");
  EXPECT_EQ(f.options[0].reason, PendingReason::kUnsatisfiable);
  EXPECT_EQ(f.options[1].request, "req/any");
  EXPECT_EQ(f.options[1].reason, PendingReason::kUnsatisfiable);  // 1 device, needs 2
  EXPECT_EQ(f.reason, PendingReason::kUnsatisfiable);
  EXPECT_NE(FunnelText(f).find("first available of [req/h200: class gpu: 1 device;"),
            std::string::npos)
      << FunnelText(f);
}

// Claims that ask the same thing share one request record; each is still explained under its own
// request names, and one claim going leaves the other's request whole.
TEST_F(ExplainTest, EqualRequestsUnderOtherNamesKeepTheirNames) {
  Add(k8s::kResourceSlices, testing::Slice("a", Gpus("a", 1)));
  auto either = [](const std::string& name, const std::string& request, const std::string& a,
                   const std::string& b) {
    nlohmann::json claim = testing::Claim("team", name, "gpu");
    claim["metadata"]["uid"] = "uid-" + name;
    claim["spec"]["devices"]["requests"] =
        nlohmann::json::array({{{"name", request},
                                {"firstAvailable",
                                 {{{"name", a},
                                   {"deviceClassName", "gpu"},
                                   {"selectors", {{{"cel", {{"expression", kH200}}}}}}},
                                  {{"name", b}, {"deviceClassName", "gpu"}, {"count", 2}}}}}});
    return claim;
  };
  const nlohmann::json first = either("first", "req", "h200", "any");
  Add(k8s::kResourceClaims, first);
  Add(k8s::kResourceClaims, either("same", "req", "h200", "any"));
  Add(k8s::kResourceClaims, either("renamed", "gpus", "h200", "any"));
  Add(k8s::kResourceClaims, either("options-renamed", "req", "big", "small"));
  HandlersFor(k8s::kResourceClaims, analyzer_).on_delete(first);
  EXPECT_EQ(Funnel("same").options[0].request, "req/h200");
  EXPECT_EQ(Funnel("renamed").request, "gpus");
  EXPECT_EQ(Funnel("renamed").options[1].request, "gpus/any");
  EXPECT_EQ(Funnel("options-renamed").options[0].request, "req/big");
  EXPECT_EQ(Funnel("options-renamed").options[1].request, "req/small");
  EXPECT_EQ(Funnel("same").reason, PendingReason::kUnsatisfiable);
}

TEST_F(ExplainTest, AllocatedClaimLandingUseAndCost) {
  nlohmann::json slice = testing::Slice("a", Gpus("a", 2));
  for (int i = 0; i < 2; ++i) {
    slice["spec"]["devices"][i]["attributes"]["resource.kubernetes.io/numaNode"] = {{"int", i}};
  }
  Add(k8s::kResourceSlices, slice);
  nlohmann::json claim = Holding("job", {"gpu-0", "gpu-1"});
  claim["status"]["allocation"]["allocationTimestamp"] =
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", clock_.Now(), absl::UTCTimeZone());
  claim["status"]["reservedFor"] = {{{"resource", "pods"}, {"name", "job-0"}, {"uid", "p"}}};
  Add(k8s::kResourceClaims, claim);
  Add(k8s::kPods, {{"apiVersion", "v1"},
                   {"kind", "Pod"},
                   {"metadata", {{"namespace", "team"}, {"name", "job-0"}, {"uid", "p"}}},
                   {"spec", {{"nodeName", "a"}}},
                   {"status", {{"phase", "Running"}}}});
  clock_.Advance(absl::Minutes(30));
  std::optional<ClaimExplanation> e = analyzer_.Explain("team", "job");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->state, ClaimState::kInUse);
  ASSERT_EQ(e->devices.size(), 2u);
  EXPECT_EQ(e->devices[0].node, "a");
  EXPECT_EQ(e->devices[1].numa_node, 1);
  ASSERT_TRUE(e->topology.has_value());
  EXPECT_EQ(e->topology->spread, TopologySpread::kCrossNuma);
  EXPECT_EQ(e->topology->nvlink, NvlinkReach::kNotConnected);
  EXPECT_EQ(e->running_pods, (std::vector<std::string>{"team/job-0"}));
  EXPECT_DOUBLE_EQ(e->gpus, 2);
  EXPECT_DOUBLE_EQ(e->gpu_seconds, 2 * 1800);
  EXPECT_DOUBLE_EQ(e->cost, 3.6);  // 2 GPUs x 0.5 h x 3.6 per GPU-hour
  const std::string text = ExplanationText(*e);
  EXPECT_NE(text.find("Topology: cross_numa, NVLink not_connected"), std::string::npos) << text;
  EXPECT_NE(text.find("pod team/job-0 (Running)"), std::string::npos) << text;
  EXPECT_NE(text.find("Cost:     3.60 so far (1.000 GPU-hours"), std::string::npos) << text;
  const nlohmann::json j = ExplanationJson(*e);
  EXPECT_EQ(j["state"], "in_use");
  EXPECT_EQ(j["spread"], "cross_numa");
  EXPECT_DOUBLE_EQ(j["cost"].get<double>(), 3.6);
}

TEST(ExplainSyncTest, AllocationTimeIsUnknownForClaimsAllocatedBeforeTheView) {
  prometheus::Registry registry;
  telemetry::NoopTracer tracer;
  common::FakeClock clock;
  AnalyzerOptions options{PriceTable{}, &clock};
  options.derive_after_sync = true;
  Analyzer analyzer(registry, tracer, options);
  HandlersFor(k8s::kDeviceClasses, analyzer).on_add(testing::Class("gpu", "true"));
  HandlersFor(k8s::kResourceSlices, analyzer).on_add(testing::Slice("a", Gpus("a", 2)));
  // In the initial LIST, already allocated, no allocationTimestamp.
  HandlersFor(k8s::kResourceClaims, analyzer).on_add(Holding("old", {"gpu-0"}));
  HandlersFor(k8s::kResourceClaims, analyzer).on_add(testing::Claim("team", "new", "gpu"));
  analyzer.SetNodesSynced();
  analyzer.SetSynced();
  // Allocated while watched: from then on.
  clock.Advance(absl::Minutes(1));
  nlohmann::json now_allocated = Holding("new", {"gpu-1"});
  now_allocated["metadata"].erase("uid");
  HandlersFor(k8s::kResourceClaims, analyzer).on_update(now_allocated, now_allocated);
  clock.Advance(absl::Hours(1));
  std::optional<ClaimExplanation> old_claim = analyzer.Explain("team", "old");
  ASSERT_TRUE(old_claim.has_value());
  EXPECT_FALSE(old_claim->allocated_at.has_value());
  EXPECT_NE(ExplanationText(*old_claim).find("Cost:     unknown"), std::string::npos);
  EXPECT_FALSE(ExplanationJson(*old_claim).contains("cost"));
  std::optional<ClaimExplanation> new_claim = analyzer.Explain("team", "new");
  ASSERT_TRUE(new_claim.has_value());
  ASSERT_TRUE(new_claim->allocated_at.has_value());
  EXPECT_EQ(clock.Now() - *new_claim->allocated_at, absl::Hours(1));
}

// What a claim cost stays with it when it is deallocated, adds up over its allocations, and is
// on its lifecycle span when it is deleted.
TEST(ClaimCostTest, AddsUpOverAllocationsAndLandsOnTheSpan) {
  common::FakeClock clock;
  auto exporter = std::make_unique<telemetry::InMemorySpanExporter>();
  auto spans = exporter->storage();
  auto tracing = telemetry::TracerProvider::CreateWithExporter(
      std::move(exporter), telemetry::SamplerConfig{}, {}, clock);
  prometheus::Registry registry;
  AnalyzerOptions options{PriceTable{}, &clock};
  options.prices.by_class["gpu"] = 2;
  auto analyzer = std::make_unique<Analyzer>(registry, tracing->tracer(), options);
  HandlersFor(k8s::kDeviceClasses, *analyzer).on_add(testing::Class("gpu", "true"));
  HandlersFor(k8s::kResourceSlices, *analyzer).on_add(testing::Slice("a", Gpus("a", 2)));
  k8s::InformerHandlers claims = HandlersFor(k8s::kResourceClaims, *analyzer);
  nlohmann::json pending = testing::Claim("team", "job", "gpu", "", 2);
  pending["metadata"]["uid"] = "uid-job";
  claims.on_add(pending);
  nlohmann::json held = Holding("job", {"gpu-0", "gpu-1"});
  claims.on_update(pending, held);  // allocated now: 2 GPUs
  clock.Advance(absl::Minutes(30));
  claims.on_update(held, pending);  // deallocated after 1 GPU-hour
  clock.Advance(absl::Hours(5));    // pending costs nothing
  claims.on_update(pending, held);
  clock.Advance(absl::Minutes(15));
  std::optional<ClaimExplanation> e = analyzer->Explain("team", "job");
  ASSERT_TRUE(e.has_value());
  EXPECT_DOUBLE_EQ(e->gpu_seconds, 3600 + 1800);
  EXPECT_DOUBLE_EQ(e->cost, 3);
  claims.on_delete(held);
  analyzer.reset();
  ASSERT_TRUE(tracing->ForceFlush(absl::Now() + absl::Seconds(5)));
  std::map<std::string, telemetry::AttributeValue> attributes;
  for (const telemetry::SpanData& s : spans->spans()) {
    if (s.name == "ResourceClaim") {
      for (const telemetry::Attribute& a : s.attributes) {
        attributes[a.key] = a.value;
      }
    }
  }
  ASSERT_TRUE(attributes.count("dralens.claim.gpu_hours"));
  EXPECT_DOUBLE_EQ(std::get<double>(attributes["dralens.claim.gpu_hours"]), 1.5);
  EXPECT_DOUBLE_EQ(std::get<double>(attributes["dralens.claim.cost"]), 3);
  tracing->Shutdown(absl::Now() + absl::Seconds(5));
}

TEST(PendingNoteTest, EveryRequestAndAtMostOneKilobyteOnACharacterBoundary) {
  ClaimExplanation e;
  RequestFunnel a;
  a.request = "a";
  a.device_class = "gpu";
  RequestFunnel b = a;
  b.request = "b";
  e.requests = {a, b};
  const std::string note = PendingNote(e);
  EXPECT_EQ(note.find("request a: class gpu: 0 devices"), 0u) << note;
  EXPECT_NE(note.find(" | request b: "), std::string::npos) << note;

  e.requests[0].device_class = std::string(1100, 'x') + "\xc3\xa9";  // ends in a 2-byte letter
  for (size_t max : {size_t{1024}, size_t{40}, size_t{41}, size_t{42}}) {
    const std::string cut = PendingNote(e, max);
    EXPECT_LE(cut.size(), max);
    EXPECT_EQ(cut.substr(cut.size() - 3), "...");
  }
  e.requests[0].device_class = "\xc3\xa9\xc3\xa9\xc3\xa9";
  e.requests.resize(1);
  // "request a: class " is 17 bytes: a cut at 22 keeps whole letters only.
  const std::string cut = PendingNote(e, 22);
  EXPECT_EQ(cut, "request a: class \xc3\xa9...");
}

TEST(EventReasonTest, CamelCaseOfEachPendingReason) {
  EXPECT_EQ(EventReason(PendingReason::kUnsatisfiable), "Unsatisfiable");
  EXPECT_EQ(EventReason(PendingReason::kUnknown), "Unknown");
  EXPECT_EQ(EventReason(PendingReason::kTainted), "Tainted");
  EXPECT_EQ(EventReason(PendingReason::kNoCapacity), "NoCapacity");
  EXPECT_EQ(EventReason(PendingReason::kWaitingForPod), "WaitingForPod");
}

}  // namespace
}  // namespace dralens::exporter::cluster
