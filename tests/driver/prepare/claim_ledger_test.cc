// The claim ledger is the one choke point of claim state: one Transition writes the checkpoint,
// counts the transition, moves the per-state gauge, adds the span event and tells the listener;
// a refused or failed one does none of it.
#include "driver/prepare/claim_ledger.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/telemetry/tracing/in_memory_span_exporter.h"
#include "src/telemetry/tracing/sampler.h"
#include "src/telemetry/tracing/simple_span_processor.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "tests/driver/prepare/prepare_test_util.h"

namespace dralens::driver::prepare {
namespace {

using S = ClaimState;
using ::testing::SizeIs;

constexpr char kUid[] = "0f6b1c1e-8a52-4d4b-9d39-2b8f3c7a9e01";

// A store that can be told to fail its writes.
class FlakyStore final : public CheckpointStore {
 public:
  explicit FlakyStore(CheckpointStore& inner) : inner_(inner) {}
  absl::StatusOr<LoadedCheckpoint> Load() override { return inner_.Load(); }
  absl::Status Save(const Checkpoint& checkpoint) override {
    if (fail_) {
      return absl::InternalError("disk full");
    }
    return inner_.Save(checkpoint);
  }
  bool fail_ = false;

 private:
  CheckpointStore& inner_;
};

class Recorder final : public LedgerListener {
 public:
  void OnLedgerChanged(const CheckpointSnapshot& snapshot) override { seen.push_back(snapshot); }
  std::vector<CheckpointSnapshot> seen;
};

class ClaimLedgerTest : public ::testing::Test {
 protected:
  ClaimLedgerTest()
      : file_(CheckpointPath(dir_.Join("plugins"), "gpu.dralens.dev"), "boot-1", clock_),
        store_(file_) {
    auto exporter = std::make_unique<telemetry::InMemorySpanExporter>();
    spans_ = exporter->storage();
    processor_ = std::make_unique<telemetry::SimpleSpanProcessor>(std::move(exporter), stats_);
    tracer_ = std::make_unique<telemetry::TracerImpl>(*processor_, telemetry::MakeAlwaysOnSampler(),
                                                      common::RealClock());
    Open();
  }

  // The ledger over what the store holds now, as at a start.
  void Open() {
    ledger_.reset();
    journal_.reset();
    registry_ = std::make_unique<prometheus::Registry>();
    journal_metrics_ =
        std::make_unique<CheckpointJournalMetrics>(CheckpointJournalMetrics::Create(*registry_));
    ledger_metrics_ = std::make_unique<ClaimLedgerMetrics>(ClaimLedgerMetrics::Create(*registry_));
    auto loaded = store_.Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    journal_ = std::make_unique<CheckpointJournal>(store_, *journal_metrics_, loaded->checkpoint);
    listener_.seen.clear();
    ledger_ = std::make_unique<ClaimLedger>(*journal_, *ledger_metrics_, listener_);
  }

  static ClaimLedger::Mutation Record(const std::string& device) {
    return [device](Checkpoint& cp) {
      CheckpointClaim entry;
      entry.namespace_name = "ml";
      entry.name = "train";
      entry.devices.push_back(CheckpointDevice{.request_names = {"gpu"},
                                               .pool = "node-a",
                                               .device = device,
                                               .cdi_device_ids = {},
                                               .share_id = std::nullopt,
                                               .type = model::DeviceType::kGpu,
                                               .uuid = "GPU-1"});
      cp.claims[kUid] = entry;
      return absl::OkStatus();
    };
  }

  double Value(const std::string& family, const std::map<std::string, std::string>& labels) {
    return testing::SeriesValue(*registry_, family, labels).value_or(-1);
  }
  double Transitions(S from, S to) {
    return Value("dralens_node_claim_transitions_total",
                 {{"from", std::string(LabelOf(from))}, {"to", std::string(LabelOf(to))}});
  }
  double InState(S state) {
    return Value("dralens_node_claims", {{"state", std::string(LabelOf(state))}});
  }
  double Writes() { return Value("dralens_node_checkpoint_writes_total", {{"result", "ok"}}); }

  // The "claim state" events of the span ended by EndSpan.
  std::vector<std::string> StateEvents() {
    std::vector<std::string> out;
    for (const telemetry::SpanData& s : spans_->spans()) {
      for (const telemetry::SpanEvent& e : s.events) {
        if (e.name != "claim state") {
          continue;
        }
        std::string from;
        std::string to;
        for (const telemetry::Attribute& a : e.attributes) {
          (a.key == "from" ? from : to) = std::get<std::string>(a.value);
        }
        out.push_back(from + "->" + to);
      }
    }
    return out;
  }

