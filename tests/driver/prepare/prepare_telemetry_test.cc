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
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
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
  void SetUp() override {
    rest_ = testing::StartApiServer(server_);
    ASSERT_NE(rest_, nullptr);
    auto source = discovery::MakeDeviceSource("simulated", "dgx-h100", kNode);
    ASSERT_TRUE(source.ok()) << source.status();
    auto inventory = (*source)->Discover();
    ASSERT_TRUE(inventory.ok()) << inventory.status();
    inventory_ = *inventory;

    auto exporter = std::make_unique<telemetry::InMemorySpanExporter>();
    spans_ = exporter->storage();
    processor_ = std::make_unique<telemetry::SimpleSpanProcessor>(std::move(exporter), stats_);
    tracer_ = std::make_unique<telemetry::TracerImpl>(*processor_, telemetry::MakeAlwaysOnSampler(),
                                                      common::RealClock());
    metrics_ = std::make_unique<PrepareMetrics>(*registry_, exemplars_);

    store_ = std::make_unique<FileCheckpointStore>(CheckpointPath(dir_.Join("plugins"), kDriver),
                                                   "boot-1", common::RealClock());
    cdi_ = std::make_unique<FileCdiWriter>(dir_.Join("cdi"));
    ClaimPreparerOptions options;
    options.driver_name = kDriver;
    options.pool_name = kNode;
    options.metrics = metrics_.get();
    options.tracer = tracer_.get();
    auto preparer = ClaimPreparer::Create(options, *rest_, *store_, *cdi_, states_, inventory_);
    ASSERT_TRUE(preparer.ok()) << preparer.status();
    preparer_ = *std::move(preparer);
  }

  // Creates a claim; allocates `device` to it unless empty.
  ClaimRef MakeClaim(const std::string& name, const std::string& device) {
    return testing::CreateClaim(*rest_, kNs, name, "gpu", kDriver, kDriver, kNode, device);
  }

  std::vector<telemetry::SpanData> SpansNamed(const std::string& name) {
    std::vector<telemetry::SpanData> out;
    for (const telemetry::SpanData& s : spans_->spans()) {
      if (s.name == name) {
        out.push_back(s);
      }
    }
    return out;
  }

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
    return Value(*registry_, "dralens_node_claims_total",
                 {{"operation", operation}, {"result", result}, {"reason", reason}})
        .value_or(0);
  }

  testing::TempDir dir_;
  sim::ApiServer server_;
  std::unique_ptr<k8s::RestClient> rest_;
  model::Inventory inventory_;
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  telemetry::ExemplarStore exemplars_;
  telemetry::TracingStats stats_;
  std::shared_ptr<telemetry::InMemorySpanExporter::Storage> spans_;
  std::unique_ptr<telemetry::SimpleSpanProcessor> processor_;
  std::unique_ptr<telemetry::TracerImpl> tracer_;
  std::unique_ptr<PrepareMetrics> metrics_;
  std::unique_ptr<FileCheckpointStore> store_;
  std::unique_ptr<FileCdiWriter> cdi_;
  ClaimStateMachine states_;
  std::unique_ptr<ClaimPreparer> preparer_;
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
  auto out = preparer_->Prepare({claim});
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
  for (const telemetry::SpanData& s : spans_->spans()) {
    if (s.parent_span_id == root.context.span_id) {
      EXPECT_EQ(s.context.trace_id, root.context.trace_id);
      children.push_back(s.name);
    }
  }
  std::sort(children.begin(), children.end());
  EXPECT_THAT(children,
              ::testing::ElementsAre("cdi", "checkpoint", "checkpoint", "fetch_claim", "sharing"));

  // The duration histogram's exemplar is that trace.
  const std::string om = telemetry::Render(registry_->Collect(), &exemplars_,
                                           telemetry::ExpositionFormat::kOpenMetrics);
  EXPECT_THAT(
      om,
      HasSubstr(absl::StrCat(
          R"(dralens_node_claim_duration_seconds_bucket{operation="prepare",result="ok",le=")")));
  EXPECT_THAT(om, HasSubstr(absl::StrCat("# {trace_id=\"", trace, "\"}")));

  // A replay from the checkpoint is one more successful claim, without a fetch.
  out = preparer_->Prepare({claim});
  ASSERT_EQ(out[claim.uid].error, "");
  EXPECT_EQ(Claims("prepare", "ok", "none"), 2);
  EXPECT_EQ(Value(*registry_, "dralens_node_phase_duration_seconds", {{"phase", "fetch_claim"}}),
            1);
  EXPECT_EQ(Value(*registry_, "dralens_node_prepared_claims", {}), 1);

  // Unprepare frees the device.
  auto un = preparer_->Unprepare({claim});
  ASSERT_EQ(un[claim.uid], "");
  EXPECT_EQ(Claims("unprepare", "ok", "none"), 1);
  EXPECT_EQ(Value(*registry_, "dralens_node_prepared_claims", {}), 0);
  EXPECT_EQ(Value(*registry_, "dralens_device_state", {{"device", "gpu-3"}, {"state", "free"}}), 1);
  EXPECT_EQ(Value(*registry_, "dralens_device_consumers", {{"device", "gpu-3"}}), 0);
  ASSERT_THAT(SpansNamed("UnprepareClaim"), SizeIs(1));
  EXPECT_EQ(SpansNamed("UnprepareClaim")[0].context.trace_id.ToHex(), trace);
}

TEST_F(PrepareTelemetryTest, EveryFailureHasItsReasonOnTheCounterAndTheSpan) {
  const ClaimRef holder = MakeClaim("holder", "gpu-1");
  ASSERT_EQ(preparer_->Prepare({holder})[holder.uid].error, "");

  const ClaimRef busy = MakeClaim("busy", "gpu-1");
  const ClaimRef unallocated = MakeClaim("pending", "");
  const ClaimRef foreign = MakeClaim("foreign", "gpu-99");
  const ClaimRef missing{kNs, "11111111-2222-3333-4444-555555555555", "no-such-claim"};
  const ClaimRef replaced{kNs, "66666666-2222-3333-4444-555555555555", "holder"};
  const ClaimRef invalid{kNs, "../../etc/passwd", "holder"};
  auto out = preparer_->Prepare({busy, unallocated, foreign, missing, replaced, invalid});
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
  preparer_->SetInventory(*smaller);
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
    threads.emplace_back(
        [&, i] { errors[i] = preparer_->Prepare({claims[i]})[claims[i].uid].error; });
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

  FileCheckpointStore fresh(CheckpointPath(dir_.Join("plugins"), kDriver), "boot-1",
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
  preparer_->SetInventory(*mixed);

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
  ASSERT_EQ(preparer_->Prepare({claim})[claim.uid].error, "");
  EXPECT_EQ(Value(*registry_, "dralens_mig_devices", free_labels), same_profile - 1);
  EXPECT_EQ(Value(*registry_, "dralens_mig_devices", prepared_labels), 1);
  EXPECT_EQ(Value(*registry_, "dralens_node_prepared_devices", {{"type", "mig"}}), 1);
  EXPECT_EQ(Value(*registry_, "dralens_device_state", {{"device", device}, {"state", "prepared"}}),
            1);

  // Back to a node without MIG: the MIG series go away.
  ASSERT_EQ(preparer_->Unprepare({claim})[claim.uid], "");
  preparer_->SetInventory(inventory_);
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
