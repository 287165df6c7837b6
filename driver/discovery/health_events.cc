#include "driver/discovery/health_events.h"

namespace dralens::driver::discovery {

absl::string_view ToString(HealthEventKind kind) {
  return kind == HealthEventKind::kXid ? "xid" : "gpu_lost";
}

}  // namespace dralens::driver::discovery