  testing::TempDir dir_;
  common::FakeClock clock_;
  FileCheckpointStore file_;
  FlakyStore store_;
  telemetry::TracingStats stats_;
  std::shared_ptr<telemetry::InMemorySpanExporter::Storage> spans_;
  std::unique_ptr<telemetry::SimpleSpanProcessor> processor_;
  std::unique_ptr<telemetry::TracerImpl> tracer_;
  std::unique_ptr<prometheus::Registry> registry_;
  std::unique_ptr<CheckpointJournalMetrics> journal_metrics_;
  std::unique_ptr<ClaimLedgerMetrics> ledger_metrics_;
  std::unique_ptr<CheckpointJournal> journal_;
  Recorder listener_;
  std::unique_ptr<ClaimLedger> ledger_;
};

TEST_F(ClaimLedgerTest, OneTransitionWritesCountsMovesTheGaugeAddsTheEventAndTellsTheView) {
  telemetry::SpanPtr span = tracer_->StartSpan("PrepareClaim");
  listener_.seen.clear();
  ASSERT_TRUE(
      ledger_->Transition(kUid, *span, S::kUnprepared, S::kPrepareStarted, Record("gpu-1")).ok());
  span->End();

  // The checkpoint write: on disk, in the state the transition named.
  auto on_disk = file_.Load();
  ASSERT_TRUE(on_disk.ok());
  ASSERT_EQ(on_disk->checkpoint.claims.count(kUid), 1u);
  EXPECT_EQ(on_disk->checkpoint.claims.at(kUid).state, S::kPrepareStarted);
  EXPECT_EQ(on_disk->checkpoint.claims.at(kUid).devices.at(0).device, "gpu-1");
  EXPECT_EQ(Writes(), 1);
  // The counter and the gauge.
  EXPECT_EQ(Transitions(S::kUnprepared, S::kPrepareStarted), 1);
  EXPECT_EQ(InState(S::kPrepareStarted), 1);
  EXPECT_EQ(ledger_->StateOf(kUid), S::kPrepareStarted);
  // The span event.
  EXPECT_EQ(StateEvents(), std::vector<std::string>{"Unprepared->PrepareStarted"});
  // The view.
  ASSERT_THAT(listener_.seen, SizeIs(1));
  EXPECT_EQ(listener_.seen[0].checkpoint->claims.at(kUid).state, S::kPrepareStarted);
}

TEST_F(ClaimLedgerTest, RefusedTransitionsChangeNothing) {
  telemetry::SpanPtr span = tracer_->StartSpan("PrepareClaim");
  listener_.seen.clear();
  // Not in `from`.
  absl::Status wrong = ledger_->Transition(kUid, *span, S::kPrepareStarted, S::kPrepareCompleted);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kFailedPrecondition);
  // Not an edge.
  absl::Status illegal =
      ledger_->Transition(kUid, *span, S::kUnprepared, S::kPrepareCompleted, Record("gpu-1"));
  EXPECT_EQ(illegal.code(), absl::StatusCode::kFailedPrecondition);
  // A mutation that refuses.
  absl::Status refused =
      ledger_->Transition(kUid, *span, S::kUnprepared, S::kPrepareStarted,
                          [](Checkpoint&) { return absl::FailedPreconditionError("device busy"); });
  EXPECT_EQ(refused.message(), "device busy");
  span->End();
  EXPECT_EQ(Writes(), 0);
  EXPECT_EQ(Transitions(S::kUnprepared, S::kPrepareStarted), 0);
  EXPECT_EQ(InState(S::kPrepareStarted), 0);
  EXPECT_TRUE(StateEvents().empty());
  EXPECT_TRUE(listener_.seen.empty());
  EXPECT_EQ(ledger_->StateOf(kUid), S::kUnprepared);
}

TEST_F(ClaimLedgerTest, AFailedWriteChangesNothingAndSaysCheckpointError) {
  telemetry::SpanPtr span = tracer_->StartSpan("PrepareClaim");
  store_.fail_ = true;
  absl::Status failed =
      ledger_->Transition(kUid, *span, S::kUnprepared, S::kPrepareStarted, Record("gpu-1"));
  span->End();
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(ReasonOf(failed), FailureReason::kCheckpointError);
  EXPECT_EQ(Value("dralens_node_checkpoint_writes_total", {{"result", "error"}}), 1);
  EXPECT_EQ(Transitions(S::kUnprepared, S::kPrepareStarted), 0);
  EXPECT_EQ(ledger_->StateOf(kUid), S::kUnprepared);
  EXPECT_TRUE(ledger_->Snapshot().checkpoint->claims.empty());
  EXPECT_TRUE(StateEvents().empty());
}

TEST_F(ClaimLedgerTest, UnpreparingLivesInMemoryAndARestoreWritesNothing) {
  telemetry::SpanPtr span = tracer_->StartSpan("c");
  ASSERT_TRUE(
      ledger_->Transition(kUid, *span, S::kUnprepared, S::kPrepareStarted, Record("gpu-1")).ok());
  ASSERT_TRUE(ledger_->Transition(kUid, *span, S::kPrepareStarted, S::kPrepareCompleted).ok());
  EXPECT_EQ(Writes(), 2);
  ASSERT_TRUE(ledger_->Transition(kUid, *span, S::kPrepareCompleted, S::kUnpreparing).ok());
  EXPECT_EQ(Writes(), 2);
  EXPECT_EQ(InState(S::kUnpreparing), 1);
  EXPECT_EQ(ledger_->Snapshot().checkpoint->claims.at(kUid).state, S::kPrepareCompleted);
  // An unprepare that failed goes back; the checkpoint already says so.
  ASSERT_TRUE(ledger_->Transition(kUid, *span, S::kUnpreparing, S::kPrepareCompleted).ok());
  EXPECT_EQ(Writes(), 2);
  EXPECT_EQ(InState(S::kPrepareCompleted), 1);
  EXPECT_EQ(InState(S::kUnpreparing), 0);
  // A mutation has nothing to change in Unpreparing.
  EXPECT_EQ(ledger_->Transition(kUid, *span, S::kPrepareCompleted, S::kUnpreparing, Record("gpu-2"))
                .code(),
            absl::StatusCode::kInvalidArgument);
  // Unprepared removes the entry.
  ASSERT_TRUE(ledger_->Transition(kUid, *span, S::kPrepareCompleted, S::kUnpreparing).ok());
  ASSERT_TRUE(ledger_->Transition(kUid, *span, S::kUnpreparing, S::kUnprepared).ok());
  EXPECT_EQ(Writes(), 3);
  EXPECT_TRUE(ledger_->Snapshot().checkpoint->claims.empty());
  EXPECT_EQ(InState(S::kPrepareCompleted), 0);
  span->End();
}

TEST_F(ClaimLedgerTest, AmendRewritesTheEntryInItsState) {
  telemetry::SpanPtr span = tracer_->StartSpan("c");
  ASSERT_TRUE(
      ledger_->Transition(kUid, *span, S::kUnprepared, S::kPrepareStarted, Record("gpu-1")).ok());
  ASSERT_TRUE(ledger_
                  ->Amend(kUid, *span, S::kPrepareStarted,
                          [](Checkpoint& cp) {
                            cp.claims.at(kUid).devices.at(0).uuid = "GPU-amended";
                            cp.claims.at(kUid).state = S::kPrepareCompleted;  // ignored
                            return absl::OkStatus();
                          })
                  .ok());
  span->End();
  auto on_disk = file_.Load();
  ASSERT_TRUE(on_disk.ok());
  EXPECT_EQ(on_disk->checkpoint.claims.at(kUid).devices.at(0).uuid, "GPU-amended");
  EXPECT_EQ(on_disk->checkpoint.claims.at(kUid).state, S::kPrepareStarted);
  EXPECT_EQ(Transitions(S::kPrepareStarted, S::kPrepareCompleted), 0);
  // Not in that state: refused.
  telemetry::SpanPtr other = tracer_->StartSpan("c");
  EXPECT_EQ(
      ledger_
          ->Amend(kUid, *other, S::kPrepareCompleted, [](Checkpoint&) { return absl::OkStatus(); })
          .code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST_F(ClaimLedgerTest, RestoredClaimsAreCountedWithoutTransitions) {
  telemetry::SpanPtr span = tracer_->StartSpan("c");
  ASSERT_TRUE(
      ledger_->Transition(kUid, *span, S::kUnprepared, S::kPrepareStarted, Record("gpu-1")).ok());
  ASSERT_TRUE(ledger_->Transition(kUid, *span, S::kPrepareStarted, S::kPrepareCompleted).ok());
  span->End();
  Open();  // a restart
  EXPECT_EQ(ledger_->StateOf(kUid), S::kPrepareCompleted);
  EXPECT_EQ(InState(S::kPrepareCompleted), 1);
  EXPECT_EQ(Transitions(S::kPrepareStarted, S::kPrepareCompleted), 0);
  // The view learns of them at once.
  ASSERT_THAT(listener_.seen, SizeIs(1));
  EXPECT_EQ(listener_.seen[0].checkpoint->claims.count(kUid), 1u);
}

}  // namespace
}  // namespace dralens::driver::prepare
