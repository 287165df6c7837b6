// Clock: the one source of time. Components take a Clock& so tests can move time by hand.
#pragma once

#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dralens::common {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time, for timestamps that leave the process (Kubernetes objects, spans).
  virtual absl::Time Now() = 0;
  // Blocks the calling thread for `d` of this clock's time.
  virtual void SleepFor(absl::Duration d) = 0;
};
using ClockPtr = std::unique_ptr<Clock>;

// The process's real clock. Thread-safe; a singleton because time is global.
Clock& RealClock();

// FakeClock: time moves only when a test calls Advance(). SleepFor() blocks until enough
// fake time has passed, so code under test that sleeps is released by Advance(). Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1700000000)) : now_(start) {}

  // Clock
  absl::Time Now() override;
  void SleepFor(absl::Duration d) override;

  void Advance(absl::Duration d);
  void SetTime(absl::Time t);
  // How many threads are blocked in SleepFor() right now.
  int SleepersForTest();

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  int sleepers_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dralens::common
