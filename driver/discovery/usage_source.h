// UsageSource: how busy each GPU and MIG device is, sampled on demand.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dralens::driver::discovery {

// Where a device's utilisation figure comes from.
enum class UsageMethod {
  // nvmlDeviceGetUtilizationRates: the share of the driver's last sample period (1/6 s to 1 s)
  // in which a kernel ran. Full GPUs not in MIG mode.
  kDeviceUtilization,
  // GPU Performance Monitoring (Hopper and later): the graphics-engine activity between this
  // sample and the previous one. MIG devices, and full GPUs in MIG mode have none.
  kGpm,
  // Memory only: NVML has no utilisation for this device (a MIG device without GPM, or a GPU
  // whose counters answer NOT_SUPPORTED).
  kMemoryOnly,
};
absl::string_view ToString(UsageMethod method);

// One device's sample.
struct DeviceUsage {
  std::string uuid;  // GPU-... for a full GPU, MIG-... for a MIG device
  // 0..1; nullopt when this device has no utilisation figure (kMemoryOnly, or the first GPM
  // sample, which has no previous one to compare with).
  std::optional<double> utilization;
  std::optional<uint64_t> memory_used_bytes;  // nullopt when NVML would not say
  uint64_t memory_total_bytes = 0;
  UsageMethod method = UsageMethod::kMemoryOnly;
  bool operator==(const DeviceUsage&) const = default;
};

// Thread-safety: one thread at a time should call SampleUsage (GPM keeps the previous sample of
// each MIG device between calls); other capabilities may be used meanwhile.
class UsageSource {
 public:
  virtual ~UsageSource() = default;

  // A sample of every GPU and existing MIG device this process may read. A GPU in MIG mode is
  // reported by its MIG devices and, with its memory only, by itself. A device whose figures
  // cannot be read (lost, NO_PERMISSION) is left out. Errors only when nothing could be read.
  virtual absl::StatusOr<std::vector<DeviceUsage>> SampleUsage() = 0;
};

}  // namespace dralens::driver::discovery
