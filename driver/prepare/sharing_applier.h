// SharingApplier: puts a device's recorded sharing decision into effect, and takes it back when
// the device's last holder goes. The only part of preparation that changes sharing settings
// through the device source or the MPS control.
//
//   TimeSlicing  sets the GPU's compute time slice (a MIG device has none: its processes share
//                it as is); the last holder resets it to Default;
//   MPS          creates the daemon owner's directories (<mps_root>/<owner>/{pipe,log}),
//                starts the device's control daemon and hands back the client's environment
//                and mounts for the CDI device; the last holder stops the daemon and removes
//                the directories.
//
//   dralens_sharing_decisions_total{strategy,result,reason}   one per device decision; the
//       outcome is an enum (granted, the planner's refusals, apply_error)
//   dralens_sharing_restores_total{strategy,result}           one per device of a restored
//       claim whose settings were applied again at start (ok, error)
//
// After a restart (a kill, a crash, a GPU reset or driver reload) the settings of the claims in
// the checkpoint may be gone: the MPS control daemons died with their parent or the GPU, the
// time slice went back to Default. Restore() applies them again, as Apply() did at prepare (both
// calls are idempotent), for every device of every PrepareCompleted claim; PrepareStarted claims
// are rolled back by their next prepare instead.
//
// Thread-safety: thread-safe. Callers hold the locks of the devices they apply or release.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "driver/discovery/time_slice_control.h"
#include "driver/prepare/cdi.h"
#include "driver/prepare/checkpoint.h"
#include "driver/sharing/mps.h"
#include "driver/sharing/planner.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/registry.h"

namespace dralens::driver::prepare {

// What became of one sharing decision for one device.
enum class SharingOutcome {
  kGranted,
  kDeviceBusy,     // refused: sharing::Refusal::kDeviceBusy
  kOverCapacity,   // refused: sharing::Refusal::kOverCapacity
  kMixedStrategy,  // refused: sharing::Refusal::kMixedStrategy
  kApplyError,     // granted, but the settings could not be applied
};
inline constexpr int kSharingOutcomeCount = 5;
inline constexpr int kSharingStrategyCount = 5;
// The outcome of a planner decision (granted, or its refusal).
SharingOutcome OutcomeOf(const sharing::SharingDecision& decision);
// The `reason` label: "none", "device_busy", "over_capacity", "mixed_strategy", "apply_error".
absl::string_view ToString(SharingOutcome outcome);

struct SharingMetrics {
  prometheus::Family<prometheus::Counter>& decisions_total;
  prometheus::Family<prometheus::Counter>& restores_total;
  // [strategy][outcome]
  std::array<std::array<prometheus::Counter*, kSharingOutcomeCount>, kSharingStrategyCount>
      decisions{};

  static SharingMetrics Create(prometheus::Registry& registry);
  void Record(sharing::SharingStrategy strategy, SharingOutcome outcome);
  void RecordRestore(sharing::SharingStrategy strategy, bool ok);
};

// What Restore() did.
struct SharingRestoreResult {
  int applied = 0;  // devices whose settings were applied again
  int errors = 0;   // devices whose settings could not be (logged and counted)
};

class SharingApplier {
 public:
  // `mps_root` is absolute (MPS directories go under it). Not owned; both must outlive it.
  SharingApplier(discovery::TimeSliceControl& time_slices, sharing::MpsControl& mps,
                 std::string mps_root);

  // Applies the recorded decision of `device`, the claim `uid`'s `ordinal`-th device (its CUDA
  // ordinal in the container); `host_index` is the GPU's NVML index (-1: none). Returns the
  // edits the claim's CDI device needs (MPS: environment and mounts; otherwise none).
  absl::StatusOr<CdiContainerEdits> Apply(const std::string& uid, const CheckpointDevice& device,
                                          int host_index, int ordinal);
  // Undoes the settings of those devices of `uid` that no other claim of `holders` holds.
  // Idempotent. Errors carry FailureReason kSharingError.
  absl::Status Release(const std::string& uid, const std::vector<CheckpointDevice>& devices,
                       const Checkpoint& holders);
  // See the top of this file. `host_index` gives a device name's NVML index (-1: none). Callers
  // run it at start, before any prepare or unprepare.
  SharingRestoreResult Restore(const Checkpoint& checkpoint,
                               const std::function<int(const std::string&)>& host_index,
                               SharingMetrics& metrics);

 private:
  discovery::TimeSliceControl& time_slices_;
  sharing::MpsControl& mps_;
  const std::string mps_root_;
};

}  // namespace dralens::driver::prepare
