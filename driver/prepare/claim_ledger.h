// ClaimLedger: the one place where a claim's state on this node changes.
//
// Transition(uid, span, from, to, mutate) does all of it, in this order:
//   1. checks that from → to is an edge of claim_state.h and that the claim is in `from`;
//   2. persists the change through the group-committed checkpoint journal (the caller's
//      `mutate` and the new state in one write; nothing is written for Unpreparing, which lives
//      only in memory, and the entry is removed for Unprepared); a failed write changes nothing;
//   3. updates the in-memory state;
//   4. counts dralens_node_claim_transitions_total{from,to} and moves dralens_node_claims{state};
//   5. adds a "claim state" span event (from, to) to the claim's span;
//   6. tells the listener (the node view, from which device, MIG and claim series and the
//      ResourceClaim status follow) about the new checkpoint.
// Amend(uid, span, state, mutate) changes a claim's recorded entry without changing its state
// (the ids of a MIG instance just created), with the same write, event and listener steps.
// Nothing else writes claim state: the journal is private to the ledger.
//
// Restored claims (the checkpoint found at start) are adopted when the ledger is built: the
// gauges count them, no transition is counted.
//
// Callers serialise the operations on one claim (ClaimPreparer's per-claim lock); the ledger
// itself is thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "driver/prepare/checkpoint.h"
#include "driver/prepare/checkpoint_journal.h"
#include "driver/prepare/claim_state.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "src/telemetry/tracing/tracer.h"

namespace dralens::driver::prepare {

//   dralens_node_claim_transitions_total{from,to}   one per transition; every legal edge at 0
//   dralens_node_claims{state}                      claims in prepare_started, prepare_completed,
//                                                   unpreparing
struct ClaimLedgerMetrics {
  prometheus::Family<prometheus::Counter>& transitions_total;
  prometheus::Family<prometheus::Gauge>& claims;
  // [from][to]; null for illegal edges.
  std::array<std::array<prometheus::Counter*, kClaimStateCount>, kClaimStateCount> transitions{};
  // [state]; null for Unprepared (not a held state).
  std::array<prometheus::Gauge*, kClaimStateCount> in_state{};

  static ClaimLedgerMetrics Create(prometheus::Registry& registry);
};

// Told about every committed change. Calls come from the thread that made the change, possibly
// several at once and out of order: a snapshot whose generation is not newer than one already
// seen must be ignored. Must not call back into the ledger.
class LedgerListener {
 public:
  virtual ~LedgerListener() = default;
  virtual void OnLedgerChanged(const CheckpointSnapshot& snapshot) = 0;
};

// For a ledger nobody watches.
class NoLedgerListener final : public LedgerListener {
 public:
  void OnLedgerChanged(const CheckpointSnapshot&) override {}
};

class ClaimLedger {
 public:
  using Mutation = std::function<absl::Status(Checkpoint&)>;

  // Adopts the claims of the journal's current checkpoint. Not owned; all must outlive the
  // ledger.
  ClaimLedger(CheckpointJournal& journal, ClaimLedgerMetrics& metrics, LedgerListener& listener);

  // See the top of this file. `mutate` (may be empty) runs inside the checkpoint write: it may
  // read every claim (the ones queued before it included) and must leave the checkpoint
  // untouched when it fails. For a persisted `to` the claim's entry must exist once `mutate`
  // ran; the ledger sets its state. FailedPrecondition, with nothing changed, for an illegal
  // edge or a claim not in `from`; InvalidArgument for a mutation with `to` Unpreparing.
  absl::Status Transition(absl::string_view uid, telemetry::Span& span, ClaimState from,
                          ClaimState to, const Mutation& mutate = {});
  // Rewrites the entry of a claim in persisted `state` through `mutate` (which must not change
  // the state). FailedPrecondition when the claim is not in `state`.
  absl::Status Amend(absl::string_view uid, telemetry::Span& span, ClaimState state,
                     const Mutation& mutate);

  // The current state (kUnprepared for unknown claims).
  ClaimState StateOf(absl::string_view uid) const;
  // How many claims are in `state` now (kUnprepared: always 0).
  int64_t CountInState(ClaimState state) const;
  // The committed checkpoint: every claim's recorded entry.
  CheckpointSnapshot Snapshot() const { return journal_.Snapshot(); }
  std::optional<CheckpointClaim> Find(const std::string& uid) const { return journal_.Find(uid); }

 private:
  // Sets `uid` to `to` in memory and moves the gauges. Requires mu_.
  void SetLocked(const std::string& uid, ClaimState to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckIn(absl::string_view uid, ClaimState from, ClaimState to) const;

  CheckpointJournal& journal_;
  ClaimLedgerMetrics& metrics_;
  LedgerListener& listener_;

  mutable absl::Mutex mu_;
  std::map<std::string, ClaimState, std::less<>> states_ ABSL_GUARDED_BY(mu_);
  std::array<int64_t, kClaimStateCount> in_state_ ABSL_GUARDED_BY(mu_) = {};
};

}  // namespace dralens::driver::prepare
