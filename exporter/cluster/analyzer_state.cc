#include "exporter/cluster/analyzer_state.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace dralens::exporter::cluster {

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600};
  return *buckets;
}

bool IsMemorySlice(absl::string_view name) {
  return absl::StartsWith(name, "memory-slice") || absl::StartsWith(name, "memorySlice");
}

double ShareOf(const std::map<std::string, double>& capacity,
               const std::map<std::string, double>& used) {
  auto ratio = [](double u, double c) { return c > kEpsilon ? std::clamp(u / c, 0.0, 1.0) : 0.0; };
  double slices = 0, slices_used = 0;
  for (const auto& [name, value] : capacity) {
    if (IsMemorySlice(name)) {
      slices += value;
      if (auto u = used.find(name); u != used.end()) {
        slices_used += u->second;
      }
    }
  }
  if (slices > kEpsilon) {
    return ratio(slices_used, slices);
  }
  if (auto m = capacity.find("memory"); m != capacity.end()) {
    auto u = used.find("memory");
    return ratio(u == used.end() ? 0 : u->second, m->second);
  }
  double share = 0;
  for (const auto& [name, value] : capacity) {
    if (auto u = used.find(name); u != used.end()) {
      share = std::max(share, ratio(u->second, value));
    }
  }
  return share;
}

}  // namespace dralens::exporter::cluster
