// NodeViewPublisher: turns the node's inventory, its claim ledger and device health into the
// model::NodeView the node collectors (exporter/node) render, and hands each new view to them.
//
// It listens to the ledger (every committed claim change) and to the MIG manager (every layout
// change), and is told the inventory at start and the unhealthy devices by device health. The
// device, MIG and claim series are therefore derived from the ledger's committed state: a claim
// restored from the checkpoint after a restart shows its device series like any other.
//
// Thread-safety: thread-safe; views reach the sink one at a time, newest last.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "driver/prepare/checkpoint.h"
#include "driver/prepare/claim_ledger.h"
#include "driver/prepare/mig_manager.h"
#include "src/model/inventory.h"
#include "src/model/node_view.h"

namespace dralens::driver::prepare {

// The devices of `inventory`, named as the slice builder publishes them, and what still fits on
// its GPUs in MIG mode. Pure.
model::NodeLayout LayoutOf(const model::Inventory& inventory);
// The PrepareCompleted claims of `checkpoint` with the DCGM keys of their devices (looked up in
// `inventory` for MIG devices that were not created by this node). Pure.
// The fraction of its physical GPU a checkpointed device holds (see model::ClaimDevice::gpus);
// 0 for a device the inventory does not know.
double GpuFraction(const CheckpointDevice& d, const model::Inventory& inventory);

std::vector<model::PreparedClaim> PreparedClaimsOf(const Checkpoint& checkpoint,
                                                   const model::Inventory& inventory);

class NodeViewPublisher final : public LedgerListener, public MigLayoutListener {
 public:
  // `sink` is not owned and must outlive the publisher.
  NodeViewPublisher(std::string driver, std::string pool, model::NodeViewSink& sink);

  void SetInventory(const model::Inventory& inventory);
  void SetUnhealthy(std::set<std::string> devices);

  // LedgerListener
  void OnLedgerChanged(const CheckpointSnapshot& snapshot) override;
  // MigLayoutListener
  void OnMigLayoutChanged(const model::Inventory& now) override { SetInventory(now); }

 private:
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string driver_;
  const std::string pool_;
  model::NodeViewSink& sink_;

  absl::Mutex mu_;
  model::Inventory inventory_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const model::NodeLayout> layout_ ABSL_GUARDED_BY(mu_);
  CheckpointSnapshot snapshot_ ABSL_GUARDED_BY(mu_);
  std::vector<model::PreparedClaim> claims_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> unhealthy_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dralens::driver::prepare
