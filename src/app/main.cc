// dralens: one binary, three roles. Everything but this file is a library that tests link.
#include <malloc.h>

#include <cstdlib>
#include <string_view>

#include "src/app/cli.h"

int main(int argc, char** argv) {
  // glibc gives each thread that allocates its own malloc arena, up to 8 per core, and an
  // arena keeps what was freed in it. The node role's gRPC, prepare, scrape and checkpoint
  // threads then hold several copies of the same transient peak: 1,000 concurrent prepares
  // peaked at 179 MB with the default arenas, 66 MB with two and 52 MB with one
  // (docs/reliability.md), and one arena drained the burst no slower: the node's threads mostly
  // wait on fsync and the kubelet, not on malloc. Not for the cluster role: its five informers
  // decode lists at once, and on two arenas they wait on each other's locks; its sync at 100k
  // claims took 46 s of CPU instead of 29 s (docs/benchmarks.md). MALLOC_ARENA_MAX in the
  // environment still wins.
  if (argc > 1 && std::string_view(argv[1]) == "node" && getenv("MALLOC_ARENA_MAX") == nullptr) {
    mallopt(M_ARENA_MAX, 1);
  }
  return dralens::app::RunCli(argc, argv);
}
