// UsageView: one round of utilisation sampling on a node, as the node's usage collector sees
// it. The driver samples its device source (driver/usage) and hands each round to a UsageSink
// (exporter/node); neither side includes the other.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dralens::model {

struct DeviceUsageSample {
  std::string uuid;  // GPU-... or MIG-...: the key of model::NodeDevice and model::ClaimDevice
  // 0..1; nullopt when the device has no utilisation figure this round.
  std::optional<double> utilization;
  std::optional<uint64_t> memory_used_bytes;
  std::string method;  // "device_utilization", "gpm" or "memory_only"

  bool operator==(const DeviceUsageSample&) const = default;
};

struct UsageView {
  absl::Time at;  // when the round was taken
  std::vector<DeviceUsageSample> devices;
};

// Receives every round, one call at a time, oldest first.
class UsageSink {
 public:
  virtual ~UsageSink() = default;
  virtual void ApplyUsage(const UsageView& view) = 0;
};

}  // namespace dralens::model
