// HealthEventSource: GPU health events (Xids, lost GPUs) as NVML delivers them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dralens::driver::discovery {

enum class HealthEventKind {
  kXid,      // an Xid critical error on a GPU (or one of its MIG devices)
  kGpuLost,  // the GPU fell off the bus / became inaccessible (NVML_ERROR_GPU_IS_LOST)
  // The GPU's health cannot be followed: its events could not be registered (no Xid support,
  // or registration failed). Not a fault; the device is tainted `unmonitored`.
  kUnmonitored,
};
absl::string_view ToString(HealthEventKind kind);

inline constexpr uint32_t kNoMigInstance = 0xFFFFFFFFu;

struct HealthEvent {
  // The affected GPU. Empty for a kGpuLost event that could not be attributed to one GPU (the
  // NVML wait itself failed): consumers treat it as "every GPU".
  std::string gpu_uuid;
  HealthEventKind kind = HealthEventKind::kXid;
  uint64_t xid = 0;  // the Xid for kXid (999 = unknown Xid); 79 for kGpuLost when known
  // The MIG instance the event is attributed to, or kNoMigInstance for the whole GPU.
  uint32_t gi_id = kNoMigInstance;
  uint32_t ci_id = kNoMigInstance;
  bool operator==(const HealthEvent&) const = default;
};

// Thread-safety: one thread at a time should call WaitForEvent; it may block while other
// threads use the same backend for discovery or MIG changes.
class HealthEventSource {
 public:
  virtual ~HealthEventSource() = default;

  // Blocks up to `timeout` for the next health event. nullopt on timeout.
  virtual absl::StatusOr<std::optional<HealthEvent>> WaitForEvent(absl::Duration timeout) = 0;
};

}  // namespace dralens::driver::discovery
