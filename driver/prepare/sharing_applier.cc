#include "driver/prepare/sharing_applier.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "driver/prepare/failure_reason.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/telemetry/catalog.h"

namespace dralens::driver::prepare {
namespace {

constexpr sharing::SharingStrategy kStrategies[] = {
    sharing::SharingStrategy::kExclusive, sharing::SharingStrategy::kTimeSlicing,
    sharing::SharingStrategy::kMps, sharing::SharingStrategy::kSharedClaim,
    sharing::SharingStrategy::kConsumable};
constexpr SharingOutcome kOutcomes[] = {
    SharingOutcome::kGranted, SharingOutcome::kDeviceBusy, SharingOutcome::kOverCapacity,
    SharingOutcome::kMixedStrategy, SharingOutcome::kApplyError};

// The directories of the claim whose daemon serves `device` (the first MPS holder's).
absl::StatusOr<sharing::MpsPaths> MpsPathsOf(const std::string& root, const std::string& uid,
                                             const CheckpointDevice& device) {
  const std::string& owner =
      device.sharing->mps_owner_claim_uid.empty() ? uid : device.sharing->mps_owner_claim_uid;
  return sharing::MpsPathsFor(root, owner);
}

bool HeldByAnother(const std::string& uid, const CheckpointDevice& device,
                   const Checkpoint& holders) {
  for (const auto& [holder_uid, holder] : holders.claims) {
    if (holder_uid == uid) {
      continue;
    }
    for (const CheckpointDevice& held : holder.devices) {
      if (held.pool == device.pool && held.device == device.device) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace

SharingOutcome OutcomeOf(const sharing::SharingDecision& decision) {
  if (decision.allowed) {
    return SharingOutcome::kGranted;
  }
  switch (decision.refusal) {
    case sharing::Refusal::kOverCapacity:
      return SharingOutcome::kOverCapacity;
    case sharing::Refusal::kMixedStrategy:
      return SharingOutcome::kMixedStrategy;
    case sharing::Refusal::kNone:
    case sharing::Refusal::kDeviceBusy:
      return SharingOutcome::kDeviceBusy;
  }
  return SharingOutcome::kDeviceBusy;
}

absl::string_view ToString(SharingOutcome outcome) {
  switch (outcome) {
    case SharingOutcome::kGranted:
      return "none";
    case SharingOutcome::kDeviceBusy:
      return "device_busy";
    case SharingOutcome::kOverCapacity:
      return "over_capacity";
    case SharingOutcome::kMixedStrategy:
      return "mixed_strategy";
    case SharingOutcome::kApplyError:
      return "apply_error";
  }
  return "none";
}

SharingMetrics SharingMetrics::Create(prometheus::Registry& registry) {
  SharingMetrics m{
      .decisions_total = telemetry::BuildCounter(registry, "dralens_sharing_decisions_total"),
      .restores_total = telemetry::BuildCounter(registry, "dralens_sharing_restores_total")};
  for (sharing::SharingStrategy strategy : kStrategies) {
    for (const char* result : {"ok", "error"}) {
      m.restores_total.Add(
          {{"strategy", std::string(sharing::ToString(strategy))}, {"result", result}});
    }
    for (SharingOutcome outcome : kOutcomes) {
      const bool granted = outcome == SharingOutcome::kGranted;
      m.decisions[static_cast<int>(strategy)][static_cast<int>(outcome)] =
          &m.decisions_total.Add({{"strategy", std::string(sharing::ToString(strategy))},
                                  {"result", granted ? "granted" : "refused"},
                                  {"reason", std::string(ToString(outcome))}});
    }
  }
  return m;
}

void SharingMetrics::Record(sharing::SharingStrategy strategy, SharingOutcome outcome) {
  decisions[static_cast<int>(strategy)][static_cast<int>(outcome)]->Increment();
}

void SharingMetrics::RecordRestore(sharing::SharingStrategy strategy, bool ok) {
  restores_total
      .Add(
          {{"strategy", std::string(sharing::ToString(strategy))}, {"result", ok ? "ok" : "error"}})
      .Increment();
}

SharingApplier::SharingApplier(discovery::TimeSliceControl& time_slices, sharing::MpsControl& mps,
                               std::string mps_root)
    : time_slices_(time_slices), mps_(mps), mps_root_(std::move(mps_root)) {}

absl::StatusOr<CdiContainerEdits> SharingApplier::Apply(const std::string& uid,
                                                        const CheckpointDevice& device,
                                                        int host_index, int ordinal) {
  CdiContainerEdits edits;
  if (!device.sharing.has_value()) {
    return edits;
  }
  const sharing::SharingConfig& config = device.sharing->config;
  switch (config.mode) {
    case sharing::SharingMode::kNone:
      return edits;
    case sharing::SharingMode::kTimeSlicing:
      if (device.type == model::DeviceType::kMig) {
        return edits;  // a MIG device has no interval: processes share it as is
      }
      RETURN_IF_ERROR(
          common::Annotate(time_slices_.SetTimeSlice(device.uuid, config.interval),
                           absl::StrCat("set time slice ", discovery::ToString(config.interval),
                                        " on ", device.uuid)));
      return edits;
    case sharing::SharingMode::kMps: {
      ASSIGN_OR_RETURN(sharing::MpsPaths paths, MpsPathsOf(mps_root_, uid, device));
      std::error_code ec;
      for (const std::string& dir : {paths.pipe_dir, paths.log_dir}) {
        std::filesystem::create_directories(dir, ec);
        if (ec) {
          return absl::InternalError(
              absl::StrCat("create MPS directory ", dir, ": ", ec.message()));
        }
      }
      const sharing::MpsDeviceRef ref{
          .uuid = device.uuid, .host_index = host_index, .cuda_ordinal = ordinal};
      RETURN_IF_ERROR(
          common::Annotate(mps_.Start(sharing::MpsDaemonSettingsFor(ref, paths, config.mps)),
                           absl::StrCat("start MPS control daemon for ", device.uuid)));
      sharing::SharingContainerEdits client = sharing::MpsContainerEdits(paths, config.mps, ref);
      edits.env = std::move(client.env);
      for (sharing::SharingMount& m : client.mounts) {
        edits.mounts.push_back(CdiMount{.host_path = std::move(m.host_path),
                                        .container_path = std::move(m.container_path),
                                        .options = std::move(m.options)});
      }
      return edits;
    }
  }
  return edits;
}

absl::Status SharingApplier::Release(const std::string& uid,
                                     const std::vector<CheckpointDevice>& devices,
                                     const Checkpoint& holders) {
  for (const CheckpointDevice& d : devices) {
    if (!d.sharing.has_value() || d.sharing->config.mode == sharing::SharingMode::kNone ||
        d.uuid.empty()) {
      continue;  // nothing was applied (an uncreated dynamic MIG device has no UUID yet)
    }
    if (HeldByAnother(uid, d, holders)) {
      continue;  // the other holders keep the device's interval or daemon
    }
    if (d.sharing->config.mode == sharing::SharingMode::kTimeSlicing &&
        d.type == model::DeviceType::kGpu) {
      RETURN_IF_ERROR(WithReason(
          common::Annotate(time_slices_.SetTimeSlice(d.uuid, discovery::TimeSlice::kDefault),
                           absl::StrCat("reset time slice on ", d.uuid)),
          FailureReason::kSharingError));
    }
    if (d.sharing->config.mode == sharing::SharingMode::kMps) {
      RETURN_IF_ERROR(WithReason(
          common::Annotate(mps_.Stop(d.uuid), absl::StrCat("stop MPS daemon of ", d.uuid)),
          FailureReason::kSharingError));
      if (absl::StatusOr<sharing::MpsPaths> paths = MpsPathsOf(mps_root_, uid, d); paths.ok()) {
        std::error_code ec;
        std::filesystem::remove_all(paths->claim_dir, ec);
        if (ec) {
          return WithReason(absl::InternalError(absl::StrCat("remove MPS directory ",
                                                             paths->claim_dir, ": ", ec.message())),
                            FailureReason::kSharingError);
        }
      }
    }
  }
  return absl::OkStatus();
}

SharingRestoreResult SharingApplier::Restore(
    const Checkpoint& checkpoint, const std::function<int(const std::string&)>& host_index,
    SharingMetrics& metrics) {
  SharingRestoreResult result;
  for (const auto& [uid, claim] : checkpoint.claims) {
    if (claim.state != ClaimState::kPrepareCompleted) {
      continue;
    }
    for (size_t i = 0; i < claim.devices.size(); ++i) {
      const CheckpointDevice& d = claim.devices[i];
      if (!d.sharing.has_value() || d.sharing->config.mode == sharing::SharingMode::kNone ||
          d.uuid.empty()) {
        continue;
      }
      absl::StatusOr<CdiContainerEdits> applied =
          Apply(uid, d, host_index(d.device), static_cast<int>(i));
      metrics.RecordRestore(d.sharing->strategy, applied.ok());
      if (applied.ok()) {
        ++result.applied;
        DLOG(kInfo, "sharing", "sharing of a restored claim applied again",
             {{"claim", absl::StrCat(claim.namespace_name, "/", claim.name)},
              {"uid", uid},
              {"device", d.device},
              {"strategy", sharing::ToString(d.sharing->strategy)}});
      } else {
        ++result.errors;
        DLOG(kWarn, "sharing", "could not apply the sharing of a restored claim again",
             {{"claim", absl::StrCat(claim.namespace_name, "/", claim.name)},
              {"uid", uid},
              {"device", d.device},
              {"error", applied.status().message()}});
      }
    }
  }
  return result;
}

}  // namespace dralens::driver::prepare
