// Small helpers shared by the load, storm and soak drivers: integer flags and percentile lines.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace dralens::bench {

// The value of --name=<int>, or `fallback`.
inline int IntFlag(int argc, char** argv, const std::string& name, int fallback) {
  for (int i = 1; i < argc; ++i) {
    int v = 0;
    if (absl::StartsWith(argv[i], "--" + name + "=") &&
        absl::SimpleAtoi(std::string(argv[i]).substr(name.size() + 3), &v)) {
      return v;
    }
  }
  return fallback;
}

// "n=... p50=... p99=... max=..." of `samples` (sorted in place), in `unit`.
inline std::string Percentiles(std::vector<double>& samples, const char* unit) {
  if (samples.empty()) {
    return "no samples";
  }
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    return samples[std::min(samples.size() - 1, static_cast<size_t>(q * samples.size()))];
  };
  return absl::StrFormat("n=%d p50=%.1f %s p99=%.1f %s max=%.1f %s", samples.size(), at(0.5), unit,
                         at(0.99), unit, samples.back(), unit);
}

}  // namespace dralens::bench
