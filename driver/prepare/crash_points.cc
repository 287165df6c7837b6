#include "driver/prepare/crash_points.h"

#include <unistd.h>

#include <cstdlib>

#include "src/common/log.h"

namespace dralens::driver::prepare {

void MaybeCrashForTest(absl::string_view step) {
  const char* at = std::getenv(kCrashAtEnv);
  if (at != nullptr && step == at) {
    DLOG(kWarn, "prepare", "crashing on purpose (test hook)", {{"step", step}});
    _exit(137);
  }
}

}  // namespace dralens::driver::prepare
