// Periodic: a round at once, then one per interval of Clock time; none after Stop; restartable.
#include "src/common/periodic.h"

#include <atomic>

#include "gtest/gtest.h"
#include "src/common/clock.h"
#include "tests/testing/eventually.h"

namespace dralens::common {
namespace {

TEST(PeriodicTest, ARoundAtOnceThenOnePerIntervalAndNoneAfterStop) {
  FakeClock clock;
  std::atomic<int> rounds = 0;
  Periodic loop(clock, absl::Seconds(10), absl::Milliseconds(5), [&] { ++rounds; });
  loop.Start();
  loop.Start();  // idempotent: still one thread
  EXPECT_TRUE(testing::Eventually([&] { return rounds == 1; }));
  clock.Advance(absl::Seconds(9));
  EXPECT_EQ(rounds, 1) << "not before the interval";
  clock.Advance(absl::Seconds(1));
  EXPECT_TRUE(testing::Eventually([&] { return rounds == 2; }));
  loop.Stop();
  loop.Stop();
  clock.Advance(absl::Seconds(60));
  EXPECT_EQ(rounds, 2) << "no round after Stop";
  loop.Start();  // a restart begins with a round at once
  EXPECT_TRUE(testing::Eventually([&] { return rounds == 3; }));
}

TEST(PeriodicTest, StopDoesNotWaitForTheInterval) {
  // The real clock and an hour's interval: Stop must wake the waiting loop, not sit it out.
  std::atomic<int> rounds = 0;
  Periodic loop(RealClock(), absl::Hours(1), absl::Hours(1), [&] { ++rounds; });
  loop.Start();
  EXPECT_TRUE(testing::Eventually([&] { return rounds == 1; }));
  loop.Stop();
  EXPECT_EQ(rounds, 1);
}

}  // namespace
}  // namespace dralens::common
