#include "driver/prepare/mig_manager.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/prepare/failure_reason.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/telemetry/catalog.h"

namespace dralens::driver::prepare {
namespace {

constexpr char kComponent[] = "mig";

int IndexOf(MigOperation op) { return static_cast<int>(op); }

constexpr MigOperation kAllOperations[] = {MigOperation::kCreate, MigOperation::kDestroy,
                                           MigOperation::kEnable, MigOperation::kDisable};

}  // namespace

absl::string_view ToString(MigOperation operation) {
  switch (operation) {
    case MigOperation::kCreate:
      return "create";
    case MigOperation::kDestroy:
      return "destroy";
    case MigOperation::kEnable:
      return "enable";
    case MigOperation::kDisable:
      return "disable";
  }
  return "create";
}

MigMetrics MigMetrics::Create(prometheus::Registry& registry) {
  MigMetrics m{
      .operations_total = telemetry::BuildCounter(registry, "dralens_mig_operations_total"),
      .operation_duration =
          telemetry::BuildHistogram(registry, "dralens_mig_operation_duration_seconds")};
  for (MigOperation op : kAllOperations) {
    const std::string operation(ToString(op));
    for (bool ok : {true, false}) {
      m.operations[IndexOf(op)][ok ? 0 : 1] =
          &m.operations_total.Add({{"operation", operation}, {"result", ok ? "ok" : "error"}});
    }
    m.durations[IndexOf(op)] =
        &m.operation_duration.Add({{"operation", operation}}, telemetry::DurationBuckets());
  }
  return m;
}

void MigMetrics::Record(MigOperation operation, bool ok, absl::Duration took) {
  operations[IndexOf(operation)][ok ? 0 : 1]->Increment();
  durations[IndexOf(operation)]->Observe(absl::ToDoubleSeconds(took));
}

MigManager::MigManager(discovery::GpuDiscovery& discovery, discovery::MigControl& control,
                       MigMetrics& metrics, common::Clock& clock, MigLayoutListener& layout)
    : discovery_(discovery), control_(control), metrics_(metrics), clock_(clock), layout_(layout) {}

absl::StatusOr<model::GpuInfo> MigManager::FindGpu(absl::string_view gpu_uuid) {
  absl::StatusOr<model::Inventory> now = discovery_.Discover();
  if (!now.ok()) {
    return common::Annotate(now.status(), "discover GPUs");
  }
  const model::GpuInfo* gpu = now->FindGpuByUuid(gpu_uuid);
  if (gpu == nullptr) {
    return absl::NotFoundError(absl::StrCat("GPU ", gpu_uuid, " is not on this node"));
  }
  return *gpu;
}

absl::Status MigManager::SwitchMigMode(absl::string_view gpu_uuid, bool enabled) {
  const MigOperation op = enabled ? MigOperation::kEnable : MigOperation::kDisable;
  const absl::Time start = clock_.Now();
  absl::Status switched = control_.SetMigMode(gpu_uuid, enabled);
  metrics_.Record(op, switched.ok(), clock_.Now() - start);
  if (!switched.ok()) {
    return common::Annotate(
        switched, absl::StrCat("switch MIG mode ", enabled ? "on" : "off", " on ", gpu_uuid));
  }
  DLOG(kInfo, kComponent, enabled ? "MIG mode switched on" : "MIG mode switched off",
       {{"gpu", std::string(gpu_uuid)}});
  return absl::OkStatus();
}

absl::StatusOr<model::MigDevice> MigManager::Create(const CheckpointDevice::DynamicMig& mig) {
  common::KeyedMutex::Guard gpu_lock(gpu_locks_, {mig.parent_uuid});
  const std::string what = absl::StrCat("create MIG ", mig.profile, " at slice ",
                                        mig.placement_start, " on ", mig.parent_uuid);
  absl::StatusOr<discovery::MigModeState> mode = control_.GetMigMode(mig.parent_uuid);
  if (!mode.ok()) {
    return WithReason(common::Annotate(mode.status(), what), FailureReason::kMigError);
  }
  if (mode->current != model::MigMode::kEnabled) {
    absl::StatusOr<model::GpuInfo> gpu = FindGpu(mig.parent_uuid);
    if (!gpu.ok()) {
      return WithReason(common::Annotate(gpu.status(), what), FailureReason::kMigError);
    }
    if (!discovery::MigModeSwitchesWithoutReset(*gpu)) {
      return WithReason(
          absl::FailedPreconditionError(absl::StrCat(
              what, ": MIG mode is off and a ", gpu->architecture,
              " GPU cannot switch it on without a GPU reset; enable MIG mode on the node first")),
          FailureReason::kMigError);
    }
    RETURN_IF_ERROR(WithReason(common::Annotate(SwitchMigMode(mig.parent_uuid, true), what),
                               FailureReason::kMigError));
  }
  const absl::Time start = clock_.Now();
  absl::StatusOr<model::MigDevice> created =
      control_.CreateMigDevice(mig.parent_uuid, mig.profile, mig.placement_start);
  metrics_.Record(MigOperation::kCreate, created.ok(), clock_.Now() - start);
  if (!created.ok()) {
    absl::Status failed =
        WithReason(common::Annotate(created.status(), what), FailureReason::kMigError);
    if (mode->current != model::MigMode::kEnabled) {
      DisableIfUnused(mig.parent_uuid);  // we switched it on for nothing
    }
    return failed;
  }
  return created;
}

bool MigManager::Exists(const model::Inventory& now, const CheckpointDevice::DynamicMig& mig,
                        absl::string_view uuid) {
  if (!mig.gi_id.has_value() || !mig.ci_id.has_value()) {
    return false;
  }
  for (const model::MigDevice* d : now.MigDevicesOf(mig.parent_uuid)) {
    if (d->gi_id == *mig.gi_id && d->ci_id == *mig.ci_id && d->profile.name == mig.profile &&
        d->placement.start == mig.placement_start && (uuid.empty() || d->uuid == uuid)) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::vector<std::string>> MigManager::Vanished(
    const std::vector<CheckpointDevice>& devices) {
  std::vector<std::string> gone;
  bool dynamic = false;
  for (const CheckpointDevice& d : devices) {
    dynamic = dynamic || d.dynamic_mig.has_value();
  }
  if (!dynamic) {
    return gone;
  }
  absl::StatusOr<model::Inventory> now = discovery_.Discover();
  if (!now.ok()) {
    return common::Annotate(now.status(), "look for the claim's MIG instances");
  }
  for (const CheckpointDevice& d : devices) {
    if (d.dynamic_mig.has_value() && !Exists(*now, *d.dynamic_mig, d.uuid)) {
      gone.push_back(d.device);
    }
  }
  return gone;
}

absl::Status MigManager::EnsureFullGpu(absl::string_view gpu_uuid, bool may_switch) {
  common::KeyedMutex::Guard gpu_lock(gpu_locks_, {std::string(gpu_uuid)});
  absl::StatusOr<discovery::MigModeState> mode = control_.GetMigMode(gpu_uuid);
  if (absl::IsUnimplemented(mode.status())) {
    return absl::OkStatus();  // not MIG capable
  }
  const std::string what = absl::StrCat("prepare full GPU ", gpu_uuid);
  if (!mode.ok()) {
    return WithReason(common::Annotate(mode.status(), what), FailureReason::kMigError);
  }
  if (mode->current != model::MigMode::kEnabled) {
    return absl::OkStatus();
  }
  absl::StatusOr<model::Inventory> now = discovery_.Discover();
  if (!now.ok()) {
    return WithReason(common::Annotate(now.status(), what), FailureReason::kMigError);
  }
  const model::GpuInfo* gpu = now->FindGpuByUuid(gpu_uuid);
  const size_t instances = now->MigDevicesOf(gpu_uuid).size();
  if (!may_switch || gpu == nullptr || !discovery::MigModeSwitchesWithoutReset(*gpu) ||
      instances > 0) {
    return WithReason(absl::FailedPreconditionError(
                          absl::StrCat(what, ": the GPU is in MIG mode with ", instances,
                                       " MIG devices", may_switch ? "" : " and dynamic MIG is off",
                                       "; a GPU in MIG mode is used through its MIG devices")),
                      FailureReason::kMigError);
  }
  RETURN_IF_ERROR(
      WithReason(common::Annotate(SwitchMigMode(gpu_uuid, false), what), FailureReason::kMigError));
  PublishLayout();
  return absl::OkStatus();
}

void MigManager::DisableIfUnused(absl::string_view gpu_uuid) {
  absl::StatusOr<model::Inventory> now = discovery_.Discover();
  if (!now.ok()) {
    DLOG(kWarn, kComponent, "MIG mode left on: discovery failed",
         {{"gpu", std::string(gpu_uuid)}, {"error", now.status().message()}});
    return;
  }
  const model::GpuInfo* gpu = now->FindGpuByUuid(gpu_uuid);
  if (gpu == nullptr || !gpu->mig_enabled() || !discovery::MigModeSwitchesWithoutReset(*gpu) ||
      !now->MigDevicesOf(gpu_uuid).empty()) {
    return;
  }
  absl::Status off = SwitchMigMode(gpu_uuid, false);
  if (!off.ok()) {
    DLOG(kWarn, kComponent, "MIG mode left on after its last instance",
         {{"gpu", std::string(gpu_uuid)}, {"error", off.message()}});
  }
}

absl::Status MigManager::Destroy(const CheckpointDevice::DynamicMig& mig) {
  common::KeyedMutex::Guard gpu_lock(gpu_locks_, {mig.parent_uuid});
  std::vector<std::pair<uint32_t, uint32_t>> instances;
  if (mig.gi_id.has_value() && mig.ci_id.has_value()) {
    instances.emplace_back(*mig.gi_id, *mig.ci_id);
  } else {
    // Created (maybe) but not recorded: whatever sits at the placement is ours, because the
    // device lock and the checkpoint keep any other claim off it.
    absl::StatusOr<model::Inventory> now = discovery_.Discover();
    if (!now.ok()) {
      return WithReason(common::Annotate(now.status(), "look for MIG instances to destroy"),
                        FailureReason::kMigError);
    }
    for (const model::MigDevice* d : now->MigDevicesOf(mig.parent_uuid)) {
      if (d->placement.start == mig.placement_start && d->profile.name == mig.profile) {
        instances.emplace_back(d->gi_id, d->ci_id);
      }
    }
  }
  for (const auto& [gi, ci] : instances) {
    const absl::Time start = clock_.Now();
    absl::Status destroyed = control_.DestroyMigInstance(mig.parent_uuid, gi, ci);
    // NotFound: destroyed already (a reset, a driver reload, by hand); Unimplemented: the GPU
    // is not in MIG mode (any more), so no instance is.
    const bool gone =
        destroyed.ok() || absl::IsNotFound(destroyed) || absl::IsUnimplemented(destroyed);
    if (gone && !destroyed.ok()) {
      DLOG(kInfo, kComponent, "MIG instance already gone",
           {{"parent", mig.parent_uuid}, {"gi", gi}, {"ci", ci}, {"why", destroyed.message()}});
    }
    metrics_.Record(MigOperation::kDestroy, gone, clock_.Now() - start);
    if (!gone) {
      return WithReason(
          common::Annotate(destroyed, absl::StrCat("destroy MIG instance gi ", gi, " ci ", ci,
                                                   " on ", mig.parent_uuid)),
          FailureReason::kMigError);
    }
  }
  DisableIfUnused(mig.parent_uuid);
  return absl::OkStatus();
}

absl::StatusOr<int> MigManager::Reclaim(const model::Inventory& discovered,
                                        const std::set<MigInstanceId>& owned) {
  int destroyed = 0;
  absl::Status first_error;
  for (const model::MigDevice& d : discovered.mig_devices()) {
    if (owned.count({d.parent_uuid, d.gi_id, d.ci_id}) > 0) {
      continue;
    }
    absl::Status s = control_.DestroyMigInstance(d.parent_uuid, d.gi_id, d.ci_id);
    if (s.ok()) {
      ++destroyed;
      DLOG(kWarn, kComponent, "destroyed a MIG instance no prepared claim owns",
           {{"parent", d.parent_uuid},
            {"profile", d.ProfileName()},
            {"gi", d.gi_id},
            {"ci", d.ci_id}});
    } else if (first_error.ok()) {
      first_error = s;
    }
  }
  if (destroyed > 0) {
    std::set<std::string> parents;
    for (const model::MigDevice& d : discovered.mig_devices()) {
      parents.insert(d.parent_uuid);
    }
    for (const std::string& parent : parents) {
      common::KeyedMutex::Guard gpu_lock(gpu_locks_, {parent});
      DisableIfUnused(parent);
    }
    PublishLayout();
  }
  if (!first_error.ok()) {
    return common::Annotate(first_error, "reclaim orphan MIG instances");
  }
  return destroyed;
}

void MigManager::PublishLayout() {
  absl::StatusOr<model::Inventory> now = discovery_.Discover();
  if (!now.ok()) {
    DLOG(kWarn, kComponent, "MIG layout not refreshed", {{"error", now.status().message()}});
    return;
  }
  layout_.OnMigLayoutChanged(*now);
}

}  // namespace dralens::driver::prepare
