#include "driver/prepare/prepare_steps.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "driver/prepare/crash_points.h"
#include "driver/prepare/sharing_admission.h"
#include "driver/sharing/config.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/model/codec.h"

namespace dralens::driver::prepare {
namespace {

constexpr char kComponent[] = "prepare";

std::string Key(const ClaimRef& ref) { return absl::StrCat(ref.namespace_name, "/", ref.name); }

}  // namespace

PrepareAttempt::PrepareAttempt(const ClaimRef& claim_ref, ClaimTelemetry& claim_telemetry,
                               std::shared_ptr<const DeviceIndex> index)
    : ref(claim_ref),
      telemetry(claim_telemetry),
      context(absl::StrCat("prepare claim ", Key(claim_ref))),
      devices(std::move(index)) {}

std::vector<std::string> DeviceKeys(const std::vector<CheckpointDevice>& devices) {
  std::vector<std::string> keys;
  keys.reserve(devices.size());
  for (const CheckpointDevice& d : devices) {
    keys.push_back(absl::StrCat(d.pool, "/", d.device));
  }
  return keys;
}

std::vector<PreparedDevice> Answer(const std::vector<CheckpointDevice>& devices) {
  std::vector<PreparedDevice> out;
  out.reserve(devices.size());
  for (const CheckpointDevice& d : devices) {
    out.push_back(PreparedDevice{.request_names = d.request_names,
                                 .pool_name = d.pool,
                                 .device_name = d.device,
                                 .cdi_device_ids = d.cdi_device_ids,
                                 .share_id = d.share_id});
  }
  return out;
}

absl::StatusOr<std::optional<std::vector<PreparedDevice>>> ReplayOrRollBack(const PrepareDeps& deps,
                                                                            PrepareAttempt& a) {
  std::optional<CheckpointClaim> existing = deps.ledger.Find(a.ref.uid);
  if (!existing.has_value()) {
    return std::nullopt;
  }
  if (existing->state == ClaimState::kPrepareCompleted) {
    // Another consumer of a shared claim (or the kubelet after its own restart): the devices
    // are reused as prepared.
    a.telemetry.AddEvent("replayed from checkpoint");
    for (size_t i = 0; i < existing->devices.size(); ++i) {
      deps.sharing_metrics.Record(sharing::SharingStrategy::kSharedClaim, SharingOutcome::kGranted);
    }
    return Answer(existing->devices);
  }
  // PrepareStarted: we crashed (or failed) midway. Undo whatever may exist, then redo all.
  DLOG(kWarn, kComponent, "claim left in PrepareStarted; rolling back before preparing again",
       {{"claim", Key(a.ref)}, {"uid", a.ref.uid}});
  a.telemetry.AddEvent("rolled back a crashed prepare");
  auto phase = a.telemetry.Time(Phase::kCheckpoint);
  common::KeyedMutex::Guard device_lock(deps.device_locks, DeviceKeys(existing->devices));
  RETURN_IF_ERROR_CTX(RollBack(deps, a.ref.uid, a.telemetry), a.context);
  return std::nullopt;
}

absl::Status FetchClaim(const PrepareDeps& deps, PrepareAttempt& a) {
  // The kubelet sends only identity; the allocation lives in the API server. A claim with the
  // same name may have been deleted and re-created, hence the UID check.
  {
    auto phase = a.telemetry.Time(Phase::kFetchClaim);
    absl::StatusOr<nlohmann::json> fetched =
        deps.client.Get(k8s::kResourceClaims, a.ref.namespace_name, a.ref.name);
    if (!fetched.ok()) {
      phase.Fail(fetched.status());
      return WithReason(
          common::Annotate(fetched.status(), absl::StrCat(a.context, ": get ResourceClaim")),
          k8s::IsNotFound(fetched.status()) ? FailureReason::kClaimNotFound
                                            : FailureReason::kApiError);
    }
    absl::StatusOr<model::ResourceClaim> claim = model::Decode<model::ResourceClaim>(*fetched);
    if (!claim.ok()) {
      phase.Fail(claim.status());
      return WithReason(
          common::Annotate(claim.status(), absl::StrCat(a.context, ": decode ResourceClaim")),
          FailureReason::kApiError);
    }
    a.fetched = *std::move(fetched);
    a.claim = *std::move(claim);
  }
  if (a.claim.metadata.uid != a.ref.uid) {
    return WithReason(absl::FailedPreconditionError(absl::StrCat(
                          a.context, ": claim was replaced: the kubelet asked for UID ", a.ref.uid,
                          ", the API server has UID ", a.claim.metadata.uid)),
                      FailureReason::kClaimReplaced);
  }
  return absl::OkStatus();
}

absl::Status PlanDevices(const PrepareDeps& deps, PrepareAttempt& a) {
  absl::StatusOr<ClaimPlan> plan = PlanClaim(
      a.claim, deps.options.driver_name, deps.options.pool_name, *a.devices, deps.options.cdi_host);
  if (!plan.ok()) {
    return common::Annotate(plan.status(), a.context);  // PlanClaim's error says which reason
  }
  a.plan = *std::move(plan);
  a.telemetry.SetAttribute("dra.driver", deps.options.driver_name);
  a.telemetry.SetAttribute("dra.device.count", static_cast<int64_t>(a.plan.devices.size()));
  if (a.plan.devices.size() == 1) {
    a.telemetry.SetAttribute("dra.device", a.plan.devices.front().device);
  }
  return absl::OkStatus();
}

absl::Status ResolveConfigs(const PrepareDeps& deps, PrepareAttempt& a) {
  auto phase = a.telemetry.Time(Phase::kSharing);
  for (size_t i = 0; i < a.plan.devices.size(); ++i) {
    absl::StatusOr<sharing::DeviceConfig> config = sharing::ResolveDeviceConfig(
        a.claim.status.allocation->devices.config, deps.options.driver_name,
        {.request = a.plan.requests[i], .type = a.plan.devices[i].type});
    if (!config.ok()) {
      phase.Fail(config.status());
      return WithReason(
          common::Annotate(config.status(), absl::StrCat(a.context, ": opaque device config")),
          FailureReason::kInvalidConfig);
    }
    a.requests.push_back(sharing::SharingRequest{.claim_uid = a.ref.uid,
                                                 .sharing = config->sharing,
                                                 .share_id = a.plan.devices[i].share_id,
                                                 .consumed_memory = a.plan.consumed_memory[i]});
  }
  return absl::OkStatus();
}

absl::Status RecordStarted(const PrepareDeps& deps, PrepareAttempt& a) {
  a.entry.namespace_name = a.ref.namespace_name;
  a.entry.name = a.ref.name;
  a.entry.devices = a.plan.devices;
  a.entry.cdi_spec_file = a.plan.cdi_inputs.empty() ? "" : CdiSpecFileName(a.ref.uid);
  // The sharing decisions are taken inside the write (a mutation sees those queued before it),
  // so two claims can never both record a device on terms that exclude each other.
  std::optional<sharing::SharingDecision> refused;
  auto phase = a.telemetry.Time(Phase::kCheckpoint);
  absl::Status started = deps.ledger.Transition(
      a.ref.uid, a.telemetry.span(), ClaimState::kUnprepared, ClaimState::kPrepareStarted,
      [&](Checkpoint& cp) -> absl::Status {
        SharingAdmission admission =
            AdmitSharing(cp, a.ref, a.entry.devices, a.requests, *a.devices);
        if (!admission.admitted) {
          refused = std::move(admission.refusal);
          return WithReason(absl::FailedPreconditionError(admission.error),
                            FailureReason::kDeviceBusy);
        }
        CheckpointClaim entry = a.entry;
        for (size_t i = 0; i < entry.devices.size(); ++i) {
          entry.devices[i].sharing = RecordOf(admission.decisions[i], a.requests[i]);
        }
        cp.claims[a.ref.uid] = entry;
        a.entry = std::move(entry);
        a.decisions = std::move(admission.decisions);
        return absl::OkStatus();
      });
  if (refused.has_value()) {
    deps.sharing_metrics.Record(refused->strategy, OutcomeOf(*refused));
  }
  if (!started.ok()) {
    phase.Fail(started);
    return common::Annotate(started, a.context);
  }
  MaybeCrashForTest("after-started");
  return absl::OkStatus();
}

absl::Status CreateMigInstances(const PrepareDeps& deps, PrepareAttempt& a) {
  bool dynamic = false;
  for (const CheckpointDevice& d : a.entry.devices) {
    dynamic = dynamic || d.dynamic_mig.has_value();
    if (d.type == model::DeviceType::kGpu) {
      // A full GPU (and its time slice or MPS) works only outside MIG mode. A mode switch is
      // counted by the MIG manager; a refusal fails the claim with kMigError.
      absl::Status whole = deps.mig.EnsureFullGpu(d.uuid, deps.options.dynamic_mig);
      if (!whole.ok()) {
        a.telemetry.AddEvent("full GPU refused: in MIG mode");
        return common::Annotate(whole, a.context);
      }
    }
  }
  if (!dynamic) {
    return absl::OkStatus();
  }
  // Now that PrepareStarted records where they go; their ids are recorded before anything
  // else can fail, so unprepare and rollback find them.
  auto phase = a.telemetry.Time(Phase::kMig);
  for (size_t i = 0; i < a.entry.devices.size(); ++i) {
    CheckpointDevice& d = a.entry.devices[i];
    if (!d.dynamic_mig.has_value()) {
      continue;
    }
    absl::StatusOr<model::MigDevice> created = deps.mig.Create(*d.dynamic_mig);
    if (!created.ok()) {
      phase.Fail(created.status());
      return common::Annotate(created.status(), a.context);
    }
    d.uuid = created->uuid;
    d.dynamic_mig->gi_id = created->gi_id;
    d.dynamic_mig->ci_id = created->ci_id;
    a.plan.cdi_inputs[i].mig =
        CdiDeviceInput::Mig{.gi_id = created->gi_id, .ci_id = created->ci_id};
    a.telemetry.SetAttribute("gpu.mig.profile", d.dynamic_mig->profile);
  }
  deps.mig.PublishLayout();
  MaybeCrashForTest("after-mig-created");
  RETURN_IF_ERROR_CTX(deps.ledger.Amend(a.ref.uid, a.telemetry.span(), ClaimState::kPrepareStarted,
                                        [&](Checkpoint& cp) {
                                          cp.claims[a.ref.uid].devices = a.entry.devices;
                                          return absl::OkStatus();
                                        }),
                      a.context);
  absl::StatusOr<CdiSpec> spec =
      BuildClaimCdiSpec(a.ref.uid, a.plan.cdi_inputs, deps.options.cdi_host);
  RETURN_IF_ERROR_CTX(WithReason(spec.status(), FailureReason::kInternal), a.context);
  a.plan.cdi_spec = *std::move(spec);
  return absl::OkStatus();
}

absl::Status ApplySharing(const PrepareDeps& deps, PrepareAttempt& a) {
  if (!a.decisions.empty()) {
    a.telemetry.SetAttribute("dra.sharing.strategy",
                             std::string(sharing::ToString(a.decisions.front().strategy)));
  }
  bool shares = false;
  for (const CheckpointDevice& d : a.entry.devices) {
    shares =
        shares || (d.sharing.has_value() && d.sharing->config.mode != sharing::SharingMode::kNone);
  }
  if (shares) {
    // Now that every device (dynamic MIG included) has its UUID.
    auto phase = a.telemetry.Time(Phase::kSharing);
    for (size_t i = 0; i < a.entry.devices.size(); ++i) {
      const CheckpointDevice& d = a.entry.devices[i];
      int host_index = -1;
      if (auto owned = a.devices->find(d.device); owned != a.devices->end()) {
        host_index = owned->second.host_index;
      }
      absl::StatusOr<CdiContainerEdits> edits =
          deps.sharing.Apply(a.ref.uid, d, host_index, static_cast<int>(i));
      if (!edits.ok()) {
        phase.Fail(edits.status());
        deps.sharing_metrics.Record(a.decisions[i].strategy, SharingOutcome::kApplyError);
        return WithReason(common::Annotate(edits.status(), a.context),
                          FailureReason::kSharingError);
      }
      if (edits->empty() || !a.plan.cdi_spec.has_value()) {
        continue;
      }
      // The MPS client's environment and mounts join the device's CDI edits.
      const std::string name = CdiDeviceName(a.ref.uid, d.device);
      for (CdiDevice& cd : a.plan.cdi_spec->devices) {
        if (cd.name == name) {
          cd.edits.env.insert(cd.edits.env.end(), edits->env.begin(), edits->env.end());
          cd.edits.mounts.insert(cd.edits.mounts.end(), edits->mounts.begin(), edits->mounts.end());
        }
      }
    }
  }
  for (const sharing::SharingDecision& d : a.decisions) {
    deps.sharing_metrics.Record(d.strategy, SharingOutcome::kGranted);
  }
  return absl::OkStatus();
}

absl::Status WriteCdiSpec(const PrepareDeps& deps, PrepareAttempt& a) {
  if (a.plan.cdi_spec.has_value()) {
    auto phase = a.telemetry.Time(Phase::kCdi);
    absl::StatusOr<std::string> written = deps.cdi.Write(a.ref.uid, *a.plan.cdi_spec);
    if (!written.ok()) {
      phase.Fail(written.status());
      return WithReason(common::Annotate(written.status(), a.context), FailureReason::kCdiError);
    }
  }
  MaybeCrashForTest("after-cdi");
  return absl::OkStatus();
}

absl::Status RecordCompleted(const PrepareDeps& deps, PrepareAttempt& a) {
  {
    auto phase = a.telemetry.Time(Phase::kCheckpoint);
    absl::Status completed = deps.ledger.Transition(
        a.ref.uid, a.telemetry.span(), ClaimState::kPrepareStarted, ClaimState::kPrepareCompleted);
    if (!completed.ok()) {
      phase.Fail(completed);
      return common::Annotate(completed, a.context);
    }
  }
  MaybeCrashForTest("after-completed");
  DLOG(kInfo, kComponent, "claim prepared",
       {{"claim", Key(a.ref)}, {"uid", a.ref.uid}, {"devices", a.entry.devices.size()}});
  return absl::OkStatus();
}

void PublishStatus(const PrepareDeps& deps, PrepareAttempt& a) {
  const int64_t generation = a.fetched.value("/metadata/generation"_json_pointer, int64_t{0});
  nlohmann::json entries =
      DeviceStatusEntries(a.entry, *a.devices, deps.options.driver_name, deps.options.pool_name,
                          generation, deps.clock.Now());
  deps.status.Publish(a.ref, std::move(a.fetched), std::move(entries));
}

absl::Status RollBack(const PrepareDeps& deps, const std::string& uid, ClaimTelemetry& telemetry) {
  // The spec first: if we crash after removing it, the entry still says PrepareStarted and the
  // next attempt rolls back again (removing a missing spec is fine).
  RETURN_IF_ERROR_CTX(WithReason(deps.cdi.Remove(uid), FailureReason::kCdiError), "roll back");
  std::optional<CheckpointClaim> entry = deps.ledger.Find(uid);
  if (!entry.has_value()) {
    return absl::OkStatus();
  }
  // Then the sharing settings and the MIG instances the attempt may have created, found by
  // their recorded intent (an MPS daemon goes before the MIG instance it runs on).
  RETURN_IF_ERROR_CTX(deps.sharing.Release(uid, entry->devices, *deps.ledger.Snapshot().checkpoint),
                      "roll back");
  bool destroyed = false;
  for (const CheckpointDevice& d : entry->devices) {
    if (d.dynamic_mig.has_value()) {
      RETURN_IF_ERROR_CTX(deps.mig.Destroy(*d.dynamic_mig), "roll back");
      destroyed = true;
    }
  }
  if (destroyed) {
    deps.mig.PublishLayout();
  }
  return deps.ledger.Transition(uid, telemetry.span(), ClaimState::kPrepareStarted,
                                ClaimState::kUnprepared);
}

}  // namespace dralens::driver::prepare
