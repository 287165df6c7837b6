// ClaimStateMachine: the one place where a claim's preparation state changes.
//
//            Transition                     Transition
//   Unprepared ───────► PrepareStarted ───────────► PrepareCompleted
//        ▲                 │      │                        │
//        │   rollback      │      │ unprepare              │ unprepare
//        ├─────────────────┘      ▼                        ▼
//        └──────────────────── Unpreparing ◄───────────────┘
//                                 │ (failure: back to the state it came from)
//
// PrepareStarted and PrepareCompleted are persisted in the checkpoint; Unprepared is the
// absence of a checkpoint entry and Unpreparing lives only in memory (an unprepare that crashes
// leaves the persisted state, and the kubelet's retry finishes it).
//
// Every change goes through Transition(), which checks the move is legal and that the claim
// really is in `from`, updates the per-transition counters and per-state counts, and notifies
// the observer (where metrics and span events attach). Restoring states from a checkpoint at
// startup uses Adopt(), which is not a transition and counts nothing.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace dralens::driver::prepare {

enum class ClaimState {
  kUnprepared = 0,
  kPrepareStarted = 1,
  kPrepareCompleted = 2,
  kUnpreparing = 3,
};
inline constexpr int kClaimStateCount = 4;

// "Unprepared", "PrepareStarted", "PrepareCompleted", "Unpreparing" (the checkpoint spelling).
absl::string_view ToString(ClaimState state);
// The inverse of ToString; nullopt for anything else.
std::optional<ClaimState> ParseClaimState(absl::string_view text);
// Whether `from` → `to` is an edge of the diagram above.
bool IsLegalTransition(ClaimState from, ClaimState to);

// Told about every successful transition, synchronously, after the state has changed. Must be
// cheap and must not call back into the state machine.
class TransitionObserver {
 public:
  virtual ~TransitionObserver() = default;
  virtual void OnTransition(absl::string_view claim_uid, ClaimState from, ClaimState to) = 0;
};

// Thread-safe.
class ClaimStateMachine {
 public:
  // `observer` may be null; not owned, must outlive the state machine.
  explicit ClaimStateMachine(TransitionObserver* observer = nullptr) : observer_(observer) {}

  // Moves `claim_uid` from `from` to `to`. FailedPrecondition (nothing changes) when the edge is
  // not legal or the claim is not currently in `from`.
  absl::Status Transition(absl::string_view claim_uid, ClaimState from, ClaimState to);

  // Sets the state of a claim restored from the checkpoint at startup. Not a transition: no
  // counter or observer call; only the per-state counts follow.
  void Adopt(absl::string_view claim_uid, ClaimState state);

  // The current state (kUnprepared for unknown claims).
  ClaimState StateOf(absl::string_view claim_uid) const;
  // How many claims are in `state` now (kUnprepared: always 0, unknown claims are not counted).
  int64_t CountInState(ClaimState state) const;
  // How many times `from` → `to` happened.
  int64_t TransitionCount(ClaimState from, ClaimState to) const;

 private:
  void SetLocked(const std::string& uid, ClaimState state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  TransitionObserver* const observer_;
  mutable absl::Mutex mu_;
  std::map<std::string, ClaimState, std::less<>> states_ ABSL_GUARDED_BY(mu_);
  std::array<int64_t, kClaimStateCount> in_state_ ABSL_GUARDED_BY(mu_) = {};
  std::array<std::array<int64_t, kClaimStateCount>, kClaimStateCount> transitions_
      ABSL_GUARDED_BY(mu_) = {};
};

}  // namespace dralens::driver::prepare
