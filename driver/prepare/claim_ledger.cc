#include "driver/prepare/claim_ledger.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "driver/prepare/failure_reason.h"
#include "src/common/status.h"
#include "src/telemetry/catalog.h"

namespace dralens::driver::prepare {

ClaimLedgerMetrics ClaimLedgerMetrics::Create(prometheus::Registry& registry) {
  ClaimLedgerMetrics m{.transitions_total = telemetry::BuildCounter(
                           registry, "dralens_node_claim_transitions_total"),
                       .claims = telemetry::BuildGauge(registry, "dralens_node_claims")};
  for (ClaimState from : kAllClaimStates) {
    for (ClaimState to : kAllClaimStates) {
      if (IsLegalTransition(from, to)) {
        m.transitions[static_cast<int>(from)][static_cast<int>(to)] = &m.transitions_total.Add(
            {{"from", std::string(LabelOf(from))}, {"to", std::string(LabelOf(to))}});
      }
    }
    if (from != ClaimState::kUnprepared) {
      m.in_state[static_cast<int>(from)] = &m.claims.Add({{"state", std::string(LabelOf(from))}});
    }
  }
  return m;
}

ClaimLedger::ClaimLedger(CheckpointJournal& journal, ClaimLedgerMetrics& metrics,
                         LedgerListener& listener)
    : journal_(journal), metrics_(metrics), listener_(listener) {
  const CheckpointSnapshot restored = journal_.Snapshot();
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [uid, claim] : restored.checkpoint->claims) {
      SetLocked(uid, claim.state);
    }
  }
  listener_.OnLedgerChanged(restored);
}

absl::Status ClaimLedger::CheckIn(absl::string_view uid, ClaimState from, ClaimState to) const {
  if (!IsLegalTransition(from, to)) {
    return absl::FailedPreconditionError(
        absl::StrCat("claim ", uid, ": illegal transition ", ToString(from), " -> ", ToString(to)));
  }
  const ClaimState current = StateOf(uid);
  if (current != from) {
    return absl::FailedPreconditionError(absl::StrCat("claim ", uid, ": transition ",
                                                      ToString(from), " -> ", ToString(to),
                                                      " but the claim is ", ToString(current)));
  }
  return absl::OkStatus();
}

absl::Status ClaimLedger::Transition(absl::string_view uid, telemetry::Span& span, ClaimState from,
                                     ClaimState to, const Mutation& mutate) {
  absl::Status legal = CheckIn(uid, from, to);
  if (!legal.ok()) {
    return WithReason(legal, FailureReason::kInternal);
  }
  const std::string key(uid);
  bool write = false;
  if (to == ClaimState::kUnpreparing) {
    if (mutate) {
      return absl::InvalidArgumentError(
          absl::StrCat("claim ", uid, ": Unpreparing is not recorded; nothing to mutate"));
    }
  } else if (to == ClaimState::kUnprepared) {
    write = journal_.Find(key).has_value();
  } else {
    // A persisted state: write unless the entry already says so (back from Unpreparing).
    std::optional<CheckpointClaim> entry = journal_.Find(key);
    write = mutate || !entry.has_value() || entry->state != to;
  }
  if (write) {
    absl::Status saved = journal_.Update([&](Checkpoint& cp) -> absl::Status {
      if (mutate) {
        RETURN_IF_ERROR(mutate(cp));  // a failing mutation has left `cp` as it was
      }
      if (to == ClaimState::kUnprepared) {
        cp.claims.erase(key);
        return absl::OkStatus();
      }
      auto it = cp.claims.find(key);
      if (it == cp.claims.end()) {
        return WithReason(absl::InternalError(absl::StrCat("claim ", uid, ": no entry to record ",
                                                           ToString(to), " in")),
                          FailureReason::kInternal);
      }
      it->second.state = to;
      return absl::OkStatus();
    });
    if (!saved.ok()) {
      return saved;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    SetLocked(key, to);
  }
  metrics_.transitions[static_cast<int>(from)][static_cast<int>(to)]->Increment();
  span.AddEvent("claim state",
                {{"from", std::string(ToString(from))}, {"to", std::string(ToString(to))}});
  if (write) {
    listener_.OnLedgerChanged(journal_.Snapshot());
  }
  return absl::OkStatus();
}

absl::Status ClaimLedger::Amend(absl::string_view uid, telemetry::Span& span, ClaimState state,
                                const Mutation& mutate) {
  if (!IsPersisted(state) || StateOf(uid) != state) {
    return WithReason(
        absl::FailedPreconditionError(absl::StrCat("claim ", uid, ": amend in ", ToString(state),
                                                   " but the claim is ", ToString(StateOf(uid)))),
        FailureReason::kInternal);
  }
  const std::string key(uid);
  absl::Status saved = journal_.Update([&](Checkpoint& cp) -> absl::Status {
    auto it = cp.claims.find(key);
    if (it == cp.claims.end()) {
      return WithReason(absl::InternalError(absl::StrCat("claim ", uid, ": no entry to amend")),
                        FailureReason::kInternal);
    }
    const ClaimState before = it->second.state;
    RETURN_IF_ERROR(mutate(cp));  // a failing mutation has left `cp` as it was
    // The state is the ledger's to change: an amendment keeps it whatever `mutate` did.
    cp.claims[key].state = before;
    return absl::OkStatus();
  });
  if (!saved.ok()) {
    return saved;
  }
  span.AddEvent("claim recorded", {{"state", std::string(ToString(state))}});
  listener_.OnLedgerChanged(journal_.Snapshot());
  return absl::OkStatus();
}

void ClaimLedger::SetLocked(const std::string& uid, ClaimState to) {
  auto it = states_.find(uid);
  if (it != states_.end()) {
    --in_state_[static_cast<int>(it->second)];
    metrics_.in_state[static_cast<int>(it->second)]->Decrement();
    if (to == ClaimState::kUnprepared) {
      states_.erase(it);
    } else {
      it->second = to;
    }
  } else if (to != ClaimState::kUnprepared) {
    states_.emplace(uid, to);
  }
  if (to != ClaimState::kUnprepared) {
    ++in_state_[static_cast<int>(to)];
    metrics_.in_state[static_cast<int>(to)]->Increment();
  }
}

ClaimState ClaimLedger::StateOf(absl::string_view uid) const {
  absl::MutexLock lock(&mu_);
  auto it = states_.find(uid);
  return it == states_.end() ? ClaimState::kUnprepared : it->second;
}

int64_t ClaimLedger::CountInState(ClaimState state) const {
  absl::MutexLock lock(&mu_);
  return in_state_[static_cast<int>(state)];
}

}  // namespace dralens::driver::prepare
