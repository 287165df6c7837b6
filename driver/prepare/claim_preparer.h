// ClaimPreparer: the ClaimHandler behind NodePrepareResources / NodeUnprepareResources.
//
// Prepare, per claim (in this order; each step's "why" is in claim_preparer.cc):
//   1. lock the claim UID (one operation per claim at a time);
//   2. checkpoint says PrepareCompleted → return the recorded answer (no GET, no side effect);
//      PrepareStarted (a crash mid-prepare) → roll back: remove the CDI spec, drop the entry;
//   3. GET the ResourceClaim, check the UID ("was replaced"), require status.allocation;
//   4. plan purely (claim_plan.h): our driver's results in our pool, devices resolved against
//      the inventory (an unknown device is a per-claim error), CDI spec computed;
//   5. resolve each device's opaque config (class configs, then claim configs; a bad one is a
//      per-claim invalid_config error naming the field);
//   6. lock the claim's devices (sorted, so claims sharing a device serialise without
//      deadlock) and, in the same checkpoint update that records PrepareStarted, let the
//      SharingPlanner decide each device against the claims that hold it; the decisions are
//      recorded with the devices (a refusal fails the claim with the planner's reason);
//   7. create dynamic MIG instances, apply the sharing settings (time slice through the device
//      source, MPS daemon through MpsControl, whose environment and mounts go into the CDI
//      device), write the CDI spec, checkpoint PrepareCompleted;
//   8. answer with the devices.
// A claim prepared again (the kubelet re-sends prepared claims, and a claim reserved for
// several pods is used by each) is answered from the checkpoint as `shared_claim`.
// Unprepare, per claim: unknown → success; else, under the device locks, remove the CDI spec,
// destroy dynamic MIG instances, release the sharing settings when the claim was the device's
// last holder (time slice back to Default, MPS daemon stopped and its directories removed),
// then drop the checkpoint entry.
//
// Batches: every distinct claim UID gets exactly one entry; per-claim failures become that
// entry's error and never fail the batch. Claims of a batch run in parallel (one thread each).
//
// Checkpoint: one in-memory copy; every change is an atomic write of the whole file
// (CheckpointStore::Save), and memory is updated only once the write succeeded. Concurrent
// changes share one write (group commit, see UpdateCheckpoint).
//
// Telemetry: every claim is a ClaimTelemetry (a span in the claim's lifecycle trace, phase
// children, per-claim metrics with the reason of a failure); see prepare_telemetry.h.
//
// Crash points for fault tests: when the environment variable DRALENS_TEST_CRASH_AT names one
// of these steps, the process calls _exit(137) right there (as if killed with SIGKILL):
//   after-started                PrepareStarted written, no CDI spec yet
//   after-cdi                    CDI spec written, checkpoint still PrepareStarted
//   after-completed              PrepareCompleted written, answer not yet returned
//   unprepare-after-cdi-removed  CDI spec removed, checkpoint entry still present
//   unprepare-after-checkpoint   checkpoint entry removed, answer not yet returned
//   after-mig-created            dynamic MIG instances created, their ids not yet recorded
//   unprepare-after-mig-destroyed  dynamic MIG instances destroyed, entry still present
//
// Thread-safety: Prepare, Unprepare and SetInventory may be called from any thread at once.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "driver/discovery/device_source.h"
#include "driver/prepare/cdi.h"
#include "driver/prepare/checkpoint.h"
#include "driver/prepare/claim_handler.h"
#include "driver/prepare/claim_plan.h"
#include "driver/prepare/claim_state.h"
#include "driver/prepare/prepare_telemetry.h"
#include "driver/sharing/mps.h"
#include "driver/sharing/planner.h"
#include "nlohmann/json.hpp"
#include "src/common/clock.h"
#include "src/k8s/client.h"
#include "src/model/inventory.h"
#include "src/telemetry/tracing/tracer_impl.h"

