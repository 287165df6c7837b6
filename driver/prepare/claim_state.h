// The preparation states of a claim on this node, and which changes between them are legal.
//
//            prepare                        prepare
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
// The states change in one place only: ClaimLedger::Transition (claim_ledger.h).
#pragma once

#include <optional>

#include "absl/strings/string_view.h"

namespace dralens::driver::prepare {

enum class ClaimState {
  kUnprepared = 0,
  kPrepareStarted = 1,
  kPrepareCompleted = 2,
  kUnpreparing = 3,
};
inline constexpr int kClaimStateCount = 4;
inline constexpr ClaimState kAllClaimStates[] = {
    ClaimState::kUnprepared, ClaimState::kPrepareStarted, ClaimState::kPrepareCompleted,
    ClaimState::kUnpreparing};

// "Unprepared", "PrepareStarted", "PrepareCompleted", "Unpreparing" (the checkpoint spelling).
absl::string_view ToString(ClaimState state);
// "unprepared", "prepare_started", "prepare_completed", "unpreparing": metric label values.
absl::string_view LabelOf(ClaimState state);
// The inverse of ToString; nullopt for anything else.
std::optional<ClaimState> ParseClaimState(absl::string_view text);
// Whether `from` → `to` is an edge of the diagram above.
bool IsLegalTransition(ClaimState from, ClaimState to);
// Whether the state is recorded in the checkpoint (PrepareStarted, PrepareCompleted).
bool IsPersisted(ClaimState state);

}  // namespace dralens::driver::prepare
