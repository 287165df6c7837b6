#include "src/common/keyed_mutex.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace dralens::common {
namespace {

// Waits (generously) until `key` has `users` holders and waiters.
bool WaitForUsers(const KeyedMutex& mu, const std::string& key, int users) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (mu.UsersForTest(key) != users) {
    if (absl::Now() > deadline) {
      return false;
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(KeyedMutexTest, ASecondGuardOnTheSameKeyWaitsForTheFirst) {
  KeyedMutex mu;
  std::atomic<bool> second_holds{false};
  std::thread second;
  {
    KeyedMutex::Guard first(mu, {"claim-a"});
    second = std::thread([&] {
      KeyedMutex::Guard g(mu, {"claim-a"});
      second_holds = true;
    });
    // The second guard has registered and is blocked: it cannot hold the key while we do.
    ASSERT_TRUE(WaitForUsers(mu, "claim-a", 2));
    EXPECT_FALSE(second_holds.load());
  }
  second.join();
  EXPECT_TRUE(second_holds.load());
  EXPECT_EQ(mu.ActiveKeysForTest(), 0u);
}

TEST(KeyedMutexTest, DifferentKeysDoNotWaitForEachOther) {
  KeyedMutex mu;
  KeyedMutex::Guard a(mu, {"gpu-0"});
  absl::Notification done;
  std::thread other([&] {
    KeyedMutex::Guard b(mu, {"gpu-1"});
    done.Notify();
  });
  // Would never return if gpu-1 waited for gpu-0.
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  other.join();
  EXPECT_EQ(mu.ActiveKeysForTest(), 1u);
}

TEST(KeyedMutexTest, DuplicateKeysAreTakenOnce) {
  KeyedMutex mu;
  KeyedMutex::Guard g(mu, {"gpu-0", "gpu-0", "gpu-1"});  // would deadlock if taken twice
  EXPECT_EQ(mu.UsersForTest("gpu-0"), 1);
  EXPECT_EQ(mu.UsersForTest("gpu-1"), 1);
}

TEST(KeyedMutexTest, OverlappingSetsInOppositeOrderNeverDeadlock) {
  KeyedMutex mu;
  std::atomic<int> rounds{0};
  auto worker = [&](std::vector<std::string> keys) {
    for (int i = 0; i < 2000; ++i) {
      KeyedMutex::Guard g(mu, keys);
      ++rounds;
    }
  };
  std::thread a(worker, std::vector<std::string>{"gpu-0", "gpu-1", "gpu-2"});
  std::thread b(worker, std::vector<std::string>{"gpu-2", "gpu-1", "gpu-0"});
  std::thread c(worker, std::vector<std::string>{"gpu-1", "gpu-2"});
  a.join();
  b.join();
  c.join();
  EXPECT_EQ(rounds.load(), 6000);
  EXPECT_EQ(mu.ActiveKeysForTest(), 0u);
}

}  // namespace
}  // namespace dralens::common
