#include "driver/sharing/planner.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dralens::driver::sharing {
namespace {

SharingStrategy StrategyFor(SharingMode mode) {
  switch (mode) {
    case SharingMode::kNone:
      return SharingStrategy::kExclusive;
    case SharingMode::kTimeSlicing:
      return SharingStrategy::kTimeSlicing;
    case SharingMode::kMps:
      return SharingStrategy::kMps;
  }
  return SharingStrategy::kExclusive;
}

SharingDecision Refuse(SharingStrategy strategy, Refusal refusal, const SharingConfig& sharing,
                       std::string reason) {
  SharingDecision d;
  d.strategy = strategy;
  d.allowed = false;
  d.refusal = refusal;
  d.reason = std::move(reason);
  d.sharing = sharing;
  return d;
}

std::string OwnerOf(const DeviceHolder& holder) {
  return holder.decision.mps_owner_claim_uid.empty() ? holder.claim_uid
                                                     : holder.decision.mps_owner_claim_uid;
}

// Exclusive holders make a device busy; any other disagreement is a mix of strategies.
Refusal ConflictKind(const DeviceHolder& holder) {
  return holder.decision.sharing.mode == SharingMode::kNone ? Refusal::kDeviceBusy
                                                            : Refusal::kMixedStrategy;
}

// Why `holder` and `request` cannot share the device, or "" when their settings agree.
std::string SettingsConflict(const SharingDevice& device, const DeviceHolder& holder,
                             const SharingConfig& want) {
  const SharingConfig& have = holder.decision.sharing;
  if (have == want) {
    return "";
  }
  if (have.mode == SharingMode::kNone) {
    return absl::StrCat("device ", device.name, " is held exclusively by claim ", holder.claim_uid);
  }
  if (have.mode == SharingMode::kTimeSlicing && want.mode == SharingMode::kTimeSlicing) {
    return absl::StrCat("device ", device.name, " is time-sliced by claim ", holder.claim_uid,
                        " with interval ", discovery::ToString(have.interval),
                        "; this claim asks for interval ", discovery::ToString(want.interval),
                        " and a device has one interval");
  }
  if (have.mode == SharingMode::kMps && want.mode == SharingMode::kMps) {
    return absl::StrCat("device ", device.name, " runs MPS for claim ", holder.claim_uid,
                        " with other settings (", DescribeSharing(have), " vs. ",
                        DescribeSharing(want), "); one MPS control daemon serves a device");
  }
  return absl::StrCat("device ", device.name, " is used by claim ", holder.claim_uid, " with ",
                      DescribeSharing(have), "; this claim asks for ", DescribeSharing(want));
}

std::string ClaimList(const std::vector<const DeviceHolder*>& holders) {
  std::vector<std::string> uids;
  for (const DeviceHolder* h : holders) {
    if (std::find(uids.begin(), uids.end(), h->claim_uid) == uids.end()) {
      uids.push_back(h->claim_uid);
    }
  }
  return absl::StrJoin(uids, ", ");
}

SharingDecision PlanConsumable(const SharingDevice& device, const SharingRequest& request,
                               const std::vector<const DeviceHolder*>& others) {
  const SharingConfig& want = request.sharing;
  common::Quantity total = request.consumed_memory.value_or(common::Quantity());
  for (const DeviceHolder* h : others) {
    if (!h->share_id.has_value()) {
      return Refuse(SharingStrategy::kConsumable, Refusal::kMixedStrategy, want,
                    absl::StrCat("device ", device.name, " is held by claim ", h->claim_uid,
                                 " without a share ID; consumable capacity needs every "
                                 "allocation of the device to carry one"));
    }
    if (std::string conflict = SettingsConflict(device, *h, want); !conflict.empty()) {
      return Refuse(SharingStrategy::kConsumable, ConflictKind(*h), want, std::move(conflict));
    }
    if (h->consumed_memory.has_value() && !total.Add(*h->consumed_memory).ok()) {
      return Refuse(SharingStrategy::kConsumable, Refusal::kOverCapacity, want,
                    absl::StrCat("consumed memory on device ", device.name, " overflows"));
    }
  }
  if (device.memory.has_value() && total > *device.memory) {
    return Refuse(
        SharingStrategy::kConsumable, Refusal::kOverCapacity, want,
        absl::StrCat("device ", device.name, " has ", device.memory->String(),
                     " of memory; this allocation (",
                     request.consumed_memory.value_or(common::Quantity()).String(), ") and ",
                     others.size(), " other allocation(s) would consume ", total.String()));
  }
  SharingDecision d;
  d.strategy = SharingStrategy::kConsumable;
  d.allowed = true;
  d.sharing = want;
  if (want.mode == SharingMode::kMps) {
    d.mps_owner_claim_uid = others.empty() ? request.claim_uid : OwnerOf(*others.front());
  }
  d.reason = others.empty()
                 ? absl::StrCat("device ", device.name,
                                " allocated by consumable capacity, first allocation")
                 : absl::StrCat("device ", device.name,
                                " shared by consumable capacity with claim(s) ", ClaimList(others));
  if (device.memory.has_value()) {
    absl::StrAppend(&d.reason, "; ", total.String(), " of ", device.memory->String(),
                    " memory consumed");
  }
  return d;
}

}  // namespace

