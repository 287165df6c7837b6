// Entry points of the three roles. Each returns the process exit code.
#pragma once

#include "src/app/flags.h"

namespace dralens::app {

int RunNode(const FlagValues& flags);
int RunCluster(const FlagValues& flags);
int RunDemo(const FlagValues& flags);
// `dralens explain` (src/app/explain.cc): a command, not a role, but parsed like one.
int RunExplain(const FlagValues& flags);

}  // namespace dralens::app