namespace dralens::driver::prepare {

inline constexpr char kCrashAtEnv[] = "DRALENS_TEST_CRASH_AT";

struct ClaimPreparerOptions {
  std::string driver_name = "gpu.dralens.dev";
  std::string pool_name;  // this node's pool: the node name
  CdiHostInfo cdi_host;
  // Telemetry; not owned, must outlive the preparer. Null metrics record nothing; a null tracer
  // is a no-op tracer; a null clock is the real clock.
  PrepareMetrics* metrics = nullptr;
  telemetry::Tracer* tracer = nullptr;
  common::Clock* clock = nullptr;
  // Dynamic MIG: allocations may name any profile x placement of a MIG-capable GPU; prepare
  // creates the instance through `mig_source` (not owned) and unprepare destroys it.
  bool dynamic_mig = false;
  discovery::DeviceSource* mig_source = nullptr;
  // Sharing: TimeSlicing sets the GPU's interval through `device_source` (not owned); MPS
  // starts the device's control daemon through `mps` (not owned) with per-claim directories
  // under `mps_root`. A claim asking for a strategy whose component is null fails with
  // sharing_error.
  discovery::DeviceSource* device_source = nullptr;
  sharing::MpsControl* mps = nullptr;
  std::string mps_root;
};

class ClaimPreparer : public ClaimHandler {
 public:
  // Loads the checkpoint (see checkpoint.h for its outcomes) and restores claim states into
  // `states`. The references are not owned and must outlive the preparer.
  static absl::StatusOr<std::unique_ptr<ClaimPreparer>> Create(
      ClaimPreparerOptions options, k8s::KubeClient& client, CheckpointStore& store, CdiWriter& cdi,
      ClaimStateMachine& states, model::Inventory inventory);

  // ClaimHandler
  std::map<std::string, PrepareResult> Prepare(const std::vector<ClaimRef>& claims) override;
  std::map<std::string, std::string> Unprepare(const std::vector<ClaimRef>& claims) override;

  // Replaces the inventory used to resolve devices of claims prepared from now on.
  void SetInventory(const model::Inventory& inventory);

  // Dynamic MIG, at start: destroys every MIG instance in `discovered` that no prepared claim
  // owns (left by a crash, or by someone else). Returns how many were destroyed; the first
  // error is returned after trying them all.
  absl::StatusOr<int> ReclaimOrphanMigInstances(const model::Inventory& discovered);

  // How Create found the checkpoint.
  const LoadedCheckpoint& load_result() const { return load_result_; }
  // A copy of the in-memory checkpoint.
  Checkpoint CheckpointForTest() const;

  // For /debug/claims: the claims in the checkpoint (state, devices, CDI ids) and the latest
  // outcomes with their reasons, durations and trace ids.
  nlohmann::json DebugState() const;

 private:
  ClaimPreparer(ClaimPreparerOptions options, k8s::KubeClient& client, CheckpointStore& store,
                CdiWriter& cdi, ClaimStateMachine& states, model::Inventory inventory,
                LoadedCheckpoint loaded);

  absl::StatusOr<std::vector<PreparedDevice>> PrepareOne(const ClaimRef& ref,
                                                         ClaimTelemetry& telemetry);
  absl::Status UnprepareOne(const ClaimRef& ref, ClaimTelemetry& telemetry);
  // Removes the CDI spec, the MIG instances it created and the entry of a claim left in
  // PrepareStarted.
  absl::Status RollBack(const std::string& uid);
  // Applies the recorded sharing decision of `device` (the claim's `ordinal`-th device): sets
  // the time slice or starts the MPS daemon and adds the client's edits to `edits`.
  absl::Status ApplySharing(const std::string& uid, const CheckpointDevice& device, int host_index,
                            int ordinal, CdiContainerEdits& edits);
  // Undoes the sharing settings of the devices of `uid` that no other claim in the checkpoint
  // holds. Idempotent. The caller holds the devices' locks.
  absl::Status ReleaseSharing(const std::string& uid, const std::vector<CheckpointDevice>& devices);
  // Creates the instance a dynamic MIG device stands for (turning MIG mode on if needed).
  absl::StatusOr<model::MigDevice> CreateMigInstance(const CheckpointDevice::DynamicMig& mig);
  // Destroys it: by its ids when known, else whatever instance sits at its placement. Gone
  // already is success.
  absl::Status DestroyMigInstance(const CheckpointDevice::DynamicMig& mig);