absl::string_view ToString(SharingStrategy strategy) {
  switch (strategy) {
    case SharingStrategy::kExclusive:
      return "exclusive";
    case SharingStrategy::kTimeSlicing:
      return "time_slicing";
    case SharingStrategy::kMps:
      return "mps";
    case SharingStrategy::kSharedClaim:
      return "shared_claim";
    case SharingStrategy::kConsumable:
      return "consumable";
  }
  return "exclusive";
}

std::optional<SharingStrategy> ParseSharingStrategy(absl::string_view text) {
  for (SharingStrategy s :
       {SharingStrategy::kExclusive, SharingStrategy::kTimeSlicing, SharingStrategy::kMps,
        SharingStrategy::kSharedClaim, SharingStrategy::kConsumable}) {
    if (ToString(s) == text) {
      return s;
    }
  }
  return std::nullopt;
}

absl::string_view ToString(Refusal refusal) {
  switch (refusal) {
    case Refusal::kNone:
      return "none";
    case Refusal::kDeviceBusy:
      return "device_busy";
    case Refusal::kOverCapacity:
      return "over_capacity";
    case Refusal::kMixedStrategy:
      return "mixed_strategy";
  }
  return "none";
}

std::string DescribeSharing(const SharingConfig& sharing) {
  switch (sharing.mode) {
    case SharingMode::kNone:
      return "exclusive use";
    case SharingMode::kTimeSlicing:
      return absl::StrCat("TimeSlicing with interval ", discovery::ToString(sharing.interval));
    case SharingMode::kMps: {
      std::vector<std::string> parts;
      const MpsConfig& mps = sharing.mps;
      if (mps.default_active_thread_percentage.has_value()) {
        parts.push_back(
            absl::StrCat("active threads ", *mps.default_active_thread_percentage, "%"));
      }
      if (mps.default_pinned_device_memory_limit.has_value()) {
        parts.push_back(
            absl::StrCat("pinned memory ", mps.default_pinned_device_memory_limit->String()));
      }
      for (const auto& [dev, limit] : mps.default_per_device_pinned_memory_limit) {
        parts.push_back(absl::StrCat("pinned memory ", limit.String(), " on ", dev));
      }
      if (mps.multi_user.has_value()) {
        parts.push_back(absl::StrCat("multiUser ", *mps.multi_user ? "true" : "false"));
      }
      return parts.empty() ? "MPS" : absl::StrCat("MPS (", absl::StrJoin(parts, ", "), ")");
    }
  }
  return "unknown";
}

SharingDecision SharingPlanner::Plan(const SharingDevice& device, const SharingRequest& request,
                                     const std::vector<DeviceHolder>& holders) const {
  std::vector<const DeviceHolder*> others;
  for (const DeviceHolder& h : holders) {
    if (!h.decision.allowed) {
      continue;
    }
    if (h.claim_uid == request.claim_uid && h.share_id == request.share_id) {
      SharingDecision d;
      d.strategy = SharingStrategy::kSharedClaim;
      d.allowed = true;
      d.sharing = h.decision.sharing;
      d.mps_owner_claim_uid = h.decision.mps_owner_claim_uid;
      d.reason = absl::StrCat("claim ", request.claim_uid, " already holds device ", device.name,
                              " (", DescribeSharing(h.decision.sharing),
                              "); the claim is shared by its consumers");
      return d;
    }
    others.push_back(&h);
  }
  if (request.share_id.has_value()) {
    return PlanConsumable(device, request, others);
  }

  const SharingConfig& want = request.sharing;
  const SharingStrategy strategy = StrategyFor(want.mode);
  if (!others.empty() && want.mode == SharingMode::kNone) {
    const DeviceHolder& holder = *others.front();
    return Refuse(
        strategy, Refusal::kDeviceBusy, want,
        absl::StrCat("device ", device.name, " is already held by claim ", holder.claim_uid, " (",
                     holder.share_id.has_value()
                         ? absl::StrCat("consumable capacity, share ID ", *holder.share_id)
                         : DescribeSharing(holder.decision.sharing),
                     "); this claim asks for exclusive use"));
  }
  for (const DeviceHolder* h : others) {
    if (h->share_id.has_value()) {
      return Refuse(strategy, Refusal::kMixedStrategy, want,
                    absl::StrCat("device ", device.name, " is held by claim ", h->claim_uid,
                                 " through consumable capacity (share ID ", *h->share_id,
                                 "); this allocation has no share ID"));
    }
    if (std::string conflict = SettingsConflict(device, *h, want); !conflict.empty()) {
      return Refuse(strategy, ConflictKind(*h), want, std::move(conflict));
    }
  }

  SharingDecision d;
  d.strategy = strategy;
  d.allowed = true;
  d.sharing = want;
  if (want.mode == SharingMode::kMps) {
    d.mps_owner_claim_uid = others.empty() ? request.claim_uid : OwnerOf(*others.front());
  }
  if (others.empty()) {
    d.reason = absl::StrCat("device ", device.name, " is free; ", DescribeSharing(want));
  } else {
    d.reason = absl::StrCat("device ", device.name, " shared with claim(s) ", ClaimList(others),
                            "; ", DescribeSharing(want));
  }
  return d;
}

}  // namespace dralens::driver::sharing
