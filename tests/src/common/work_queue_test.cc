#include "src/common/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace dralens::common {
namespace {

TEST(WorkQueueTest, OneWorkerRunsJobsInSubmissionOrder) {
  absl::Mutex mu;
  std::vector<int> order;
  {
    WorkQueue queue(1);
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(queue.Submit([&, i] {
        absl::MutexLock lock(&mu);
        order.push_back(i);
      }));
    }
  }  // the destructor runs what is queued
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(order[i], i);
  }
}

TEST(WorkQueueTest, NoMoreJobsRunAtOnceThanThereAreWorkers) {
  std::atomic<int> now{0};
  std::atomic<int> most{0};
  absl::Notification go;
  WorkQueue queue(3);
  for (int i = 0; i < 30; ++i) {
    queue.Submit([&] {
      go.WaitForNotification();
      const int n = ++now;
      int seen = most.load();
      while (n > seen && !most.compare_exchange_weak(seen, n)) {
      }
      --now;
    });
  }
  go.Notify();
  queue.Stop();
  EXPECT_LE(most.load(), 3);
  EXPECT_GE(most.load(), 1);
}

TEST(WorkQueueTest, ReportsWaitingAndRunningThroughTheCallback) {
  absl::Mutex mu;
  std::vector<std::pair<size_t, size_t>> seen;
  absl::Notification release;
  absl::Notification started;
  WorkQueue queue(1, [&](size_t waiting, size_t running) {
    absl::MutexLock lock(&mu);
    seen.emplace_back(waiting, running);
  });
  queue.Submit([&] {
    started.Notify();
    release.WaitForNotification();
  });
  started.WaitForNotification();
  queue.Submit([] {});
  queue.Submit([] {});
  EXPECT_EQ(queue.Waiting(), 2u);
  EXPECT_EQ(queue.Running(), 1u);
  release.Notify();
  queue.Stop();
  EXPECT_EQ(queue.Waiting(), 0u);
  EXPECT_EQ(queue.Running(), 0u);
  absl::MutexLock lock(&mu);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), std::make_pair(size_t{0}, size_t{0}));
  bool two_waiting = false;
  for (const auto& [waiting, running] : seen) {
    EXPECT_LE(running, 1u);
    two_waiting = two_waiting || (waiting == 2 && running == 1);
  }
  EXPECT_TRUE(two_waiting);
}

TEST(WorkQueueTest, SubmitAfterStopRunsNothing) {
  WorkQueue queue(2);
  queue.Stop();
  bool ran = false;
  EXPECT_FALSE(queue.Submit([&] { ran = true; }));
  queue.Stop();  // idempotent
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace dralens::common
