#include "driver/prepare/claim_state.h"

#include "absl/strings/str_cat.h"

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

std::optional<ClaimState> ParseClaimState(absl::string_view text) {
  for (ClaimState s : {ClaimState::kUnprepared, ClaimState::kPrepareStarted,
                       ClaimState::kPrepareCompleted, ClaimState::kUnpreparing}) {
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

absl::Status ClaimStateMachine::Transition(absl::string_view claim_uid, ClaimState from,
                                           ClaimState to) {
  {
    absl::MutexLock lock(&mu_);
    if (!IsLegalTransition(from, to)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "claim ", claim_uid, ": illegal transition ", ToString(from), " -> ", ToString(to)));
    }
    auto it = states_.find(claim_uid);
    ClaimState current = it == states_.end() ? ClaimState::kUnprepared : it->second;
    if (current != from) {
      return absl::FailedPreconditionError(absl::StrCat("claim ", claim_uid, ": transition ",
                                                        ToString(from), " -> ", ToString(to),
                                                        " but the claim is ", ToString(current)));
    }
    SetLocked(std::string(claim_uid), to);
    ++transitions_[static_cast<int>(from)][static_cast<int>(to)];
  }
  if (observer_ != nullptr) {
    observer_->OnTransition(claim_uid, from, to);
  }
  return absl::OkStatus();
}

void ClaimStateMachine::Adopt(absl::string_view claim_uid, ClaimState state) {
  absl::MutexLock lock(&mu_);
  SetLocked(std::string(claim_uid), state);
}

void ClaimStateMachine::SetLocked(const std::string& uid, ClaimState state) {
  auto it = states_.find(uid);
  if (it != states_.end()) {
    --in_state_[static_cast<int>(it->second)];
    if (state == ClaimState::kUnprepared) {
      states_.erase(it);
    } else {
      it->second = state;
    }
  } else if (state != ClaimState::kUnprepared) {
    states_.emplace(uid, state);
  }
  if (state != ClaimState::kUnprepared) {
    ++in_state_[static_cast<int>(state)];
  }
}

ClaimState ClaimStateMachine::StateOf(absl::string_view claim_uid) const {
  absl::MutexLock lock(&mu_);
  auto it = states_.find(claim_uid);
  return it == states_.end() ? ClaimState::kUnprepared : it->second;
}

int64_t ClaimStateMachine::CountInState(ClaimState state) const {
  absl::MutexLock lock(&mu_);
  return in_state_[static_cast<int>(state)];
}

int64_t ClaimStateMachine::TransitionCount(ClaimState from, ClaimState to) const {
  absl::MutexLock lock(&mu_);
  return transitions_[static_cast<int>(from)][static_cast<int>(to)];
}

}  // namespace dralens::driver::prepare
