#include "src/app/lifecycle.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "src/common/log.h"
#include "src/common/status.h"

namespace dralens::app {

absl::Status RunLifecycle(absl::string_view role, const std::vector<Step>& startup,
                          const std::vector<Step>& teardown) {
  absl::Status result;
  for (const Step& step : startup) {
    DLOG(kDebug, role, "step starting", {{"step", step.name}});
    absl::Status s = step.run();
    if (!s.ok()) {
      result = common::Annotate(s, step.name);
      DLOG(kError, role, "step failed", {{"step", step.name}, {"error", s.message()}});
      break;
    }
  }
  for (const Step& step : teardown) {
    absl::Status s = step.run();
    if (!s.ok()) {
      DLOG(kWarn, role, "teardown step failed", {{"step", step.name}, {"error", s.message()}});
    }
  }
  return result;
}

namespace {

sigset_t ShutdownSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);  // RequestShutdown()
  return set;
}

}  // namespace

void BlockShutdownSignals() {
  sigset_t set = ShutdownSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // Writes to a closed socket must fail with EPIPE, not kill the process.
  signal(SIGPIPE, SIG_IGN);
}

std::string WaitForShutdownSignal() {
  sigset_t set = ShutdownSet();
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "request";
  }
}

void RequestShutdown() { kill(getpid(), SIGUSR1); }

}  // namespace dralens::app
