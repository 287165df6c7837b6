// prepare_bench's flags (the top of prepare_bench.cc says what each measures).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace dralens::bench {

inline constexpr int kMaxConcurrency = 64;  // the simulated profile's count limit

struct Flags {
  int iterations = 2000;    // timed prepares per configuration, across all workers
  double max_seconds = 25;  // cap on each timed phase
  int idle_connections = kMaxConcurrency + 4;  // RestClientOptions::max_idle_connections
  std::vector<int> concurrency = {1, kMaxConcurrency};
  std::string dir;    // parent of the temp dir; "" = the system temp dir
  bool logs = false;  // driver log lines to stderr instead of discarded
  std::string telemetry = "metrics";
  bool claim_status = true;
};

// The flags, or what is wrong with them (with the usage).
inline absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    std::pair<std::string, std::string> kv = absl::StrSplit(arg, absl::MaxSplits('=', 1));
    const std::string& key = kv.first;
    const std::string& value = kv.second;
    bool ok = true;
    if (key == "--iterations") {
      ok = absl::SimpleAtoi(value, &flags.iterations) && flags.iterations > 0;
    } else if (key == "--max-seconds") {
      ok = absl::SimpleAtod(value, &flags.max_seconds) && flags.max_seconds > 0;
    } else if (key == "--concurrency") {
      flags.concurrency.clear();
      for (absl::string_view part : absl::StrSplit(value, ',')) {
        int c = 0;
        ok = ok && absl::SimpleAtoi(part, &c) && c >= 1 && c <= kMaxConcurrency;
        flags.concurrency.push_back(c);
      }
    } else if (key == "--idle-connections") {
      ok = absl::SimpleAtoi(value, &flags.idle_connections) && flags.idle_connections >= 0;
    } else if (key == "--dir") {
      flags.dir = value;
    } else if (key == "--logs") {
      flags.logs = true;
    } else if (key == "--telemetry") {
      flags.telemetry = value;
      ok = value == "none" || value == "metrics" || value == "traces" || value == "traces-down";
    } else if (key == "--claim-status") {
      ok = value == "on" || value == "off";
      flags.claim_status = value == "on";
    } else {
      ok = false;
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad argument \"", arg,
                       "\"; usage: prepare_bench [--iterations=N] [--max-seconds=S] "
                       "[--concurrency=1,64] [--idle-connections=N] [--dir=PATH] [--logs] "
                       "[--telemetry=none|metrics|traces|traces-down] [--claim-status=on|off]"));
    }
  }
  return flags;
}

}  // namespace dralens::bench
