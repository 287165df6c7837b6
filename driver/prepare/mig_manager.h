// MigManager: the MIG instances this node creates for claims (dynamic MIG), and the only part
// of preparation that creates or destroys them through the device source.
//
//   Create   the instance a dynamic MIG device stands for, turning MIG mode on first where
//            the GPU is off and switches without a reset (Hopper and later); an Ampere GPU with
//            MIG mode off is refused (its placements are not published);
//   Destroy  by its recorded ids, or whatever instance sits at its placement when the ids were
//            never recorded (a crash between create and record); already gone (NotFound, or the
//            GPU no longer in MIG mode after a reset) is success. The last instance of a GPU
//            that switches without a reset turns its MIG mode off again;
//   EnsureFullGpu  before a full GPU is prepared: a GPU in MIG mode is switched off when
//            dynamic MIG may do so and no instance is left, and refused otherwise;
//   Reclaim  at start, every instance no prepared claim owns;
// and, after any of them, tells the layout listener what the GPUs look like now (the MIG
// series follow from that).
//
//   dralens_mig_operations_total{operation,result}      create | destroy | enable | disable,
//                                                        ok | error
//   dralens_mig_operation_duration_seconds{operation}
//
// Every MIG-mode change and instance change of one GPU is serialised by a per-GPU lock, so a
// claim destroying the last instance cannot switch MIG mode off under a claim creating one.
//
// Thread-safety: thread-safe (the device source is). Callers hold the device locks of the
// instances they create or destroy.
#pragma once

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "driver/discovery/gpu_discovery.h"
#include "driver/discovery/mig_control.h"
#include "driver/prepare/checkpoint.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/common/keyed_mutex.h"
#include "src/model/inventory.h"

namespace dralens::driver::prepare {

enum class MigOperation { kCreate, kDestroy, kEnable, kDisable };
inline constexpr int kMigOperationCount = 4;
// "create" | "destroy" | "enable" | "disable" (the last two switch MIG mode).
absl::string_view ToString(MigOperation operation);

struct MigMetrics {
  prometheus::Family<prometheus::Counter>& operations_total;
  prometheus::Family<prometheus::Histogram>& operation_duration;
  // [operation][ok ? 0 : 1]
  std::array<std::array<prometheus::Counter*, 2>, kMigOperationCount> operations{};
  std::array<prometheus::Histogram*, kMigOperationCount> durations{};

  static MigMetrics Create(prometheus::Registry& registry);
  void Record(MigOperation operation, bool ok, absl::Duration took);
};

// Told what the GPUs look like after the MIG layout changed.
class MigLayoutListener {
 public:
  virtual ~MigLayoutListener() = default;
  virtual void OnMigLayoutChanged(const model::Inventory& now) = 0;
};

// An instance, as (parent GPU UUID, GI id, CI id).
using MigInstanceId = std::tuple<std::string, uint32_t, uint32_t>;

class MigManager {
 public:
  // Not owned; all must outlive the manager.
  // `control` creates and destroys; `discovery` finds instances by placement and tells the
  // layout afterwards.
  MigManager(discovery::GpuDiscovery& discovery, discovery::MigControl& control,
             MigMetrics& metrics, common::Clock& clock, MigLayoutListener& layout);

  // Errors carry FailureReason kMigError and name the profile, placement and GPU.
  absl::StatusOr<model::MigDevice> Create(const CheckpointDevice::DynamicMig& mig);
  absl::Status Destroy(const CheckpointDevice::DynamicMig& mig);
  // Makes the full GPU `gpu_uuid` preparable: OK when it is not MIG capable or MIG mode is off;
  // with `may_switch` (dynamic MIG) a GPU in MIG mode without instances is switched off where
  // that needs no reset. Otherwise FailedPrecondition (kMigError) naming the GPU.
  absl::Status EnsureFullGpu(absl::string_view gpu_uuid, bool may_switch);
  // Whether the instance recorded for `mig` exists now: same GPU, ids, profile and placement,
  // and the recorded MIG UUID when one is given (a re-created instance has a new UUID).
  // `now` is a fresh discovery.
  static bool Exists(const model::Inventory& now, const CheckpointDevice::DynamicMig& mig,
                     absl::string_view uuid);
  // The names of `devices`' dynamic MIG devices whose recorded instance does not exist now
  // (a GPU reset or a driver reload took it). Empty when the claim has none or all exist.
  absl::StatusOr<std::vector<std::string>> Vanished(const std::vector<CheckpointDevice>& devices);
  // Destroys every instance of `discovered` not in `owned`. Returns how many were destroyed;
  // the first error is returned after trying them all.
  absl::StatusOr<int> Reclaim(const model::Inventory& discovered,
                              const std::set<MigInstanceId>& owned);
  // A fresh discovery of the GPUs and their instances.
  absl::StatusOr<model::Inventory> Discover() { return discovery_.Discover(); }
  // Rediscovers and tells the layout listener. A failed discovery is logged, not returned: the
  // series stay as they were until the next change.
  void PublishLayout();

 private:
  // The GPU as discovered now; NotFound when it is gone.
  absl::StatusOr<model::GpuInfo> FindGpu(absl::string_view gpu_uuid);
  absl::Status SwitchMigMode(absl::string_view gpu_uuid, bool enabled);
  // After an instance of `gpu_uuid` was destroyed: MIG mode off when none is left and the GPU
  // switches without a reset. A failure is logged and counted, never returned: the instance
  // is gone, and the next full-GPU prepare tries again.
  void DisableIfUnused(absl::string_view gpu_uuid);

  common::KeyedMutex gpu_locks_;  // by parent GPU UUID
  discovery::GpuDiscovery& discovery_;
  discovery::MigControl& control_;
  MigMetrics& metrics_;
  common::Clock& clock_;
  MigLayoutListener& layout_;
};

}  // namespace dralens::driver::prepare
