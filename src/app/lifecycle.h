// A role's life as ordered lists of named steps, so start-up order is explicit and teardown
// always runs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dralens::app {

struct Step {
  std::string name;
  std::function<absl::Status()> run;
};

// Runs `startup` in order and stops at the first failure; then runs every `teardown` step in
// order, whatever happened, logging each failure. Returns the first failure, annotated with
// the step's name, or OK.
absl::Status RunLifecycle(absl::string_view role, const std::vector<Step>& startup,
                          const std::vector<Step>& teardown);

// Blocks SIGINT and SIGTERM in the calling thread and every thread it starts afterwards, so
// that only WaitForShutdownSignal() receives them. Call first thing in main().
void BlockShutdownSignals();

// Blocks until SIGINT or SIGTERM arrives or RequestShutdown() is called. Returns the signal
// name ("SIGINT", "SIGTERM" or "request").
std::string WaitForShutdownSignal();

// Wakes WaitForShutdownSignal() from inside the process (tests, fatal component errors).
void RequestShutdown();

}  // namespace dralens::app
