// Time limits in tests that bound one request rather than a hang.
//
// A request timeout of a second is generous for a normal build, but sanitizer builds run every
// thread several times slower, and a loaded runner slower still. Such limits, and the faults
// that are sized against them, are multiplied by kTimeScale: 10 under ThreadSanitizer, 3 under
// AddressSanitizer, 1 otherwise (CMake sets DRALENS_TEST_TIME_SCALE on the test kit).
#pragma once

#include "absl/time/time.h"

#ifndef DRALENS_TEST_TIME_SCALE
#define DRALENS_TEST_TIME_SCALE 1
#endif

namespace dralens::testing {

inline constexpr int kTimeScale = DRALENS_TEST_TIME_SCALE;

inline absl::Duration Scaled(absl::Duration limit) { return limit * kTimeScale; }

}  // namespace dralens::testing
