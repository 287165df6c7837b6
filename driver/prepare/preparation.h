// Preparation: everything a node needs to prepare claims, built and owned in one place.
//
//   CheckpointStore ─► CheckpointJournal ─► ClaimLedger ─► NodeViewPublisher ─► NodeViewSink
//                                                │                  ▲             (collectors)
//   KubeClient ─┐                                │                  │ layout
//   CdiWriter ──┼──────────► ClaimPreparer ◄─────┘      MigManager ─┘ (DeviceSource)
//   MPS ───────►┘   SharingApplier (DeviceSource, MpsControl), ClaimStatusWriter (KubeClient)
//
// Create loads the checkpoint (see checkpoint.h for its outcomes; a checkpoint discarded after
// a reboot is replaced at once so it is not read again), applies the sharing settings of the
// restored claims again (SharingApplier::Restore) and adopts its claims in the ledger;
// the view publisher gets the inventory first, so restored claims show their device series
// from the start.
//
// Thread-safety: the parts are thread-safe; Stop() once, before destruction.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "driver/discovery/device_source.h"
#include "driver/prepare/cdi.h"
#include "driver/prepare/checkpoint.h"
#include "driver/prepare/checkpoint_journal.h"
#include "driver/prepare/claim_ledger.h"
#include "driver/prepare/claim_preparer.h"
#include "driver/prepare/claim_status.h"
#include "driver/prepare/mig_manager.h"
#include "driver/prepare/node_view.h"
#include "driver/prepare/prepare_telemetry.h"
#include "driver/prepare/sharing_applier.h"
#include "driver/sharing/mps.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/k8s/client.h"
#include "src/model/inventory.h"
#include "src/model/node_view.h"
#include "src/telemetry/exemplar.h"
#include "src/telemetry/tracing/tracer.h"

namespace dralens::driver::prepare {

struct PreparationOptions {
  ClaimPreparerOptions preparer;
  // MPS directories go under it (absolute).
  std::string mps_root;
  // Write ResourceClaim status.devices; off, the preparer reports nothing there.
  bool claim_status = true;
  ApiClaimStatusOptions status;  // driver and pool are taken from `preparer`
};

// Where it reports. Not owned; all must outlive the Preparation.
struct PreparationSinks {
  prometheus::Registry& registry;
  telemetry::ExemplarStore& exemplars;
  telemetry::Tracer& tracer;
  common::Clock& clock;
  model::NodeViewSink& view;
};

class Preparation {
 public:
  // `client`, `store`, `cdi`, `source` and `mps` are not owned and must outlive it.
  static absl::StatusOr<std::unique_ptr<Preparation>> Create(
      PreparationOptions options, k8s::KubeClient& client, CheckpointStore& store, CdiWriter& cdi,
      discovery::DeviceSource& source, sharing::MpsControl& mps, PreparationSinks sinks,
      const model::Inventory& inventory);
  ~Preparation();  // Stop()

  // Ends the status writer (what it has not written is dropped). Idempotent.
  void Stop();

  // A new inventory: devices of claims prepared from now on resolve against it, and the device
  // and MIG series follow it.
  void SetInventory(const model::Inventory& inventory);

  ClaimPreparer& preparer() { return *preparer_; }
  ClaimLedger& ledger() { return *ledger_; }
  // Told the inventory and device health by the composition root.
  NodeViewPublisher& view() { return *view_; }
  const LoadedCheckpoint& load_result() const { return loaded_; }
  // For tests: waits until the ResourceClaim status writes queued so far are done.
  bool FlushStatusForTest(absl::Duration timeout);

 private:
  Preparation() = default;

  LoadedCheckpoint loaded_;
  std::unique_ptr<CheckpointJournalMetrics> journal_metrics_;
  std::unique_ptr<ClaimLedgerMetrics> ledger_metrics_;
  std::unique_ptr<MigMetrics> mig_metrics_;
  std::unique_ptr<SharingMetrics> sharing_metrics_;
  std::unique_ptr<ClaimStatusMetrics> status_metrics_;
  std::unique_ptr<PrepareMetrics> prepare_metrics_;
  std::unique_ptr<NodeViewPublisher> view_;
  std::unique_ptr<CheckpointJournal> journal_;
  std::unique_ptr<ClaimLedger> ledger_;
  std::unique_ptr<MigManager> mig_;
  std::unique_ptr<SharingApplier> sharing_;
  std::unique_ptr<ApiClaimStatusWriter> api_status_;
  NoClaimStatus no_status_;
  std::unique_ptr<ClaimPreparer> preparer_;
};

}  // namespace dralens::driver::prepare
