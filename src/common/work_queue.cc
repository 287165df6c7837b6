#include "src/common/work_queue.h"

#include <utility>

namespace dralens::common {

WorkQueue::WorkQueue(size_t threads, std::function<void(size_t, size_t)> on_change)
    : on_change_(std::move(on_change)) {
  const size_t n = threads == 0 ? 1 : threads;
  threads_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    threads_.emplace_back([this] { Work(); });
  }
}

WorkQueue::~WorkQueue() { Stop(); }

bool WorkQueue::Submit(std::function<void()> job) {
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    return false;
  }
  jobs_.push_back(std::move(job));
  NotifyLocked();
  return true;
}

void WorkQueue::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
  }
  for (std::thread& t : threads_) {
    t.join();
  }
}

size_t WorkQueue::Waiting() const {
  absl::MutexLock lock(&mu_);
  return jobs_.size();
}

size_t WorkQueue::Running() const {
  absl::MutexLock lock(&mu_);
  return running_;
}

bool WorkQueue::HasWorkOrStopping() const { return stopping_ || !jobs_.empty(); }

void WorkQueue::Work() {
  for (;;) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &WorkQueue::HasWorkOrStopping));
      if (jobs_.empty()) {
        return;  // stopping, and nothing left to run
      }
      job = std::move(jobs_.front());
      jobs_.pop_front();
      ++running_;
      NotifyLocked();
    }
    job();
    absl::MutexLock lock(&mu_);
    --running_;
    NotifyLocked();
  }
}

void WorkQueue::NotifyLocked() const {
  if (on_change_) {
    on_change_(jobs_.size(), running_);
  }
}

}  // namespace dralens::common
