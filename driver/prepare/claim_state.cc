#include "driver/prepare/claim_state.h"

namespace dralens::driver::prepare {

absl::string_view ToString(ClaimState state) {
  switch (state) {
    case ClaimState::kUnprepared:
      return "Unprepared";
    case ClaimState::kPrepareStarted:
      return "PrepareStarted";
    case ClaimState::kPrepareCompleted:
      return "PrepareCompleted";
    case ClaimState::kUnpreparing:
      return "Unpreparing";
  }
  return "Unknown";
}

absl::string_view LabelOf(ClaimState state) {
  switch (state) {
    case ClaimState::kUnprepared:
      return "unprepared";
    case ClaimState::kPrepareStarted:
      return "prepare_started";
    case ClaimState::kPrepareCompleted:
      return "prepare_completed";
    case ClaimState::kUnpreparing:
      return "unpreparing";
  }
  return "unprepared";
}

std::optional<ClaimState> ParseClaimState(absl::string_view text) {
  for (ClaimState s : kAllClaimStates) {
    if (ToString(s) == text) {
      return s;
    }
  }
  return std::nullopt;
}

bool IsLegalTransition(ClaimState from, ClaimState to) {
  using S = ClaimState;
  switch (from) {
    case S::kUnprepared:
      return to == S::kPrepareStarted;
    case S::kPrepareStarted:
      return to == S::kPrepareCompleted || to == S::kUnprepared || to == S::kUnpreparing;
    case S::kPrepareCompleted:
      return to == S::kUnpreparing;
    case S::kUnpreparing:
      // Done, or failed and back to the persisted state it came from.
      return to == S::kUnprepared || to == S::kPrepareStarted || to == S::kPrepareCompleted;
  }
  return false;
}

bool IsPersisted(ClaimState state) {
  return state == ClaimState::kPrepareStarted || state == ClaimState::kPrepareCompleted;
}

}  // namespace dralens::driver::prepare
