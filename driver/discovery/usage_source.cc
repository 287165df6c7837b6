#include "driver/discovery/usage_source.h"

namespace dralens::driver::discovery {

absl::string_view ToString(UsageMethod method) {
  switch (method) {
    case UsageMethod::kDeviceUtilization:
      return "device_utilization";
    case UsageMethod::kGpm:
      return "gpm";
    case UsageMethod::kMemoryOnly:
      return "memory_only";
  }
  return "memory_only";
}

}  // namespace dralens::driver::discovery