  // Applies `mutate` to the checkpoint and saves it durably; memory changes only once the save
  // succeeded. `mutate` must leave the checkpoint untouched when it returns an error (the
  // error is returned as is; a failed save is a kCheckpointError).
  //
  // Group commit: callers that arrive while a save is in flight queue their mutations, and the
  // next writer applies all of them, in arrival order, to one copy and saves once. Under
  // concurrency that turns N serialized fsync pairs into one per batch, without weakening the
  // guarantee: a caller returns only once its own change is on disk. A mutation sees the ones
  // queued before it (the duplicate-device check relies on that).
  absl::Status UpdateCheckpoint(const std::function<absl::Status(Checkpoint&)>& mutate);
  // Sets the device and claim gauges from the current checkpoint (cheap: cached series only).
  void RefreshMetrics();
  // Rebuilds the per-device series for the current inventory, then RefreshMetrics().
  void RefreshInventoryMetrics();
  // Dynamic MIG: after instances were created or destroyed, rebuilds the per-device and MIG
  // layout series (dralens_mig_devices, dralens_mig_placeable) from what the source reports.
  void RefreshMigLayoutMetrics();
  std::optional<CheckpointClaim> LookUp(const std::string& uid) const;

  // Per-key mutexes that exist only while someone holds or waits for them.
  class KeyedLocks {
   public:
    class Guard {
     public:
      Guard(KeyedLocks& owner, std::vector<std::string> keys);
      ~Guard();
      Guard(const Guard&) = delete;
      Guard& operator=(const Guard&) = delete;

     private:
      KeyedLocks& owner_;
      std::vector<std::string> keys_;  // sorted, distinct
    };

   private:
    struct Entry {
      absl::Mutex mu;
      int users = 0;
    };
    absl::Mutex mu_;
    std::map<std::string, std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  };

  const ClaimPreparerOptions options_;
  k8s::KubeClient& client_;
  CheckpointStore& store_;
  CdiWriter& cdi_;
  ClaimStateMachine& states_;
  const LoadedCheckpoint load_result_;

  common::Clock& clock_;
  telemetry::NoopTracer noop_tracer_;
  telemetry::Tracer& tracer_;

  mutable absl::Mutex inventory_mu_;
  std::shared_ptr<const std::map<std::string, OwnedDevice>> devices_ ABSL_GUARDED_BY(inventory_mu_);
  model::Inventory inventory_ ABSL_GUARDED_BY(inventory_mu_);

  DecisionLog decisions_;
  KeyedLocks claim_locks_;
  KeyedLocks device_locks_;

  // The committed checkpoint. Written only by the group-commit writer, under checkpoint_mu_.
  mutable absl::Mutex checkpoint_mu_ ABSL_ACQUIRED_AFTER(commit_mu_);
  Checkpoint checkpoint_ ABSL_GUARDED_BY(checkpoint_mu_);

  // Group commit (see UpdateCheckpoint).
  struct PendingUpdate {
    const std::function<absl::Status(Checkpoint&)>* mutate;
    absl::Status result;
    bool done = false;
  };
  absl::Mutex commit_mu_;
  std::vector<PendingUpdate*> pending_ ABSL_GUARDED_BY(commit_mu_);
  bool writing_ ABSL_GUARDED_BY(commit_mu_) = false;
};

// Calls _exit(137) when DRALENS_TEST_CRASH_AT equals `step`. Exposed for the fault tests.
void MaybeCrashForTest(absl::string_view step);

}  // namespace dralens::driver::prepare
