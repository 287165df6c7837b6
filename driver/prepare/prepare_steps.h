// The steps of preparing one claim, in order (ClaimPreparer::PrepareOne runs them):
//
//   ReplayOrRollBack   PrepareCompleted: answer from the checkpoint (the kubelet re-sends
//                      prepared claims; a claim shared by several pods is prepared once);
//                      PrepareStarted (a crash or failure midway): undo it, then prepare again
//   FetchClaim         GET the ResourceClaim, check the UID ("was replaced")
//   PlanDevices        our driver's results in our pool, resolved against the inventory, and
//                      the CDI spec (claim_plan.h, pure)
//   ResolveConfigs     each device's opaque config (class configs, then claim configs); a bad
//                      one fails the claim before anything is recorded
//   RecordStarted      PrepareStarted, durable before any side effect, with each device's
//                      sharing decision taken inside the same checkpoint write
//   CreateMigInstances dynamic MIG: create the instances, record their ids; a full GPU: make
//                      sure it is out of MIG mode (MigManager::EnsureFullGpu)
//   ApplySharing       time slice or MPS daemon; the MPS client's edits join the CDI device
//   WriteCdiSpec       the claim's CDI spec file
//   RecordCompleted    PrepareCompleted
//   PublishStatus      queue the ResourceClaim's status.devices entries (never waits)
//
// This is the order of the NVIDIA GPU driver (two checkpoint phases around the side effects)
// with the example driver's steps inside. A failure after RecordStarted is undone by RollBack
// (the caller's job), which finds what to undo from the recorded intent.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "driver/prepare/cdi.h"
#include "driver/prepare/checkpoint.h"
#include "driver/prepare/claim_handler.h"
#include "driver/prepare/claim_ledger.h"
#include "driver/prepare/claim_plan.h"
#include "driver/prepare/claim_status.h"
#include "driver/prepare/mig_manager.h"
#include "driver/prepare/prepare_telemetry.h"
#include "driver/prepare/sharing_applier.h"
#include "driver/sharing/planner.h"
#include "nlohmann/json.hpp"
#include "src/common/clock.h"
#include "src/common/keyed_mutex.h"
#include "src/k8s/client.h"
#include "src/model/resource.h"

namespace dralens::driver::prepare {

struct ClaimPreparerOptions {
  std::string driver_name = "gpu.dralens.dev";
  std::string pool_name;  // this node's pool: the node name
  CdiHostInfo cdi_host;
  // Dynamic MIG: allocations may name any profile x placement of a MIG-capable GPU; prepare
  // creates the instance and unprepare destroys it.
  bool dynamic_mig = false;
};

using DeviceIndex = std::map<std::string, OwnedDevice>;

// What the steps work with. Not owned.
struct PrepareDeps {
  const ClaimPreparerOptions& options;
  k8s::KubeClient& client;
  ClaimLedger& ledger;
  CdiWriter& cdi;
  MigManager& mig;
  SharingApplier& sharing;
  SharingMetrics& sharing_metrics;
  ClaimStatusWriter& status;
  common::KeyedMutex& device_locks;
  common::Clock& clock;
};

// One claim's way through the steps.
struct PrepareAttempt {
  PrepareAttempt(const ClaimRef& claim_ref, ClaimTelemetry& claim_telemetry,
                 std::shared_ptr<const DeviceIndex> index);

  const ClaimRef& ref;
  ClaimTelemetry& telemetry;
  const std::string context;  // "prepare claim <ns>/<name>", the prefix of every error
  std::shared_ptr<const DeviceIndex> devices;
  nlohmann::json fetched;  // the ResourceClaim as the API server returned it
  model::ResourceClaim claim;
  ClaimPlan plan;
  std::vector<sharing::SharingRequest> requests;    // parallel to plan.devices
  CheckpointClaim entry;                            // what is recorded for the claim
  std::vector<sharing::SharingDecision> decisions;  // parallel to entry.devices
};

// "<pool>/<device>" of each device: the device lock keys.
std::vector<std::string> DeviceKeys(const std::vector<CheckpointDevice>& devices);
// The kubelet's answer for recorded devices.
std::vector<PreparedDevice> Answer(const std::vector<CheckpointDevice>& devices);

// The answer when the claim is prepared already; nullopt to go on preparing.
absl::StatusOr<std::optional<std::vector<PreparedDevice>>> ReplayOrRollBack(
    const PrepareDeps& deps, PrepareAttempt& attempt);
absl::Status FetchClaim(const PrepareDeps& deps, PrepareAttempt& attempt);
absl::Status PlanDevices(const PrepareDeps& deps, PrepareAttempt& attempt);
absl::Status ResolveConfigs(const PrepareDeps& deps, PrepareAttempt& attempt);
absl::Status RecordStarted(const PrepareDeps& deps, PrepareAttempt& attempt);
absl::Status CreateMigInstances(const PrepareDeps& deps, PrepareAttempt& attempt);
absl::Status ApplySharing(const PrepareDeps& deps, PrepareAttempt& attempt);
absl::Status WriteCdiSpec(const PrepareDeps& deps, PrepareAttempt& attempt);
absl::Status RecordCompleted(const PrepareDeps& deps, PrepareAttempt& attempt);
void PublishStatus(const PrepareDeps& deps, PrepareAttempt& attempt);

// Undoes a claim left in PrepareStarted: removes its CDI spec, releases its sharing settings,
// destroys the MIG instances it may have created (found by their recorded intent) and drops the
// entry. The caller holds the claim's and its devices' locks.
absl::Status RollBack(const PrepareDeps& deps, const std::string& uid, ClaimTelemetry& telemetry);

}  // namespace dralens::driver::prepare
