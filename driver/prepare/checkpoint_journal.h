// CheckpointJournal: the in-memory copy of the checkpoint and its durable, group-committed
// updates.
//
// Every change is an atomic write of the whole file (CheckpointStore::Save), and memory changes
// only once the write succeeded: what Snapshot() returns is always on disk.
//
// Group commit: callers that arrive while a save is in flight queue their mutations, and the
// next writer applies all of them, in arrival order, to one copy and saves once. Under
// concurrency that turns N serialised fsync pairs into one per batch without weakening the
// guarantee: a caller returns only once its own change is on disk. A mutation sees the ones
// queued before it (the sharing admission relies on that).
//
// Only ClaimLedger writes through a journal; everything else reads snapshots.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "driver/prepare/checkpoint.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/registry.h"

namespace dralens::driver::prepare {

// dralens_node_checkpoint_writes_total{result}: one per Save, ok or error.
struct CheckpointJournalMetrics {
  prometheus::Family<prometheus::Counter>& writes_total;
  prometheus::Counter& writes_ok;
  prometheus::Counter& writes_error;

  static CheckpointJournalMetrics Create(prometheus::Registry& registry);
};

// A committed checkpoint and its place in the sequence of commits (1 for the loaded one, +1
// per successful save).
struct CheckpointSnapshot {
  uint64_t generation = 0;
  std::shared_ptr<const Checkpoint> checkpoint;
};

class CheckpointJournal {
 public:
  using Mutation = std::function<absl::Status(Checkpoint&)>;

  // `loaded` is what the store holds now (CheckpointStore::Load). Not owned: `store` and
  // `metrics` must outlive the journal.
  CheckpointJournal(CheckpointStore& store, CheckpointJournalMetrics& metrics, Checkpoint loaded);

  // Applies `mutate` to the checkpoint and saves it durably. `mutate` must leave the checkpoint
  // untouched when it returns an error (the error is returned as is, and nothing is saved for
  // it); a failed save is returned with FailureReason kCheckpointError for every mutation of
  // its batch.
  absl::Status Update(const Mutation& mutate);

  CheckpointSnapshot Snapshot() const;
  // The entry of `uid`, or nullopt.
  std::optional<CheckpointClaim> Find(const std::string& uid) const;

 private:
  struct PendingUpdate {
    const Mutation* mutate;
    absl::Status result;
    bool done = false;
  };

  CheckpointStore& store_;
  CheckpointJournalMetrics& metrics_;

  // The committed checkpoint. Replaced only by the group-commit writer.
  mutable absl::Mutex committed_mu_ ABSL_ACQUIRED_AFTER(commit_mu_);
  std::shared_ptr<const Checkpoint> committed_ ABSL_GUARDED_BY(committed_mu_);
  uint64_t generation_ ABSL_GUARDED_BY(committed_mu_) = 1;

  absl::Mutex commit_mu_;
  std::vector<PendingUpdate*> pending_ ABSL_GUARDED_BY(commit_mu_);
  bool writing_ ABSL_GUARDED_BY(commit_mu_) = false;
};

}  // namespace dralens::driver::prepare
