// Periodic: runs a round at once, then one every `interval` of Clock time, on a thread of its
// own, until Stop. While waiting it looks at the Clock at least every `poll` of real time, so a
// test's FakeClock releases it; Stop wakes it at once.
//
// Thread-safety: Start and Stop may be called from any thread; Stop waits for a round in
// progress. The round runs without any lock of this class held.
#pragma once

#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/common/clock.h"

namespace dralens::common {

class Periodic {
 public:
  // `clock` must outlive this object.
  Periodic(Clock& clock, absl::Duration interval, absl::Duration poll, std::function<void()> round)
      : clock_(clock), interval_(interval), poll_(poll), round_(std::move(round)) {}
  ~Periodic() { Stop(); }
  Periodic(const Periodic&) = delete;
  Periodic& operator=(const Periodic&) = delete;

  void Start();  // idempotent
  void Stop();   // idempotent

 private:
  void Loop();

  Clock& clock_;
  const absl::Duration interval_;
  const absl::Duration poll_;
  const std::function<void()> round_;

  absl::Mutex run_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // serialises Start and Stop
  std::unique_ptr<std::thread> thread_ ABSL_GUARDED_BY(run_mu_);
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dralens::common
