#include "src/app/cli.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "src/app/flags.h"
#include "src/app/lifecycle.h"
#include "src/app/roles.h"
#include "src/common/log.h"

namespace dralens::app {
namespace {

constexpr int kUsageError = 2;

bool WantsHelp(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h" || a == "help") {
      return true;
    }
  }
  return false;
}

}  // namespace

int RunCli(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(TopLevelHelp().c_str(), stderr);
    return kUsageError;
  }
  const std::string command = args.front();
  args.erase(args.begin());
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(TopLevelHelp().c_str(), stdout);
    return 0;
  }
  if (command == "--version" || command == "version") {
    std::printf("dralens %s\n", DRALENS_VERSION);
    return 0;
  }
  Role role;
  if (command == "node") {
    role = Role::kNode;
  } else if (command == "cluster") {
    role = Role::kCluster;
  } else if (command == "demo") {
    role = Role::kDemo;
  } else if (command == "explain") {
    role = Role::kExplain;
  } else {
    std::fprintf(stderr, "dralens: unknown role \"%s\"\n\n%s", command.c_str(),
                 TopLevelHelp().c_str());
    return kUsageError;
  }
  if (WantsHelp(args)) {
    std::fputs(RoleHelp(role).c_str(), stdout);
    return 0;
  }
  absl::StatusOr<FlagValues> flags =
      ParseFlags(role, args, [](const char* name) { return std::getenv(name); });
  if (!flags.ok()) {
    std::fprintf(stderr, "dralens %s: %s\n", command.c_str(),
                 std::string(flags.status().message()).c_str());
    return kUsageError;
  }
  common::LogLevel level = common::LogLevel::kInfo;
  common::ParseLogLevel(flags->Get("log-level"), &level);
  if (role == Role::kExplain && flags->Source("log-level") == "default") {
    level = common::LogLevel::kWarn;  // a command's output, not a daemon's log
  }
  common::SetLogLevel(level);
  if (role != Role::kExplain) {
    BlockShutdownSignals();  // a command ends by itself; Ctrl-C stops it as usual
  }
  switch (role) {
    case Role::kNode:
      return RunNode(*flags);
    case Role::kCluster:
      return RunCluster(*flags);
    case Role::kDemo:
      return RunDemo(*flags);
    case Role::kExplain:
      return RunExplain(*flags);
  }
  return kUsageError;
}

}  // namespace dralens::app
