#include "src/common/periodic.h"

#include <algorithm>

namespace dralens::common {

void Periodic::Start() {
  absl::MutexLock run_lock(&run_mu_);
  if (thread_ != nullptr) {
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    stop_ = false;
  }
  thread_ = std::make_unique<std::thread>([this] { Loop(); });
}

void Periodic::Stop() {
  absl::MutexLock run_lock(&run_mu_);
  if (thread_ == nullptr) {
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_->join();
  thread_.reset();
}

void Periodic::Loop() {
  absl::Time next = clock_.Now();
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        if (stop_) {
          return;
        }
        const absl::Time now = clock_.Now();
        if (now >= next) {
          break;
        }
        mu_.AwaitWithTimeout(absl::Condition(&stop_), std::min(next - now, poll_));
      }
    }
    round_();
    next = clock_.Now() + interval_;
  }
}

}  // namespace dralens::common
