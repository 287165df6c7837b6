// Waiting for a condition in tests, never for a fixed time.
//
//   EXPECT_TRUE(Eventually([&] { return writer.Written() == 3; }));
//
// The deadline is generous (it bounds a hang, it measures nothing): a condition that holds
// returns at once, one that never holds fails the check after `timeout`.
#pragma once

#include <algorithm>
#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace dralens::testing {

inline ::testing::AssertionResult Eventually(const std::function<bool()>& condition,
                                             absl::Duration timeout = absl::Seconds(30)) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = absl::Milliseconds(1);
  while (!condition()) {
    if (absl::Now() > deadline) {
      return ::testing::AssertionFailure()
             << "condition still false after " << absl::FormatDuration(timeout);
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(50));
  }
  return ::testing::AssertionSuccess();
}

}  // namespace dralens::testing
