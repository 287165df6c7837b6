#include "driver/discovery/health_events.h"

namespace dralens::driver::discovery {

absl::string_view ToString(HealthEventKind kind) {
  switch (kind) {
    case HealthEventKind::kXid:
      return "xid";
    case HealthEventKind::kGpuLost:
      return "gpu_lost";
    case HealthEventKind::kUnmonitored:
      return "unmonitored";
  }
  return "xid";
}

}  // namespace dralens::driver::discovery
