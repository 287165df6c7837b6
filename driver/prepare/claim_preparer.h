// ClaimPreparer: the ClaimHandler behind NodePrepareResources / NodeUnprepareResources.
//
// Prepare, per claim: check the UID is safe, lock it (one operation per claim at a time), run
// the steps of prepare_steps.h, locking the claim's devices (sorted, so claims sharing a device
// serialise without deadlock) from RecordStarted on. A failure after RecordStarted is rolled
// back at once; a crash is rolled back by the next attempt.
// Unprepare, per claim: unknown → success; else, under the device locks, Unpreparing, remove
// the CDI spec, release the sharing settings when the claim was the device's last holder,
// destroy dynamic MIG instances, Unprepared (the entry goes), clear the status entries. A
// failure puts the claim back in the state it had.
//
// Every claim state change goes through the ClaimLedger; every device change through the
// MigManager and the SharingApplier.
//
// Batches: every distinct claim UID gets exactly one entry; per-claim failures become that
// entry's error and never fail the batch. Claims of a batch run in parallel (one thread each).
//
// Telemetry: every claim is a ClaimTelemetry (a span in the claim's lifecycle trace linked to
// the kubelet call, phase children, per-claim metrics with the reason of a failure).
//
// Thread-safety: Prepare, Unprepare and SetInventory may be called from any thread at once.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "driver/prepare/claim_handler.h"
#include "driver/prepare/decision_log.h"
#include "driver/prepare/prepare_steps.h"
#include "driver/prepare/prepare_telemetry.h"
#include "nlohmann/json.hpp"
#include "src/common/keyed_mutex.h"
#include "src/model/inventory.h"
#include "src/telemetry/tracing/tracer.h"

namespace dralens::driver::prepare {

// Its collaborators. Not owned; all must outlive the preparer.
struct ClaimPreparerDeps {
  k8s::KubeClient& client;
  ClaimLedger& ledger;
  CdiWriter& cdi;
  MigManager& mig;
  SharingApplier& sharing;
  SharingMetrics& sharing_metrics;
  ClaimStatusWriter& status;
  PrepareMetrics& metrics;
  telemetry::Tracer& tracer;
  common::Clock& clock;
};

class ClaimPreparer : public ClaimHandler {
 public:
  // InvalidArgument without a driver name and a pool name.
  static absl::StatusOr<std::unique_ptr<ClaimPreparer>> Create(ClaimPreparerOptions options,
                                                               ClaimPreparerDeps deps,
                                                               const model::Inventory& inventory);

  // ClaimHandler
  std::map<std::string, PrepareResult> Prepare(const std::vector<ClaimRef>& claims,
                                               const KubeletCall& call) override;
  std::map<std::string, std::string> Unprepare(const std::vector<ClaimRef>& claims,
                                               const KubeletCall& call) override;

  // Replaces the inventory used to resolve devices of claims prepared from now on.
  void SetInventory(const model::Inventory& inventory);

  // Dynamic MIG, at start. First every prepared claim whose MIG instance is gone (a GPU reset
  // or driver reload while the node was down) is prepared again, as the kubelet's re-prepare
  // would: its instance is created again at the placement its allocation names, so the claim
  // keeps its device and series; a claim that can no longer be prepared (deleted meanwhile) is
  // dropped from the checkpoint and its kubelet's unprepare succeeds. Then every MIG instance
  // that no prepared claim owns (left by a crash, or by someone else) is destroyed; `discovered`
  // is only the starting point, the GPUs are looked at again after the first part.
  // Returns how many instances were created or destroyed; the first error is returned after
  // trying them all.
  absl::StatusOr<int> ReclaimOrphanMigInstances(const model::Inventory& discovered);

  // For /debug/claims: the claims in the checkpoint (state, devices, CDI ids) and the latest
  // outcomes with their reasons, durations and trace ids.
  nlohmann::json DebugState() const;

 private:
  ClaimPreparer(ClaimPreparerOptions options, ClaimPreparerDeps deps,
                const model::Inventory& inventory);

  absl::StatusOr<std::vector<PreparedDevice>> PrepareOne(const ClaimRef& ref,
                                                         ClaimTelemetry& telemetry);
  absl::Status UnprepareOne(const ClaimRef& ref, ClaimTelemetry& telemetry);
  // Unprepare of a recorded claim; the caller holds the claim's lock.
  absl::Status UnprepareLocked(const ClaimRef& ref, const CheckpointClaim& existing,
                               ClaimTelemetry& telemetry);
  // A PrepareCompleted claim whose dynamic MIG instance is gone is unprepared, so that the
  // prepare after it creates the instance again instead of answering for nothing. Returns
  // whether it was. The caller holds the claim's lock.
  absl::StatusOr<bool> UndoIfInstanceVanished(const ClaimRef& ref, ClaimTelemetry& telemetry);
  // `failed` as is, after rolling the claim back when it is not OK.
  absl::Status RollBackOnError(PrepareAttempt& attempt, absl::Status failed);
  // The unprepare side effects, in order, for a claim in Unpreparing.
  absl::Status UndoDevices(const ClaimRef& ref, const CheckpointClaim& existing,
                           ClaimTelemetry& telemetry);
  std::shared_ptr<const DeviceIndex> Devices() const;

  const ClaimPreparerOptions options_;
  ClaimPreparerDeps deps_;
  common::KeyedMutex claim_locks_;
  common::KeyedMutex device_locks_;
  const PrepareDeps steps_;
  DecisionLog decisions_;

  mutable absl::Mutex inventory_mu_;
  std::shared_ptr<const DeviceIndex> devices_ ABSL_GUARDED_BY(inventory_mu_);
};

}  // namespace dralens::driver::prepare
