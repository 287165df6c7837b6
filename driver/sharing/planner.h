// SharingPlanner: decides whether one claim may use one device given the claims that already
// hold it, and with which sharing settings. Pure: the preparer feeds it the effective config
// (ResolveDeviceConfig) and the holders recorded in its checkpoint, then applies the decision.
//
// Rules (all users of one physical device must agree on how it is shared):
// - The same claim (same UID and share ID) asking again, e.g. one claim reserved for several
//   pods, is `shared_claim` and allowed with the settings recorded for it.
// - A request with a share ID (DRAConsumableCapacity) is `consumable`: it may join holders that
//   all carry share IDs and the same sharing settings, if the consumed memory of all of them
//   fits the device's memory (unchecked when the device's memory is unknown).
// - Otherwise, a config without sharing is `exclusive`: refused while anyone holds the device.
// - `time_slicing` joins only holders that time-slice with the same interval: a GPU has one
//   interval, so a different one is refused rather than silently changed under the holder.
// - `mps` joins only holders with identical MPS settings: one control daemon serves a device,
//   and its limits are daemon-wide. The daemon of the first MPS holder keeps serving
//   (`mps_owner_claim_uid`).
// Holders whose recorded decision was refused are ignored (they never got the device).
//
// Thread-safety: stateless; Plan may be called concurrently.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "driver/sharing/config.h"
#include "src/common/quantity.h"

namespace dralens::driver::sharing {

enum class SharingStrategy { kExclusive, kTimeSlicing, kMps, kSharedClaim, kConsumable };
// "exclusive" | "time_slicing" | "mps" | "shared_claim" | "consumable": metric label values.
absl::string_view ToString(SharingStrategy strategy);
// The inverse of ToString; nullopt for anything else.
std::optional<SharingStrategy> ParseSharingStrategy(absl::string_view text);

struct SharingDevice {
  std::string name;  // as published, e.g. "gpu-0"
  DeviceType type = DeviceType::kGpu;
  std::string uuid;
  // The device's memory capacity; bounds the consumed memory of consumable allocations.
  std::optional<common::Quantity> memory;
};

struct SharingRequest {
  std::string claim_uid;
  SharingConfig sharing;                // ResolveDeviceConfig(...).sharing
  std::optional<std::string> share_id;  // allocation result shareID
  // allocation result consumedCapacity["memory"]; absent counts as 0.
  std::optional<common::Quantity> consumed_memory;
};

// Why a request was refused, as a bounded metric label.
enum class Refusal {
  kNone,
  kDeviceBusy,     // exclusive use asked, or held exclusively by another claim
  kOverCapacity,   // consumable capacity: the allocations would exceed the device's memory
  kMixedStrategy,  // holders share the device in another way or with other settings
};
// "none" | "device_busy" | "over_capacity" | "mixed_strategy".
absl::string_view ToString(Refusal refusal);

struct SharingDecision {
  SharingStrategy strategy = SharingStrategy::kExclusive;
  bool allowed = false;
  Refusal refusal = Refusal::kNone;  // set when !allowed
  std::string reason;                // a sentence for events, logs and span attributes
  // What to apply: the interval for TimeSlicing, the MPS settings for MPS; kNone = nothing.
  SharingConfig sharing;
  // MPS only: the claim whose control daemon and pipe directory serve the device.
  std::string mps_owner_claim_uid;

  bool operator==(const SharingDecision&) const = default;
};

// A claim that holds the device, as recorded when it was prepared.
struct DeviceHolder {
  std::string claim_uid;
  std::optional<std::string> share_id;
  std::optional<common::Quantity> consumed_memory;
  SharingDecision decision;
};

class SharingPlanner {
 public:
  // Never fails: a refusal is a decision with allowed == false and a reason naming the holder.
  SharingDecision Plan(const SharingDevice& device, const SharingRequest& request,
                       const std::vector<DeviceHolder>& holders) const;
};

// "exclusive use", "TimeSlicing with interval Long", "MPS (active threads 50%, ...)".
std::string DescribeSharing(const SharingConfig& sharing);

}  // namespace dralens::driver::sharing
