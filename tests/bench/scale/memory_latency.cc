// What one cache miss costs on this machine: the time of a load that depends on the previous
// one, in a random cycle through working sets from 1 MiB to 1 GiB, with 4 KiB pages and with
// transparent huge pages requested (MADV_HUGEPAGE, where the kernel grants them).
//
// The cluster role's per-event cost at fleet scale is the records an event touches that are not
// in cache (docs/benchmarks.md): at 1,000 claims the whole state fits in the last-level cache, at
// 100,000 (about 350 MB) almost nothing an event reads is there. This probe says what each of
// those reads costs here, so that the growth from 1k to 100k can be read as a count of misses.
//
//   ./build/tests/bench/scale/memory_latency [--max-mib=1024] [--steps=20000000]
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace {

struct alignas(64) Line {
  size_t next;
  char pad[64 - sizeof(size_t)];
};

// Nanoseconds per dependent load over `lines` cache lines linked in one random cycle.
double Chase(size_t lines, bool huge, size_t steps) {
  const size_t bytes = lines * sizeof(Line);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    return -1;
  }
  if (huge) {
    madvise(mem, bytes, MADV_HUGEPAGE);
  }
  Line* v = static_cast<Line*>(mem);
  std::vector<size_t> order(lines);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(1));
  for (size_t i = 0; i < lines; ++i) {
    v[order[i]].next = order[(i + 1) % lines];
  }
  size_t p = order[0];
  for (size_t i = 0; i < lines; ++i) {  // one lap to warm what fits
    p = v[p].next;
  }
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < steps; ++i) {
    p = v[p].next;
  }
  const auto end = std::chrono::steady_clock::now();
  // Keep the chase from being optimized away.
  if (p == SIZE_MAX) {
    std::puts("");
  }
  munmap(mem, bytes);
  return std::chrono::duration<double, std::nano>(end - start).count() / static_cast<double>(steps);
}

}  // namespace

int main(int argc, char** argv) {
  size_t max_mib = 1024;
  size_t steps = 20000000;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    const bool ok =
        (absl::ConsumePrefix(&a, "--max-mib=") && absl::SimpleAtoi(a, &max_mib) && max_mib > 0) ||
        (absl::ConsumePrefix(&a, "--steps=") && absl::SimpleAtoi(a, &steps) && steps > 0);
    if (!ok) {
      std::fprintf(stderr, "usage: memory_latency [--max-mib=1024] [--steps=20000000]\n");
      return 2;
    }
  }
  std::printf("%10s %22s %22s\n", "working set", "ns per miss, 4 KiB", "ns per miss, THP asked");
  for (size_t mib = 1; mib <= max_mib; mib *= 2) {
    const size_t lines = mib * 1024 * 1024 / sizeof(Line);
    std::printf("%6zu MiB %22.1f %22.1f\n", mib, Chase(lines, false, steps),
                Chase(lines, true, steps));
    std::fflush(stdout);
  }
  return 0;
}
