// The command line: `dralens <role> [flags]`.
#pragma once

namespace dralens::app {

// Parses argv, runs the chosen role and returns the process exit code.
int RunCli(int argc, char** argv);

}  // namespace dralens::app
