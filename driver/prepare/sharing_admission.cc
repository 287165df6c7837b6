#include "driver/prepare/sharing_admission.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dralens::driver::prepare {
namespace {

bool SameDevice(const CheckpointDevice& a, const CheckpointDevice& b) {
  return a.pool == b.pool && a.device == b.device;
}

// A device already recorded for `uid`, as the planner sees its holder. A record without a
// sharing decision (older checkpoints) is an exclusive holder.
sharing::DeviceHolder HolderOf(const std::string& uid, const CheckpointDevice& held) {
  sharing::DeviceHolder h;
  h.claim_uid = uid;
  h.share_id = held.share_id;
  h.decision.allowed = true;
  if (held.sharing.has_value()) {
    h.consumed_memory = held.sharing->consumed_memory;
    h.decision.sharing = held.sharing->config;
    h.decision.mps_owner_claim_uid = held.sharing->mps_owner_claim_uid;
  }
  return h;
}

}  // namespace

CheckpointDevice::Sharing RecordOf(const sharing::SharingDecision& decision,
                                   const sharing::SharingRequest& request) {
  return CheckpointDevice::Sharing{.strategy = decision.strategy,
                                   .config = decision.sharing,
                                   .mps_owner_claim_uid = decision.mps_owner_claim_uid,
                                   .consumed_memory = request.consumed_memory};
}

SharingAdmission AdmitSharing(const Checkpoint& holders, const ClaimRef& claim,
                              const std::vector<CheckpointDevice>& devices,
                              const std::vector<sharing::SharingRequest>& requests,
                              const std::map<std::string, OwnedDevice>& owned) {
  const sharing::SharingPlanner planner;
  SharingAdmission out;
  for (size_t i = 0; i < devices.size(); ++i) {
    const CheckpointDevice& wanted = devices[i];
    std::vector<sharing::DeviceHolder> on_device;
    std::vector<std::string> names;  // for the error: "ns/name (uid ...)"
    for (const auto& [holder_uid, holder] : holders.claims) {
      if (holder_uid == claim.uid) {
        continue;
      }
      for (const CheckpointDevice& held : holder.devices) {
        if (SameDevice(held, wanted)) {
          on_device.push_back(HolderOf(holder_uid, held));
          names.push_back(
              absl::StrCat(holder.namespace_name, "/", holder.name, " (uid ", holder_uid, ")"));
        }
      }
    }
    // The claim's own earlier results for the same device (several shares of it).
    for (size_t j = 0; j < i; ++j) {
      if (SameDevice(devices[j], wanted)) {
        CheckpointDevice earlier = devices[j];
        earlier.sharing = RecordOf(out.decisions[j], requests[j]);
        on_device.push_back(HolderOf(claim.uid, earlier));
      }
    }
    sharing::SharingDevice device{
        .name = wanted.device, .type = wanted.type, .uuid = wanted.uuid, .memory = std::nullopt};
    if (auto it = owned.find(wanted.device); it != owned.end()) {
      device.memory = it->second.memory;
    }
    sharing::SharingDecision decision = planner.Plan(device, requests[i], on_device);
    if (!decision.allowed) {
      out.admitted = false;
      out.error = absl::StrCat(
          "device ", wanted.device, " in pool ", wanted.pool, " is already prepared for ",
          names.empty() ? "this claim" : absl::StrJoin(names, ", "), "; refusing it to claim ",
          claim.namespace_name, "/", claim.name, " (uid ", claim.uid, "): ", decision.reason);
      out.refusal = std::move(decision);
      out.decisions.clear();
      return out;
    }
    out.decisions.push_back(std::move(decision));
  }
  out.admitted = true;
  return out;
}

}  // namespace dralens::driver::prepare
