// What a prepare and an unprepare leave in the metrics and in the trace: series that change
// when they should, spans in the claim's lifecycle trace, and an exemplar that points at it.
#include "driver/prepare/prepare_telemetry.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/discovery/device_source.h"
#include "driver/prepare/claim_preparer.h"
#include "driver/slices/slice_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/telemetry/exposition.h"
#include "src/telemetry/tracing/in_memory_span_exporter.h"
#include "src/telemetry/tracing/sampler.h"
#include "src/telemetry/tracing/simple_span_processor.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "tests/driver/prepare/prepare_test_util.h"

namespace dralens::driver::prepare {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr char kDriver[] = "gpu.dralens.dev";
constexpr char kNode[] = "node-a";
constexpr char kNs[] = "ml";

// The value of one series, or nullopt when the series does not exist.
std::optional<double> Value(prometheus::Registry& registry, const std::string& family,
                            const std::map<std::string, std::string>& labels,
                            const std::string& what = "value") {
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    if (f.name != family) {
      continue;
    }
    for (const prometheus::ClientMetric& m : f.metric) {
      std::map<std::string, std::string> have;
      for (const auto& l : m.label) {
        have[l.name] = l.value;
      }
      if (have != labels) {
        continue;
      }
      switch (f.type) {
        case prometheus::MetricType::Counter:
          return m.counter.value;
        case prometheus::MetricType::Gauge:
          return m.gauge.value;
        case prometheus::MetricType::Histogram:
          return what == "sum" ? m.histogram.sample_sum
                               : static_cast<double>(m.histogram.sample_count);
        default:
          return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

class PrepareTelemetryTest : public ::testing::Test {
 protected:
  PrepareTelemetryTest() : h_(testing::Options(kNode)), inventory_(h_.inventory()) {}

  // Creates a claim; allocates `device` to it unless empty.
  ClaimRef MakeClaim(const std::string& name, const std::string& device) {
    return testing::CreateClaim(h_.client(), kNs, name, "gpu", kDriver, kDriver, kNode, device);
  }

  std::vector<telemetry::SpanData> SpansNamed(const std::string& name) { return h_.Spans(name); }

  static std::string Attribute(const telemetry::SpanData& span, const std::string& key) {
    for (const telemetry::Attribute& a : span.attributes) {
      if (a.key == key && std::holds_alternative<std::string>(a.value)) {
        return std::get<std::string>(a.value);
      }
    }
    return "";
  }

  double Claims(const std::string& operation, const std::string& result,
                const std::string& reason) {
    return Value(h_.registry(), "dralens_node_claims_total",
                 {{"operation", operation}, {"result", result}, {"reason", reason}})
        .value_or(0);
  }

  testing::PrepareHarness h_;
  const model::Inventory inventory_;
  ClaimPreparer* preparer_ = &h_.preparer();
  prometheus::Registry* registry_ = &h_.registry();
};

TEST_F(PrepareTelemetryTest, DevicesAreDescribedBeforeAnyClaim) {
  EXPECT_EQ(Value(*registry_, "dralens_device_state", {{"device", "gpu-3"}, {"state", "free"}}), 1);
  EXPECT_EQ(Value(*registry_, "dralens_device_state", {{"device", "gpu-3"}, {"state", "prepared"}}),
            0);
  EXPECT_EQ(Value(*registry_, "dralens_device_memory_bytes", {{"device", "gpu-3"}}),
            static_cast<double>(inventory_.FindGpuByMinor(3)->memory_bytes));
  EXPECT_EQ(Value(*registry_, "dralens_node_prepared_claims", {}), 0);
  const model::GpuInfo& gpu = *inventory_.FindGpuByMinor(3);
  EXPECT_EQ(Value(*registry_, "dralens_device_info",
                  {{"device", "gpu-3"},
                   {"uuid", gpu.uuid},
                   {"product", "NVIDIA H100 80GB HBM3"},
                   {"type", "gpu"},
                   {"parent", ""},
                   {"profile", ""},
                   {"numa_node", gpu.numa_node ? absl::StrCat(*gpu.numa_node) : ""},
                   {"pci_bus_id", gpu.pci_bus_id}}),
            1);
}

TEST_F(PrepareTelemetryTest, APrepareMovesTheSeriesAndLeavesATraceTheExemplarPointsAt) {
  const ClaimRef claim = MakeClaim("train", "gpu-3");
  auto out = h_.Prepare({claim});
  ASSERT_EQ(out[claim.uid].error, "");

  EXPECT_EQ(Claims("prepare", "ok", "none"), 1);
  EXPECT_EQ(Value(*registry_, "dralens_node_claim_duration_seconds",
                  {{"operation", "prepare"}, {"result", "ok"}}),
            1);
  for (const char* phase : {"fetch_claim", "cdi"}) {
    EXPECT_EQ(Value(*registry_, "dralens_node_phase_duration_seconds", {{"phase", phase}}), 1)
        << phase;
  }
  EXPECT_EQ(Value(*registry_, "dralens_node_phase_duration_seconds", {{"phase", "checkpoint"}}),
            2);  // PrepareStarted, PrepareCompleted
  EXPECT_EQ(Value(*registry_, "dralens_node_checkpoint_writes_total", {{"result", "ok"}}), 2);
  EXPECT_EQ(Value(*registry_, "dralens_node_in_flight", {{"operation", "prepare"}}), 0);
  EXPECT_EQ(Value(*registry_, "dralens_node_prepared_claims", {}), 1);
  EXPECT_EQ(Value(*registry_, "dralens_node_prepared_devices", {{"type", "gpu"}}), 1);
  EXPECT_EQ(Value(*registry_, "dralens_device_state", {{"device", "gpu-3"}, {"state", "prepared"}}),
            1);
  EXPECT_EQ(Value(*registry_, "dralens_device_state", {{"device", "gpu-3"}, {"state", "free"}}), 0);
  EXPECT_EQ(Value(*registry_, "dralens_device_consumers", {{"device", "gpu-3"}}), 1);
  EXPECT_EQ(Value(*registry_, "dralens_device_consumers", {{"device", "gpu-4"}}), 0);

  // The claim's span is a root in the claim's lifecycle trace, with a child per phase.
  const std::string trace = telemetry::TraceIdFromClaimUid(claim.uid).ToHex();
  std::vector<telemetry::SpanData> roots = SpansNamed("PrepareClaim");
  ASSERT_THAT(roots, SizeIs(1));
  const telemetry::SpanData& root = roots[0];
  EXPECT_EQ(root.context.trace_id.ToHex(), trace);
  EXPECT_FALSE(root.parent_span_id.IsValid());
  EXPECT_EQ(root.status_code, telemetry::StatusCode::kOk);
  EXPECT_EQ(Attribute(root, "k8s.resourceclaim.uid"), claim.uid);
  EXPECT_EQ(Attribute(root, "k8s.resourceclaim.name"), "train");
  EXPECT_EQ(Attribute(root, "k8s.namespace.name"), kNs);
  EXPECT_EQ(Attribute(root, "dra.pool"), kNode);
  EXPECT_EQ(Attribute(root, "dra.device"), "gpu-3");
  std::vector<std::string> children;
  for (const telemetry::SpanData& s : h_.AllSpans()) {
    if (s.parent_span_id == root.context.span_id) {
      EXPECT_EQ(s.context.trace_id, root.context.trace_id);
      children.push_back(s.name);
    }
  }
  std::sort(children.begin(), children.end());
  EXPECT_THAT(children,
              ::testing::ElementsAre("cdi", "checkpoint", "checkpoint", "fetch_claim", "sharing"));

  // The duration histogram's exemplar is that trace.
  const std::string om = telemetry::Render(registry_->Collect(), &h_.exemplars(),
                                           telemetry::ExpositionFormat::kOpenMetrics);
  EXPECT_THAT(
      om,
      HasSubstr(absl::StrCat(
          R"(dralens_node_claim_duration_seconds_bucket{operation="prepare",result="ok",le=")")));
  EXPECT_THAT(om, HasSubstr(absl::StrCat("# {trace_id=\"", trace, "\"}")));

  // A replay from the checkpoint is one more successful claim, without a fetch.
  out = h_.Prepare({claim});
  ASSERT_EQ(out[claim.uid].error, "");
  EXPECT_EQ(Claims("prepare", "ok", "none"), 2);
  EXPECT_EQ(Value(*registry_, "dralens_node_phase_duration_seconds", {{"phase", "fetch_claim"}}),
            1);
  EXPECT_EQ(Value(*registry_, "dralens_node_prepared_claims", {}), 1);

  // Unprepare frees the device.
  auto un = h_.Unprepare({claim});
  ASSERT_EQ(un[claim.uid], "");
  EXPECT_EQ(Claims("unprepare", "ok", "none"), 1);
  EXPECT_EQ(Value(*registry_, "dralens_node_prepared_claims", {}), 0);
  EXPECT_EQ(Value(*registry_, "dralens_device_state", {{"device", "gpu-3"}, {"state", "free"}}), 1);
  EXPECT_EQ(Value(*registry_, "dralens_device_consumers", {{"device", "gpu-3"}}), 0);
  ASSERT_THAT(SpansNamed("UnprepareClaim"), SizeIs(1));
  EXPECT_EQ(SpansNamed("UnprepareClaim")[0].context.trace_id.ToHex(), trace);
}

// The kubelet call lives in its own trace; each claim span links back to the call that carried
// it, and every state change of the claim is an event on it.
TEST_F(PrepareTelemetryTest, EachClaimSpanLinksToTheKubeletCallAndCarriesItsStateEvents) {
  const ClaimRef a = MakeClaim("linked-a", "gpu-5");
  const ClaimRef b = MakeClaim("linked-b", "gpu-6");
  telemetry::SpanContext call;
  call.trace_id = *telemetry::TraceId::FromHex("4bf92f3577b34da6a3ce929d0e0e4736");
  call.span_id = *telemetry::SpanId::FromHex("00f067aa0ba902b7");
  call.trace_flags = telemetry::kTraceFlagSampled;
  ASSERT_TRUE(call.IsValid());
  auto out = h_.Prepare({a, b}, KubeletCall{.span = call});
  ASSERT_EQ(out[a.uid].error, "");
  ASSERT_EQ(out[b.uid].error, "");
  std::vector<telemetry::SpanData> claims = SpansNamed("PrepareClaim");
  ASSERT_THAT(claims, SizeIs(2));
  for (const telemetry::SpanData& span : claims) {
    ASSERT_THAT(span.links, SizeIs(1));
    EXPECT_EQ(span.links[0].context.trace_id, call.trace_id);
    EXPECT_EQ(span.links[0].context.span_id, call.span_id);
    std::vector<std::string> states;
    for (const telemetry::SpanEvent& e : span.events) {
      if (e.name == "claim state") {
        states.push_back(std::get<std::string>(e.attributes.at(1).value));
      }
    }
    EXPECT_EQ(states, (std::vector<std::string>{"PrepareStarted", "PrepareCompleted"}));
  }
  // Without a call span (tracing off at the kubelet side), no link.
  const ClaimRef c = MakeClaim("unlinked", "gpu-7");
  ASSERT_EQ(h_.Prepare({c})[c.uid].error, "");
  for (const telemetry::SpanData& span : SpansNamed("PrepareClaim")) {
    if (Attribute(span, "k8s.resourceclaim.uid") == c.uid) {
      EXPECT_THAT(span.links, IsEmpty());
    }
  }
}

TEST_F(PrepareTelemetryTest, EveryFailureHasItsReasonOnTheCounterAndTheSpan) {
  const ClaimRef holder = MakeClaim("holder", "gpu-1");
  ASSERT_EQ(h_.Prepare({holder})[holder.uid].error, "");

  const ClaimRef busy = MakeClaim("busy", "gpu-1");
  const ClaimRef unallocated = MakeClaim("pending", "");
  const ClaimRef foreign = MakeClaim("foreign", "gpu-99");
  const ClaimRef missing{kNs, "11111111-2222-3333-4444-555555555555", "no-such-claim"};
  const ClaimRef replaced{kNs, "66666666-2222-3333-4444-555555555555", "holder"};
  const ClaimRef invalid{kNs, "../../etc/passwd", "holder"};
  auto out = h_.Prepare({busy, unallocated, foreign, missing, replaced, invalid});
  ASSERT_THAT(out, SizeIs(6));
  for (const auto& [uid, result] : out) {
    EXPECT_NE(result.error, "") << uid;
  }
  EXPECT_EQ(Claims("prepare", "error", "device_busy"), 1);
  EXPECT_EQ(Claims("prepare", "error", "not_allocated"), 1);
  EXPECT_EQ(Claims("prepare", "error", "foreign_device"), 1);
  EXPECT_EQ(Claims("prepare", "error", "claim_not_found"), 1);
  EXPECT_EQ(Claims("prepare", "error", "claim_replaced"), 1);
  EXPECT_EQ(Claims("prepare", "error", "invalid_request"), 1);
  EXPECT_EQ(Value(*registry_, "dralens_node_claim_duration_seconds",
                  {{"operation", "prepare"}, {"result", "error"}}),
            6);
  // The device the refused claim wanted is still the holder's alone.
  EXPECT_EQ(Value(*registry_, "dralens_device_consumers", {{"device", "gpu-1"}}), 1);

  int errors = 0;
  for (const telemetry::SpanData& s : SpansNamed("PrepareClaim")) {
    if (s.status_code == telemetry::StatusCode::kError) {
      ++errors;
      EXPECT_NE(s.status_message, "");
      EXPECT_NE(Attribute(s, "error.type"), "");
    }
  }
  EXPECT_EQ(errors, 6);
}

TEST_F(PrepareTelemetryTest, DevicesThatLeaveTheInventoryLoseTheirSeries) {
  ASSERT_TRUE(Value(*registry_, "dralens_device_memory_bytes", {{"device", "gpu-7"}}).has_value());
  std::vector<model::GpuInfo> gpus(inventory_.gpus().begin(), inventory_.gpus().end() - 1);
  auto smaller = model::Inventory::Create(inventory_.driver_version(),
                                          inventory_.cuda_driver_version(), gpus, {});
  ASSERT_TRUE(smaller.ok()) << smaller.status();
  h_.preparation().SetInventory(*smaller);
  EXPECT_FALSE(Value(*registry_, "dralens_device_memory_bytes", {{"device", "gpu-7"}}).has_value());
  EXPECT_FALSE(Value(*registry_, "dralens_device_state", {{"device", "gpu-7"}, {"state", "free"}})
                   .has_value());
  EXPECT_TRUE(Value(*registry_, "dralens_device_memory_bytes", {{"device", "gpu-6"}}).has_value());
}

// Many claims at once share checkpoint writes, and every one of them is durable when it
// returns: a fresh store reads all of them back.
TEST_F(PrepareTelemetryTest, ConcurrentPreparesShareCheckpointWritesAndLoseNothing) {
  std::vector<ClaimRef> claims;
  for (int i = 0; i < 8; ++i) {
    claims.push_back(MakeClaim(absl::StrCat("c", i), absl::StrCat("gpu-", i)));
  }
  std::vector<std::thread> threads;
  std::vector<std::string> errors(claims.size());
  for (size_t i = 0; i < claims.size(); ++i) {
    threads.emplace_back([&, i] { errors[i] = h_.Prepare({claims[i]})[claims[i].uid].error; });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  for (const std::string& e : errors) {
    EXPECT_EQ(e, "");
  }
  EXPECT_EQ(Claims("prepare", "ok", "none"), 8);
  const double writes =
      Value(*registry_, "dralens_node_checkpoint_writes_total", {{"result", "ok"}}).value_or(0);
  EXPECT_GE(writes, 1);
  EXPECT_LE(writes, 16);  // two per claim at most; fewer when they shared a write

  FileCheckpointStore fresh(CheckpointPath(h_.dir().Join("plugins"), kDriver), "boot-1",
                            common::RealClock());
  auto loaded = fresh.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_THAT(loaded->checkpoint.claims, SizeIs(8));
  for (const auto& [uid, c] : loaded->checkpoint.claims) {
    EXPECT_EQ(c.state, ClaimState::kPrepareCompleted) << uid;
  }
}

TEST_F(PrepareTelemetryTest, MigLayoutShowsDevicesByStateAndWhatStillFits) {
  auto source = discovery::MakeDeviceSource("simulated", "mixed", kNode);
  ASSERT_TRUE(source.ok()) << source.status();
  auto mixed = (*source)->Discover();
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  ASSERT_FALSE(mixed->mig_devices().empty());
  h_.preparation().SetInventory(*mixed);

  const model::MigDevice& mig = mixed->mig_devices().front();
  const model::GpuInfo& parent = *mixed->FindGpuByUuid(mig.parent_uuid);
  const std::string parent_name = absl::StrCat("gpu-", parent.minor);
  int same_profile = 0;
  for (const model::MigDevice& m : mixed->mig_devices()) {
    same_profile += m.parent_uuid == mig.parent_uuid && m.ProfileName() == mig.ProfileName();
  }
  const std::map<std::string, std::string> free_labels = {
      {"parent", parent_name}, {"profile", mig.ProfileName()}, {"state", "free"}};
  const std::map<std::string, std::string> prepared_labels = {
      {"parent", parent_name}, {"profile", mig.ProfileName()}, {"state", "prepared"}};
  EXPECT_EQ(Value(*registry_, "dralens_mig_devices", free_labels), same_profile);
  EXPECT_EQ(Value(*registry_, "dralens_mig_devices", prepared_labels), 0);
  for (const model::MigPlaceable& p : mixed->PlaceableCountsOf(parent.uuid)) {
    EXPECT_EQ(Value(*registry_, "dralens_mig_placeable",
                    {{"parent", parent_name}, {"profile", p.profile}}),
              p.count)
        << p.profile;
  }
  // GPUs not in MIG mode have no placeable series.
  for (const model::GpuInfo& gpu : mixed->gpus()) {
    if (!gpu.mig_enabled()) {
      EXPECT_FALSE(Value(*registry_, "dralens_mig_placeable",
                         {{"parent", absl::StrCat("gpu-", gpu.minor)}, {"profile", "1g.10gb"}})
                       .has_value());
    }
  }

  // Preparing the MIG device moves one instance from free to prepared.
  const std::string device = slices::MigDeviceName(mig);
  const ClaimRef claim = MakeClaim("slice", device);
  ASSERT_EQ(h_.Prepare({claim})[claim.uid].error, "");
  EXPECT_EQ(Value(*registry_, "dralens_mig_devices", free_labels), same_profile - 1);
  EXPECT_EQ(Value(*registry_, "dralens_mig_devices", prepared_labels), 1);
  EXPECT_EQ(Value(*registry_, "dralens_node_prepared_devices", {{"type", "mig"}}), 1);
  EXPECT_EQ(Value(*registry_, "dralens_device_state", {{"device", device}, {"state", "prepared"}}),
            1);

  // Back to a node without MIG: the MIG series go away.
  ASSERT_EQ(h_.Unprepare({claim})[claim.uid], "");
  h_.preparation().SetInventory(inventory_);
  EXPECT_FALSE(Value(*registry_, "dralens_mig_devices", free_labels).has_value());
  EXPECT_FALSE(Value(*registry_, "dralens_mig_placeable",
                     {{"parent", parent_name}, {"profile", mig.profile.name}})
                   .has_value());
}

TEST(FailureReasonTest, TravelsInTheStatusAndDefaultsToInternal) {
  EXPECT_EQ(ReasonOf(absl::OkStatus()), FailureReason::kNone);
  EXPECT_EQ(ReasonOf(absl::UnknownError("x")), FailureReason::kInternal);
  absl::Status s = WithReason(absl::UnavailableError("down"), FailureReason::kApiError);
  EXPECT_EQ(ReasonOf(s), FailureReason::kApiError);
  // The first reason sticks: outer layers annotate, they do not reclassify.
  EXPECT_EQ(ReasonOf(WithReason(s, FailureReason::kCdiError)), FailureReason::kApiError);
  EXPECT_TRUE(WithReason(absl::OkStatus(), FailureReason::kCdiError).ok());
}

}  // namespace
}  // namespace dralens::driver::prepare
