#include "src/common/clock.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace dralens::common {
namespace {

TEST(FakeClockTest, TimeMovesOnlyWhenAdvanced) {
  FakeClock clock(absl::FromUnixSeconds(100));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(100));
  clock.Advance(absl::Seconds(5));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(105));
}

TEST(FakeClockTest, SleepersAreReleasedByAdvance) {
  FakeClock clock;
  std::atomic<bool> woke{false};
  std::thread sleeper([&] {
    clock.SleepFor(absl::Seconds(10));
    woke = true;
  });
  while (clock.SleepersForTest() == 0) {
    std::this_thread::yield();
  }
  clock.Advance(absl::Seconds(9));
  EXPECT_FALSE(woke.load());
  clock.Advance(absl::Seconds(1));
  sleeper.join();
  EXPECT_TRUE(woke.load());
}

}  // namespace
}  // namespace dralens::common
