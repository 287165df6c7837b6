// MigManager: the MIG instances this node creates for claims (dynamic MIG), and the only part
// of preparation that creates or destroys them through the device source.
//
//   Create   the instance a dynamic MIG device stands for, turning MIG mode on when the GPU
//            reports it off (NVML's NOT_SUPPORTED);
//   Destroy  by its recorded ids, or whatever instance sits at its placement when the ids were
//            never recorded (a crash between create and record); already gone (NotFound, or the
//            GPU no longer in MIG mode) is success;
//   Reclaim  at start, every instance no prepared claim owns;
// and, after any of them, tells the layout listener what the GPUs look like now (the MIG
// series follow from that).
//
//   dralens_mig_operations_total{operation,result}      create | destroy, ok | error
//   dralens_mig_operation_duration_seconds{operation}
//
// Thread-safety: thread-safe (the device source is). Callers hold the device locks of the
// instances they create or destroy.
#pragma once

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>

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
#include "src/model/inventory.h"

namespace dralens::driver::prepare {

enum class MigOperation { kCreate, kDestroy };
// "create" | "destroy".
absl::string_view ToString(MigOperation operation);

struct MigMetrics {
  prometheus::Family<prometheus::Counter>& operations_total;
  prometheus::Family<prometheus::Histogram>& operation_duration;
  // [operation][ok ? 0 : 1]
  std::array<std::array<prometheus::Counter*, 2>, 2> operations{};
  std::array<prometheus::Histogram*, 2> durations{};

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
  // Destroys every instance of `discovered` not in `owned`. Returns how many were destroyed;
  // the first error is returned after trying them all.
  absl::StatusOr<int> Reclaim(const model::Inventory& discovered,
                              const std::set<MigInstanceId>& owned);
  // Rediscovers and tells the layout listener. A failed discovery is logged, not returned: the
  // series stay as they were until the next change.
  void PublishLayout();

 private:
  discovery::GpuDiscovery& discovery_;
  discovery::MigControl& control_;
  MigMetrics& metrics_;
  common::Clock& clock_;
  MigLayoutListener& layout_;
};

}  // namespace dralens::driver::prepare
