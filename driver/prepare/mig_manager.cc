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

int IndexOf(MigOperation op) { return op == MigOperation::kCreate ? 0 : 1; }

}  // namespace

absl::string_view ToString(MigOperation operation) {
  return operation == MigOperation::kCreate ? "create" : "destroy";
}

MigMetrics MigMetrics::Create(prometheus::Registry& registry) {
  MigMetrics m{
      .operations_total = telemetry::BuildCounter(registry, "dralens_mig_operations_total"),
      .operation_duration =
          telemetry::BuildHistogram(registry, "dralens_mig_operation_duration_seconds")};
  for (MigOperation op : {MigOperation::kCreate, MigOperation::kDestroy}) {
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

absl::StatusOr<model::MigDevice> MigManager::Create(const CheckpointDevice::DynamicMig& mig) {
  const absl::Time start = clock_.Now();
  absl::StatusOr<model::MigDevice> created =
      control_.CreateMigDevice(mig.parent_uuid, mig.profile, mig.placement_start);
  if (absl::IsUnimplemented(created.status())) {
    // NVML's NOT_SUPPORTED here means MIG mode is off: dynamic MIG turns it on (Hopper and
    // later apply it at once).
    RETURN_IF_ERROR(
        WithReason(control_.SetMigMode(mig.parent_uuid, true), FailureReason::kMigError));
    created = control_.CreateMigDevice(mig.parent_uuid, mig.profile, mig.placement_start);
  }
  metrics_.Record(MigOperation::kCreate, created.ok(), clock_.Now() - start);
  if (!created.ok()) {
    return WithReason(common::Annotate(created.status(),
                                       absl::StrCat("create MIG ", mig.profile, " at slice ",
                                                    mig.placement_start, " on ", mig.parent_uuid)),
                      FailureReason::kMigError);
  }
  return created;
}

absl::Status MigManager::Destroy(const CheckpointDevice::DynamicMig& mig) {
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
    // NotFound: destroyed already; Unimplemented: the GPU is not in MIG mode, so no instance is.
    const bool gone =
        destroyed.ok() || absl::IsNotFound(destroyed) || absl::IsUnimplemented(destroyed);
    metrics_.Record(MigOperation::kDestroy, gone, clock_.Now() - start);
    if (!gone) {
      return WithReason(
          common::Annotate(destroyed, absl::StrCat("destroy MIG instance gi ", gi, " ci ", ci,
                                                   " on ", mig.parent_uuid)),
          FailureReason::kMigError);
    }
  }
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
