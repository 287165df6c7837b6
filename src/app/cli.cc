#include "src/app/cli.h"

#include <cstdio>

namespace dralens::app {

int RunCli(int argc, char** argv) {
  (void)argc;
  (void)argv;
  std::fprintf(stdout, "usage: dralens <node|cluster|demo> [flags]\n");
  return 0;
}

}  // namespace dralens::app
