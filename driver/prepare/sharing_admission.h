// Sharing admission: whether a claim may have each of its devices, given the claims the
// checkpoint records on them, and on which terms. Pure; the preparer runs it inside the
// checkpoint write that records PrepareStarted, so that two claims can never both record a
// device on terms that exclude each other (a mutation sees the ones queued before it).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "driver/prepare/checkpoint.h"
#include "driver/prepare/claim_handler.h"
#include "driver/prepare/claim_plan.h"
#include "driver/sharing/planner.h"

namespace dralens::driver::prepare {

struct SharingAdmission {
  bool admitted = false;
  // Admitted: one decision per device, in the order of `devices`.
  std::vector<sharing::SharingDecision> decisions;
  // Refused: the planner's decision for the first device it refused, and a sentence naming the
  // device, its holders and the claim.
  sharing::SharingDecision refusal;
  std::string error;
};

// Plans every device of `devices` (the claim `claim`'s, in allocation order, with `requests`
// parallel to it) against the holders recorded in `holders` (the claim's own entry, if any, is
// ignored) and against the claim's own earlier shares of the same device. `owned` gives each
// device's memory capacity.
SharingAdmission AdmitSharing(const Checkpoint& holders, const ClaimRef& claim,
                              const std::vector<CheckpointDevice>& devices,
                              const std::vector<sharing::SharingRequest>& requests,
                              const std::map<std::string, OwnedDevice>& owned);

// How a decision is recorded with its device.
CheckpointDevice::Sharing RecordOf(const sharing::SharingDecision& decision,
                                   const sharing::SharingRequest& request);

}  // namespace dralens::driver::prepare
