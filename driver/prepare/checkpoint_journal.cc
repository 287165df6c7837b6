#include "driver/prepare/checkpoint_journal.h"

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "driver/prepare/failure_reason.h"
#include "src/telemetry/catalog.h"

namespace dralens::driver::prepare {

CheckpointJournalMetrics CheckpointJournalMetrics::Create(prometheus::Registry& registry) {
  auto& family = telemetry::BuildCounter(registry, "dralens_node_checkpoint_writes_total");
  return CheckpointJournalMetrics{.writes_total = family,
                                  .writes_ok = family.Add({{"result", "ok"}}),
                                  .writes_error = family.Add({{"result", "error"}})};
}

CheckpointJournal::CheckpointJournal(CheckpointStore& store, CheckpointJournalMetrics& metrics,
                                     Checkpoint loaded)
    : store_(store),
      metrics_(metrics),
      committed_(std::make_shared<const Checkpoint>(std::move(loaded))) {}

CheckpointSnapshot CheckpointJournal::Snapshot() const {
  absl::MutexLock lock(&committed_mu_);
  return CheckpointSnapshot{.generation = generation_, .checkpoint = committed_};
}

std::optional<CheckpointClaim> CheckpointJournal::Find(const std::string& uid) const {
  std::shared_ptr<const Checkpoint> now;
  {
    absl::MutexLock lock(&committed_mu_);
    now = committed_;
  }
  auto it = now->claims.find(uid);
  if (it == now->claims.end()) {
    return std::nullopt;
  }
  return it->second;
}

absl::Status CheckpointJournal::Update(const Mutation& mutate) {
  PendingUpdate me{&mutate, absl::OkStatus(), false};
  absl::MutexLock lock(&commit_mu_);
  pending_.push_back(&me);
  while (!me.done) {
    if (writing_) {
      // Someone is saving; our mutation goes into the next batch (or theirs, if they pick it
      // up). Wake when our result is in or the writer's seat is free.
      const auto ready = [&] { return me.done || !writing_; };
      commit_mu_.Await(absl::Condition(&ready));
      continue;
    }
    // Become the writer for everything queued so far.
    writing_ = true;
    std::vector<PendingUpdate*> batch;
    batch.swap(pending_);
    commit_mu_.Unlock();

    // Nothing here is expected to throw, but the waiters must be released whatever happens:
    // an escaping exception would leave them blocked on writing_ for good.
    try {
      Checkpoint next;
      {
        absl::MutexLock cp(&committed_mu_);
        next = *committed_;
      }
      std::vector<PendingUpdate*> applied;
      for (PendingUpdate* update : batch) {
        update->result = (*update->mutate)(next);
        if (update->result.ok()) {
          applied.push_back(update);
        }
      }
      if (!applied.empty()) {
        absl::Status saved = store_.Save(next);
        (saved.ok() ? metrics_.writes_ok : metrics_.writes_error).Increment();
        if (saved.ok()) {
          auto committed = std::make_shared<const Checkpoint>(std::move(next));
          absl::MutexLock cp(&committed_mu_);
          committed_ = std::move(committed);
          ++generation_;
        } else {
          saved = WithReason(saved, FailureReason::kCheckpointError);
          for (PendingUpdate* update : applied) {
            update->result = saved;
          }
        }
      }
    } catch (const std::exception& e) {
      for (PendingUpdate* update : batch) {
        update->result =
            WithReason(absl::InternalError(absl::StrCat("checkpoint update failed: ", e.what())),
                       FailureReason::kCheckpointError);
      }
    }

    commit_mu_.Lock();
    for (PendingUpdate* update : batch) {
      update->done = true;
    }
    writing_ = false;
  }
  return me.result;
}

}  // namespace dralens::driver::prepare
