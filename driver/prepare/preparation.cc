#include "driver/prepare/preparation.h"

#include <map>
#include <string>
#include <utility>

#include "driver/prepare/claim_plan.h"
#include "src/common/log.h"
#include "src/common/status.h"

namespace dralens::driver::prepare {

absl::StatusOr<std::unique_ptr<Preparation>> Preparation::Create(
    PreparationOptions options, k8s::KubeClient& client, CheckpointStore& store, CdiWriter& cdi,
    discovery::DeviceSource& source, sharing::MpsControl& mps, PreparationSinks sinks,
    const model::Inventory& inventory) {
  if (options.preparer.driver_name.empty() || options.preparer.pool_name.empty()) {
    return absl::InvalidArgumentError("claim preparer: driver name and pool name are required");
  }
  std::unique_ptr<Preparation> p(new Preparation());
  absl::StatusOr<LoadedCheckpoint> loaded = store.Load();
  if (!loaded.ok()) {
    return common::Annotate(loaded.status(), "claim preparer: load checkpoint");
  }
  if (loaded->origin == LoadedCheckpoint::Origin::kDiscardedReboot) {
    // Record the decision now, so the stale file is not read (and logged about) again.
    absl::Status saved = store.Save(loaded->checkpoint);
    if (!saved.ok()) {
      DLOG(kWarn, "prepare", "could not replace the discarded checkpoint; retried on next write",
           {{"error", saved.message()}});
    }
  }
  p->loaded_ = *std::move(loaded);

  p->journal_metrics_ =
      std::make_unique<CheckpointJournalMetrics>(CheckpointJournalMetrics::Create(sinks.registry));
  p->ledger_metrics_ =
      std::make_unique<ClaimLedgerMetrics>(ClaimLedgerMetrics::Create(sinks.registry));
  p->mig_metrics_ = std::make_unique<MigMetrics>(MigMetrics::Create(sinks.registry));
  p->sharing_metrics_ = std::make_unique<SharingMetrics>(SharingMetrics::Create(sinks.registry));
  p->status_metrics_ =
      std::make_unique<ClaimStatusMetrics>(ClaimStatusMetrics::Create(sinks.registry));
  p->prepare_metrics_ =
      std::make_unique<PrepareMetrics>(PrepareMetrics::Create(sinks.registry, sinks.exemplars));

  // The view first knows the devices, then the restored claims: their series appear together.
  p->view_ = std::make_unique<NodeViewPublisher>(options.preparer.driver_name,
                                                 options.preparer.pool_name, sinks.view);
  p->view_->SetInventory(inventory);
  p->journal_ =
      std::make_unique<CheckpointJournal>(store, *p->journal_metrics_, p->loaded_.checkpoint);
  p->ledger_ = std::make_unique<ClaimLedger>(*p->journal_, *p->ledger_metrics_, *p->view_);
  p->mig_ = std::make_unique<MigManager>(source, source, *p->mig_metrics_, sinks.clock, *p->view_);
  p->sharing_ = std::make_unique<SharingApplier>(source, mps, options.mps_root);
  // A kill or a GPU reset may have taken the restored claims' time slices and MPS daemons.
  const std::map<std::string, OwnedDevice> owned =
      IndexDevices(inventory, options.preparer.dynamic_mig);
  p->sharing_->Restore(
      p->loaded_.checkpoint,
      [&owned](const std::string& device) {
        auto it = owned.find(device);
        return it == owned.end() ? -1 : it->second.host_index;
      },
      *p->sharing_metrics_);

  ClaimStatusWriter* status = &p->no_status_;
  if (options.claim_status) {
    ApiClaimStatusOptions status_options = options.status;
    status_options.driver_name = options.preparer.driver_name;
    status_options.pool_name = options.preparer.pool_name;
    p->api_status_ = std::make_unique<ApiClaimStatusWriter>(client, *p->status_metrics_,
                                                            std::move(status_options));
    p->api_status_->Start();
    status = p->api_status_.get();
  }
  ASSIGN_OR_RETURN(p->preparer_,
                   ClaimPreparer::Create(options.preparer,
                                         ClaimPreparerDeps{.client = client,
                                                           .ledger = *p->ledger_,
                                                           .cdi = cdi,
                                                           .mig = *p->mig_,
                                                           .sharing = *p->sharing_,
                                                           .sharing_metrics = *p->sharing_metrics_,
                                                           .status = *status,
                                                           .metrics = *p->prepare_metrics_,
                                                           .tracer = sinks.tracer,
                                                           .clock = sinks.clock},
                                         inventory));
  return p;
}

Preparation::~Preparation() { Stop(); }

void Preparation::Stop() {
  if (api_status_ != nullptr) {
    api_status_->Stop();
  }
}

void Preparation::SetInventory(const model::Inventory& inventory) {
  preparer_->SetInventory(inventory);
  view_->SetInventory(inventory);
}

bool Preparation::FlushStatusForTest(absl::Duration timeout) {
  return api_status_ == nullptr || api_status_->Flush(timeout);
}

}  // namespace dralens::driver::prepare
