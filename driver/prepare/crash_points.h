// Crash points for the fault tests: when the environment variable DRALENS_TEST_CRASH_AT names
// one of these steps, the process calls _exit(137) right there (as if killed with SIGKILL):
//   after-started                  PrepareStarted written, no CDI spec yet
//   after-cdi                      CDI spec written, checkpoint still PrepareStarted
//   after-completed                PrepareCompleted written, answer not yet returned
//   unprepare-after-cdi-removed    CDI spec removed, checkpoint entry still present
//   unprepare-after-checkpoint     checkpoint entry removed, answer not yet returned
//   after-mig-created              dynamic MIG instances created, their ids not yet recorded
//   unprepare-after-mig-destroyed  dynamic MIG instances destroyed, entry still present
#pragma once

#include "absl/strings/string_view.h"

namespace dralens::driver::prepare {

inline constexpr char kCrashAtEnv[] = "DRALENS_TEST_CRASH_AT";

// Calls _exit(137) when DRALENS_TEST_CRASH_AT equals `step`.
void MaybeCrashForTest(absl::string_view step);

}  // namespace dralens::driver::prepare
