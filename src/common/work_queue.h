// WorkQueue: a fixed number of worker threads taking jobs from one FIFO queue.
//
//   WorkQueue workers(8);
//   workers.Submit([] { ... });  // runs on a worker, in submission order
//   workers.Stop();              // runs what is queued, then joins the workers
//
// The number of threads never grows with the load: jobs beyond the workers wait in the queue,
// which costs a std::function each instead of a thread stack. Submit after Stop runs nothing
// and returns false. Waiting() and Running() are for gauges. Thread-safe.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dralens::common {

class WorkQueue {
 public:
  // `threads` >= 1 (0 counts as 1). `on_change` (optional) is called after every change of
  // Waiting() or Running(), under the queue's lock, so calls arrive in order: keep it cheap
  // (set a gauge) and never call back into the queue.
  explicit WorkQueue(size_t threads,
                     std::function<void(size_t waiting, size_t running)> on_change = {});
  ~WorkQueue();  // Stop()
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `job`; false (and `job` dropped) once Stop() has begun.
  bool Submit(std::function<void()> job);
  // Runs every job already queued, then joins the workers. Idempotent.
  void Stop();

  size_t Waiting() const;
  size_t Running() const;
  size_t Threads() const { return threads_.size(); }

 private:
  void Work();
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::function<void(size_t, size_t)> on_change_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  size_t running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace dralens::common
