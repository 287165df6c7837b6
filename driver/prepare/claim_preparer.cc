#include "driver/prepare/claim_preparer.h"

#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "driver/prepare/claim_debug.h"
#include "driver/prepare/crash_points.h"
#include "src/common/log.h"
#include "src/common/status.h"

namespace dralens::driver::prepare {
namespace {

constexpr char kComponent[] = "prepare";

std::string Key(const ClaimRef& ref) { return absl::StrCat(ref.namespace_name, "/", ref.name); }

// The distinct claims of a batch, first occurrence wins.
std::vector<ClaimRef> Distinct(const std::vector<ClaimRef>& claims) {
  std::vector<ClaimRef> out;
  std::set<std::string> seen;
  for (const ClaimRef& c : claims) {
    if (seen.insert(c.uid).second) {
      out.push_back(c);
    }
  }
  return out;
}

// Runs fn(i) for every i in [0, n): inline for one, one thread each otherwise.
template <typename Fn>
void ForEachParallel(size_t n, Fn fn) {
  if (n == 1) {
    fn(0);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&fn, i] { fn(i); });
  }
  for (std::thread& t : threads) {
    t.join();
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClaimPreparer>> ClaimPreparer::Create(
    ClaimPreparerOptions options, ClaimPreparerDeps deps, const model::Inventory& inventory) {
  if (options.driver_name.empty() || options.pool_name.empty()) {
    return absl::InvalidArgumentError("claim preparer: driver name and pool name are required");
  }
  return std::unique_ptr<ClaimPreparer>(new ClaimPreparer(std::move(options), deps, inventory));
}

ClaimPreparer::ClaimPreparer(ClaimPreparerOptions options, ClaimPreparerDeps deps,
                             const model::Inventory& inventory)
    : options_(std::move(options)),
      deps_(deps),
      steps_{.options = options_,
             .client = deps.client,
             .ledger = deps.ledger,
             .cdi = deps.cdi,
             .mig = deps.mig,
             .sharing = deps.sharing,
             .sharing_metrics = deps.sharing_metrics,
             .status = deps.status,
             .device_locks = device_locks_,
             .clock = deps.clock},
      devices_(std::make_shared<const DeviceIndex>(IndexDevices(inventory, options_.dynamic_mig))) {
}

void ClaimPreparer::SetInventory(const model::Inventory& inventory) {
  auto index = std::make_shared<const DeviceIndex>(IndexDevices(inventory, options_.dynamic_mig));
  absl::MutexLock lock(&inventory_mu_);
  devices_ = std::move(index);
}

std::shared_ptr<const DeviceIndex> ClaimPreparer::Devices() const {
  absl::MutexLock lock(&inventory_mu_);
  return devices_;
}

nlohmann::json ClaimPreparer::DebugState() const {
  return DebugClaims(*deps_.ledger.Snapshot().checkpoint, decisions_.Snapshot(),
                     options_.driver_name, options_.pool_name);
}

std::map<std::string, PrepareResult> ClaimPreparer::Prepare(const std::vector<ClaimRef>& claims,
                                                            const KubeletCall& call) {
  std::vector<ClaimRef> distinct = Distinct(claims);
  std::vector<PrepareResult> results(distinct.size());
  ForEachParallel(distinct.size(), [&](size_t i) {
    ClaimTelemetry telemetry(deps_.metrics, deps_.tracer, deps_.clock, decisions_,
                             Operation::kPrepare, distinct[i], options_.pool_name, call.span);
    absl::StatusOr<std::vector<PreparedDevice>> devices = PrepareOne(distinct[i], telemetry);
    telemetry.Finish(devices.status());
    if (devices.ok()) {
      results[i].devices = *std::move(devices);
    } else {
      results[i].error = std::string(devices.status().message());
      DLOG(kWarn, kComponent, "prepare failed",
           {{"claim", Key(distinct[i])}, {"uid", distinct[i].uid}, {"error", results[i].error}});
    }
  });
  std::map<std::string, PrepareResult> out;
  for (size_t i = 0; i < distinct.size(); ++i) {
    out.emplace(distinct[i].uid, std::move(results[i]));
  }
  return out;
}

std::map<std::string, std::string> ClaimPreparer::Unprepare(const std::vector<ClaimRef>& claims,
                                                            const KubeletCall& call) {
  std::vector<ClaimRef> distinct = Distinct(claims);
  std::vector<std::string> errors(distinct.size());
  ForEachParallel(distinct.size(), [&](size_t i) {
    ClaimTelemetry telemetry(deps_.metrics, deps_.tracer, deps_.clock, decisions_,
                             Operation::kUnprepare, distinct[i], options_.pool_name, call.span);
    absl::Status status = UnprepareOne(distinct[i], telemetry);
    telemetry.Finish(status);
    if (!status.ok()) {
      errors[i] = std::string(status.message());
      DLOG(kWarn, kComponent, "unprepare failed",
           {{"claim", Key(distinct[i])}, {"uid", distinct[i].uid}, {"error", errors[i]}});
    }
  });
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < distinct.size(); ++i) {
    out.emplace(distinct[i].uid, std::move(errors[i]));
  }
  return out;
}

absl::StatusOr<std::vector<PreparedDevice>> ClaimPreparer::PrepareOne(const ClaimRef& ref,
                                                                      ClaimTelemetry& telemetry) {
  PrepareAttempt attempt(ref, telemetry, Devices());
  RETURN_IF_ERROR_CTX(WithReason(ValidateClaimUid(ref.uid), FailureReason::kInvalidRequest),
                      attempt.context);
  common::KeyedMutex::Guard claim_lock(claim_locks_, {ref.uid});
  RETURN_IF_ERROR_CTX(UndoIfInstanceVanished(ref, telemetry).status(), attempt.context);
  ASSIGN_OR_RETURN(std::optional<std::vector<PreparedDevice>> replayed,
                   ReplayOrRollBack(steps_, attempt));
  if (replayed.has_value()) {
    return *std::move(replayed);
  }
  RETURN_IF_ERROR(FetchClaim(steps_, attempt));
  RETURN_IF_ERROR(PlanDevices(steps_, attempt));
  RETURN_IF_ERROR(ResolveConfigs(steps_, attempt));
  // Claims that share a device run one after another from here; others stay parallel.
  common::KeyedMutex::Guard device_lock(device_locks_, DeviceKeys(attempt.plan.devices));
  RETURN_IF_ERROR(RecordStarted(steps_, attempt));
  RETURN_IF_ERROR(RollBackOnError(attempt, CreateMigInstances(steps_, attempt)));
  RETURN_IF_ERROR(RollBackOnError(attempt, ApplySharing(steps_, attempt)));
  RETURN_IF_ERROR(RollBackOnError(attempt, WriteCdiSpec(steps_, attempt)));
  RETURN_IF_ERROR(RecordCompleted(steps_, attempt));
  PublishStatus(steps_, attempt);
  return Answer(attempt.entry.devices);
}

absl::Status ClaimPreparer::RollBackOnError(PrepareAttempt& attempt, absl::Status failed) {
  if (failed.ok()) {
    return failed;
  }
  absl::Status undo = RollBack(steps_, attempt.ref.uid, attempt.telemetry);
  if (!undo.ok()) {
    DLOG(kError, kComponent, "roll back after a failed prepare failed; retried next time",
         {{"claim", Key(attempt.ref)}, {"uid", attempt.ref.uid}, {"error", undo.message()}});
  }
  return failed;
}

absl::Status ClaimPreparer::UnprepareOne(const ClaimRef& ref, ClaimTelemetry& telemetry) {
  const std::string context = absl::StrCat("unprepare claim ", Key(ref));
  RETURN_IF_ERROR_CTX(WithReason(ValidateClaimUid(ref.uid), FailureReason::kInvalidRequest),
                      context);
  common::KeyedMutex::Guard claim_lock(claim_locks_, {ref.uid});
  std::optional<CheckpointClaim> existing = deps_.ledger.Find(ref.uid);
  if (!existing.has_value()) {
    // Never prepared here, already unprepared, or prepared before the checkpoint was lost: in
    // that last case its CDI spec is still on disk, and goes now (a missing file costs nothing).
    RETURN_IF_ERROR_CTX(WithReason(deps_.cdi.Remove(ref.uid), FailureReason::kCdiError), context);
    telemetry.AddEvent("not prepared here");
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(UnprepareLocked(ref, *existing, telemetry));
  MaybeCrashForTest("unprepare-after-checkpoint");
  deps_.status.Clear(ref);
  DLOG(kInfo, kComponent, "claim unprepared", {{"claim", Key(ref)}, {"uid", ref.uid}});
  return absl::OkStatus();
}

absl::StatusOr<bool> ClaimPreparer::UndoIfInstanceVanished(const ClaimRef& ref,
                                                           ClaimTelemetry& telemetry) {
  std::optional<CheckpointClaim> existing = deps_.ledger.Find(ref.uid);
  if (!existing.has_value() || existing->state != ClaimState::kPrepareCompleted) {
    return false;
  }
  ASSIGN_OR_RETURN(std::vector<std::string> vanished, deps_.mig.Vanished(existing->devices));
  if (vanished.empty()) {
    return false;
  }
  DLOG(kWarn, kComponent, "a prepared claim's MIG instance is gone; preparing it again",
       {{"claim", Key(ref)}, {"uid", ref.uid}, {"devices", absl::StrJoin(vanished, ",")}});
  telemetry.AddEvent("MIG instance vanished; preparing again");
  RETURN_IF_ERROR(UnprepareLocked(ref, *existing, telemetry));
  return true;
}

absl::Status ClaimPreparer::UnprepareLocked(const ClaimRef& ref, const CheckpointClaim& existing,
                                            ClaimTelemetry& telemetry) {
  const std::string context = absl::StrCat("unprepare claim ", Key(ref));
  // The devices' locks: whether this claim is a device's last holder must not change under us.
  common::KeyedMutex::Guard device_lock(device_locks_, DeviceKeys(existing.devices));
  RETURN_IF_ERROR_CTX(
      deps_.ledger.Transition(ref.uid, telemetry.span(), existing.state, ClaimState::kUnpreparing),
      context);
  absl::Status undone = UndoDevices(ref, existing, telemetry);
  if (undone.ok()) {
    auto phase = telemetry.Time(Phase::kCheckpoint);
    undone = deps_.ledger.Transition(ref.uid, telemetry.span(), ClaimState::kUnpreparing,
                                     ClaimState::kUnprepared);
  }
  if (!undone.ok()) {
    // The kubelet retries; the claim is what the checkpoint still says.
    absl::Status back = deps_.ledger.Transition(ref.uid, telemetry.span(), ClaimState::kUnpreparing,
                                                existing.state);
    if (!back.ok()) {
      DLOG(kError, kComponent, "could not restore the claim's state",
           {{"claim", Key(ref)}, {"error", back.message()}});
    }
    return common::Annotate(undone, context);
  }
  return absl::OkStatus();
}

absl::Status ClaimPreparer::UndoDevices(const ClaimRef& ref, const CheckpointClaim& existing,
                                        ClaimTelemetry& telemetry) {
  // The spec goes first: a crash in between leaves the entry, and the kubelet's retry finds the
  // claim and finishes. The reverse order could leak a spec that nothing records.
  {
    auto phase = telemetry.Time(Phase::kCdi);
    absl::Status removed = WithReason(deps_.cdi.Remove(ref.uid), FailureReason::kCdiError);
    if (!removed.ok()) {
      phase.Fail(removed);
      return removed;
    }
  }
  MaybeCrashForTest("unprepare-after-cdi-removed");
  {
    auto phase = telemetry.Time(Phase::kSharing);
    absl::Status released =
        deps_.sharing.Release(ref.uid, existing.devices, *deps_.ledger.Snapshot().checkpoint);
    if (!released.ok()) {
      phase.Fail(released);
      return released;
    }
  }
  bool destroyed = false;
  for (const CheckpointDevice& d : existing.devices) {
    if (!d.dynamic_mig.has_value()) {
      continue;
    }
    auto phase = telemetry.Time(Phase::kMig);
    absl::Status gone = deps_.mig.Destroy(*d.dynamic_mig);
    destroyed = true;
    if (!gone.ok()) {
      phase.Fail(gone);
      deps_.mig.PublishLayout();
      return gone;
    }
  }
  if (destroyed) {
    MaybeCrashForTest("unprepare-after-mig-destroyed");
    deps_.mig.PublishLayout();
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ClaimPreparer::ReclaimOrphanMigInstances(const model::Inventory& discovered) {
  int changed = 0;
  // A copy: preparing again changes the ledger while we walk the claims.
  const auto restored = deps_.ledger.Snapshot();
  for (const auto& [uid, claim] : restored.checkpoint->claims) {
    if (claim.state != ClaimState::kPrepareCompleted) {
      continue;
    }
    absl::StatusOr<std::vector<std::string>> vanished = deps_.mig.Vanished(claim.devices);
    if (vanished.ok() && vanished->empty()) {
      continue;  // nothing gone: the claim stays as restored
    }
    const ClaimRef ref{.namespace_name = claim.namespace_name, .uid = uid, .name = claim.name};
    ClaimTelemetry telemetry(deps_.metrics, deps_.tracer, deps_.clock, decisions_,
                             Operation::kPrepare, ref, options_.pool_name,
                             telemetry::SpanContext{});
    absl::Status again = vanished.status();
    if (again.ok()) {
      {
        common::KeyedMutex::Guard claim_lock(claim_locks_, {uid});
        again = UndoIfInstanceVanished(ref, telemetry).status();
      }
      if (again.ok()) {
        again = PrepareOne(ref, telemetry).status();
        ++changed;
      }
    }
    telemetry.Finish(again);
    if (!again.ok()) {
      DLOG(kWarn, kComponent, "a prepared claim whose MIG instance is gone was not prepared again",
           {{"claim", Key(ref)}, {"uid", uid}, {"error", again.message()}});
    }
  }
  absl::StatusOr<model::Inventory> now = deps_.mig.Discover();
  if (!now.ok()) {
    return common::Annotate(now.status(), "discover MIG instances to reclaim");
  }
  std::set<MigInstanceId> owned;
  const auto now_prepared = deps_.ledger.Snapshot();
  for (const auto& [uid, claim] : now_prepared.checkpoint->claims) {
    if (claim.state != ClaimState::kPrepareCompleted) {
      continue;  // a started claim is rolled back on its retry; its instances are orphans
    }
    for (const CheckpointDevice& d : claim.devices) {
      if (d.dynamic_mig.has_value() && d.dynamic_mig->gi_id && d.dynamic_mig->ci_id) {
        owned.emplace(d.dynamic_mig->parent_uuid, *d.dynamic_mig->gi_id, *d.dynamic_mig->ci_id);
      }
    }
  }
  (void)discovered;
  ASSIGN_OR_RETURN(int destroyed, deps_.mig.Reclaim(*now, owned));
  return changed + destroyed;
}

}  // namespace dralens::driver::prepare
