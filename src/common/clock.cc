#include "src/common/clock.h"

#include "absl/time/clock.h"

namespace dralens::common {
namespace {

class RealClockImpl : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration d) override { absl::SleepFor(d); }
};

}  // namespace

Clock& RealClock() {
  static RealClockImpl* clock = new RealClockImpl();
  return *clock;
}

absl::Time FakeClock::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClock::SleepFor(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  const absl::Time until = now_ + d;
  struct Wait {
    const absl::Time* now;
    absl::Time until;
    bool Done() const { return *now >= until; }
  } wait{&now_, until};
  ++sleepers_;
  mu_.Await(absl::Condition(&wait, &Wait::Done));
  --sleepers_;
}

void FakeClock::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
}

void FakeClock::SetTime(absl::Time t) {
  absl::MutexLock lock(&mu_);
  now_ = t;
}

int FakeClock::SleepersForTest() {
  absl::MutexLock lock(&mu_);
  return sleepers_;
}

}  // namespace dralens::common
