#include "driver/prepare/claim_preparer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/model/codec.h"

namespace dralens::driver::prepare {
namespace {

constexpr char kComponent[] = "prepare";

std::string Key(const ClaimRef& ref) { return absl::StrCat(ref.namespace_name, "/", ref.name); }

std::string DeviceKey(absl::string_view pool, absl::string_view device) {
  return absl::StrCat(pool, "/", device);
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

std::vector<std::string> DeviceKeys(const std::vector<CheckpointDevice>& devices) {
  std::vector<std::string> keys;
  for (const CheckpointDevice& d : devices) {
    keys.push_back(DeviceKey(d.pool, d.device));
  }
  return keys;
}

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

CheckpointDevice::Sharing RecordOf(const sharing::SharingDecision& decision,
                                   const sharing::SharingRequest& request) {
  return CheckpointDevice::Sharing{.strategy = std::string(sharing::ToString(decision.strategy)),
                                   .config = decision.sharing,
                                   .mps_owner_claim_uid = decision.mps_owner_claim_uid,
                                   .consumed_memory = request.consumed_memory};
}

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

void MaybeCrashForTest(absl::string_view step) {
  const char* at = std::getenv(kCrashAtEnv);
  if (at != nullptr && step == at) {
    DLOG(kWarn, kComponent, "crashing on purpose (test hook)", {{"step", step}});
    _exit(137);
  }
}

// --- KeyedLocks ---------------------------------------------------------------------------

ClaimPreparer::KeyedLocks::Guard::Guard(KeyedLocks& owner, std::vector<std::string> keys)
    : owner_(owner), keys_(std::move(keys)) {
  std::sort(keys_.begin(), keys_.end());
  keys_.erase(std::unique(keys_.begin(), keys_.end()), keys_.end());
  // Always in sorted order: two claims sharing several devices never deadlock.
  for (const std::string& key : keys_) {
    Entry* entry = nullptr;
    {
      absl::MutexLock lock(&owner_.mu_);
      std::unique_ptr<Entry>& slot = owner_.entries_[key];
      if (slot == nullptr) {
        slot = std::make_unique<Entry>();
      }
      ++slot->users;
      entry = slot.get();
    }
    entry->mu.Lock();
  }
}

ClaimPreparer::KeyedLocks::Guard::~Guard() {
  for (auto it = keys_.rbegin(); it != keys_.rend(); ++it) {
    absl::MutexLock lock(&owner_.mu_);
    auto found = owner_.entries_.find(*it);
    found->second->mu.Unlock();
    if (--found->second->users == 0) {
      owner_.entries_.erase(found);
    }
  }
}

// --- ClaimPreparer ------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<ClaimPreparer>> ClaimPreparer::Create(
    ClaimPreparerOptions options, k8s::KubeClient& client, CheckpointStore& store, CdiWriter& cdi,
    ClaimStateMachine& states, model::Inventory inventory) {
  if (options.driver_name.empty() || options.pool_name.empty()) {
    return absl::InvalidArgumentError("claim preparer: driver name and pool name are required");
  }
  absl::StatusOr<LoadedCheckpoint> loaded = store.Load();
  if (!loaded.ok()) {
    return common::Annotate(loaded.status(), "claim preparer: load checkpoint");
  }
  if (loaded->origin == LoadedCheckpoint::Origin::kDiscardedReboot) {
    // Record the decision now, so the stale file is not read (and logged about) again.
    absl::Status saved = store.Save(loaded->checkpoint);
    if (!saved.ok()) {
      DLOG(kWarn, kComponent, "could not replace the discarded checkpoint; retried on next write",
           {{"error", saved.message()}});
    }
  }
  for (const auto& [uid, claim] : loaded->checkpoint.claims) {
    states.Adopt(uid, claim.state);
  }
  return std::unique_ptr<ClaimPreparer>(new ClaimPreparer(
      std::move(options), client, store, cdi, states, std::move(inventory), *std::move(loaded)));
}

ClaimPreparer::ClaimPreparer(ClaimPreparerOptions options, k8s::KubeClient& client,
                             CheckpointStore& store, CdiWriter& cdi, ClaimStateMachine& states,
                             model::Inventory inventory, LoadedCheckpoint loaded)
    : options_(std::move(options)),
      client_(client),
      store_(store),
      cdi_(cdi),
      states_(states),
      load_result_(std::move(loaded)),
      clock_(options_.clock != nullptr ? *options_.clock : common::RealClock()),
      tracer_(options_.tracer != nullptr ? *options_.tracer : noop_tracer_),
      devices_(std::make_shared<const std::map<std::string, OwnedDevice>>(
          IndexDevices(inventory, options_.dynamic_mig))),
      inventory_(std::move(inventory)),
      checkpoint_(load_result_.checkpoint) {
  RefreshInventoryMetrics();
}

void ClaimPreparer::SetInventory(const model::Inventory& inventory) {
  auto index = std::make_shared<const std::map<std::string, OwnedDevice>>(
      IndexDevices(inventory, options_.dynamic_mig));
  {
    absl::MutexLock lock(&inventory_mu_);
    devices_ = std::move(index);
    inventory_ = inventory;
  }
  RefreshInventoryMetrics();
}

void ClaimPreparer::RefreshMetrics() {
  if (options_.metrics == nullptr) {
    return;
  }
  PrepareMetrics::Usage usage;
  {
    absl::MutexLock lock(&checkpoint_mu_);
    usage = PrepareMetrics::UsageOf(checkpoint_);
  }
  options_.metrics->SetUsage(usage);
}

void ClaimPreparer::RefreshMigLayoutMetrics() {
  if (options_.metrics == nullptr || options_.mig_source == nullptr) {
    return;
  }
  // Only the metrics follow the source: the device index stays the published layout, which
  // dynamic MIG derives from the GPUs alone.
  absl::StatusOr<model::Inventory> now = options_.mig_source->Discover();
  if (!now.ok()) {
    DLOG(kWarn, kComponent, "MIG layout metrics not refreshed",
         {{"error", now.status().message()}});
    return;
  }
  options_.metrics->SetInventory(*now);
}

void ClaimPreparer::RefreshInventoryMetrics() {
  if (options_.metrics == nullptr) {
    return;
  }
  model::Inventory inventory;
  {
    absl::MutexLock lock(&inventory_mu_);
    inventory = inventory_;
  }
  options_.metrics->SetInventory(inventory);
  RefreshMetrics();
}

Checkpoint ClaimPreparer::CheckpointForTest() const {
  absl::MutexLock lock(&checkpoint_mu_);
  return checkpoint_;
}

nlohmann::json ClaimPreparer::DebugState() const {
  nlohmann::json claims = nlohmann::json::array();
  {
    absl::MutexLock lock(&checkpoint_mu_);
    for (const auto& [uid, claim] : checkpoint_.claims) {
      nlohmann::json devices = nlohmann::json::array();
      for (const CheckpointDevice& d : claim.devices) {
        devices.push_back({{"device", d.device},
                           {"pool", d.pool},
                           {"type", d.type},
                           {"uuid", d.uuid},
                           {"requests", d.request_names},
                           {"cdiDeviceIDs", d.cdi_device_ids}});
      }
      claims.push_back({{"uid", uid},
                        {"namespace", claim.namespace_name},
                        {"name", claim.name},
                        {"state", ToString(claim.state)},
                        {"cdiSpecFile", claim.cdi_spec_file},
                        {"devices", devices}});
    }
  }
  nlohmann::json recent = nlohmann::json::array();
  for (const DecisionLog::Decision& d : decisions_.Snapshot()) {
    recent.push_back({{"time", absl::FormatTime(absl::RFC3339_full, d.time, absl::UTCTimeZone())},
                      {"operation", ToString(d.operation)},
                      {"namespace", d.namespace_name},
                      {"name", d.name},
                      {"uid", d.uid},
                      {"result", d.reason == FailureReason::kNone ? "ok" : "error"},
                      {"reason", ToString(d.reason)},
                      {"error", d.error},
                      {"durationSeconds", absl::ToDoubleSeconds(d.duration)},
                      {"traceID", d.trace_id}});
  }
  return {{"driver", options_.driver_name},
          {"pool", options_.pool_name},
          {"claims", claims},
          {"recent", recent}};
}

std::optional<CheckpointClaim> ClaimPreparer::LookUp(const std::string& uid) const {
  absl::MutexLock lock(&checkpoint_mu_);
  auto it = checkpoint_.claims.find(uid);
  if (it == checkpoint_.claims.end()) {
    return std::nullopt;
  }
  return it->second;
}

absl::Status ClaimPreparer::UpdateCheckpoint(
    const std::function<absl::Status(Checkpoint&)>& mutate) {
  PendingUpdate me{&mutate, absl::OkStatus(), false};
  absl::MutexLock lock(&commit_mu_);
  pending_.push_back(&me);
  while (!me.done) {
    if (writing_) {
      // Someone is saving; our mutation goes into the next batch (or theirs, if they pick it
      // up). Wake when our result is in or the writer's seat is free.
      const auto ready = [&] { return me.done || !writing_; };
      commit_mu_.Await(absl::Condition(&ready));
      continue;
    }
    // Become the writer for everything queued so far.
    writing_ = true;
    std::vector<PendingUpdate*> batch;
    batch.swap(pending_);
    commit_mu_.Unlock();

    // Nothing here is expected to throw, but the waiters must be released whatever happens:
    // an escaping exception would leave them blocked on writing_ for good.
    try {
      Checkpoint next;
      {
        absl::MutexLock cp(&checkpoint_mu_);
        next = checkpoint_;
      }
      std::vector<PendingUpdate*> applied;
      for (PendingUpdate* update : batch) {
        update->result = (*update->mutate)(next);
        if (update->result.ok()) {
          applied.push_back(update);
        }
      }
      if (!applied.empty()) {
        absl::Status saved = store_.Save(next);
        if (options_.metrics != nullptr) {
          options_.metrics->RecordCheckpointWrite(saved.ok());
        }
        if (saved.ok()) {
          absl::MutexLock cp(&checkpoint_mu_);
          checkpoint_ = std::move(next);
        } else {
          saved = WithReason(saved, FailureReason::kCheckpointError);
          for (PendingUpdate* update : applied) {
            update->result = saved;
          }
        }
      }
    } catch (const std::exception& e) {
      for (PendingUpdate* update : batch) {
        update->result =
            WithReason(absl::InternalError(absl::StrCat("checkpoint update failed: ", e.what())),
                       FailureReason::kCheckpointError);
      }
    }

    commit_mu_.Lock();
    for (PendingUpdate* update : batch) {
      update->done = true;
    }
    writing_ = false;
  }
  return me.result;
}

std::map<std::string, PrepareResult> ClaimPreparer::Prepare(const std::vector<ClaimRef>& claims) {
  std::vector<ClaimRef> distinct = Distinct(claims);
  std::vector<PrepareResult> results(distinct.size());
  ForEachParallel(distinct.size(), [&](size_t i) {
    ClaimTelemetry telemetry(options_.metrics, tracer_, clock_, Operation::kPrepare, distinct[i],
                             options_.pool_name, &decisions_);
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

std::map<std::string, std::string> ClaimPreparer::Unprepare(const std::vector<ClaimRef>& claims) {
  std::vector<ClaimRef> distinct = Distinct(claims);
  std::vector<std::string> errors(distinct.size());
  ForEachParallel(distinct.size(), [&](size_t i) {
    ClaimTelemetry telemetry(options_.metrics, tracer_, clock_, Operation::kUnprepare, distinct[i],
                             options_.pool_name, &decisions_);
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

absl::Status ClaimPreparer::RollBack(const std::string& uid) {
  // The spec first: if we crash after removing it, the entry still says PrepareStarted and the
  // next attempt rolls back again (removing a missing spec is fine).
  RETURN_IF_ERROR_CTX(WithReason(cdi_.Remove(uid), FailureReason::kCdiError), "roll back");
  // Then the sharing settings and the MIG instances the attempt may have created, found by
  // their recorded intent (an MPS daemon goes before the MIG instance it runs on).
  if (std::optional<CheckpointClaim> entry = LookUp(uid); entry.has_value()) {
    RETURN_IF_ERROR_CTX(ReleaseSharing(uid, entry->devices), "roll back");
    for (const CheckpointDevice& d : entry->devices) {
      if (d.dynamic_mig.has_value()) {
        RETURN_IF_ERROR_CTX(DestroyMigInstance(*d.dynamic_mig), "roll back");
      }
    }
  }
  RETURN_IF_ERROR_CTX(UpdateCheckpoint([&](Checkpoint& cp) {
                        cp.claims.erase(uid);
                        return absl::OkStatus();
                      }),
                      "roll back");
  return states_.Transition(uid, ClaimState::kPrepareStarted, ClaimState::kUnprepared);
}

absl::Status ClaimPreparer::ApplySharing(const std::string& uid, const CheckpointDevice& device,
                                         int host_index, int ordinal, CdiContainerEdits& edits) {
  if (!device.sharing.has_value()) {
    return absl::OkStatus();
  }
  const sharing::SharingConfig& config = device.sharing->config;
  switch (config.mode) {
    case sharing::SharingMode::kNone:
      return absl::OkStatus();
    case sharing::SharingMode::kTimeSlicing:
      if (device.type == "mig") {
        return absl::OkStatus();  // a MIG device has no interval: processes share it as is
      }
      if (options_.device_source == nullptr) {
        return absl::FailedPreconditionError("TimeSlicing needs a device source on this node");
      }
      return common::Annotate(options_.device_source->SetTimeSlice(device.uuid, config.interval),
                              absl::StrCat("set time slice ", discovery::ToString(config.interval),
                                           " on ", device.uuid));
    case sharing::SharingMode::kMps: {
      if (options_.mps == nullptr) {
        return absl::FailedPreconditionError("MPS is not available on this node");
      }
      const std::string& owner =
          device.sharing->mps_owner_claim_uid.empty() ? uid : device.sharing->mps_owner_claim_uid;
      ASSIGN_OR_RETURN(sharing::MpsPaths paths, sharing::MpsPathsFor(options_.mps_root, owner));
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
      RETURN_IF_ERROR(common::Annotate(
          options_.mps->Start(sharing::MpsDaemonSettingsFor(ref, paths, config.mps)),
          absl::StrCat("start MPS control daemon for ", device.uuid)));
      sharing::SharingContainerEdits client = sharing::MpsContainerEdits(paths, config.mps, ref);
      edits.env.insert(edits.env.end(), client.env.begin(), client.env.end());
      for (sharing::SharingMount& m : client.mounts) {
        edits.mounts.push_back(CdiMount{.host_path = std::move(m.host_path),
                                        .container_path = std::move(m.container_path),
                                        .options = std::move(m.options)});
      }
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status ClaimPreparer::ReleaseSharing(const std::string& uid,
                                           const std::vector<CheckpointDevice>& devices) {
  for (const CheckpointDevice& d : devices) {
    if (!d.sharing.has_value() || d.sharing->config.mode == sharing::SharingMode::kNone ||
        d.uuid.empty()) {
      continue;  // nothing was applied (an uncreated dynamic MIG device has no UUID yet)
    }
    bool still_held = false;
    {
      absl::MutexLock lock(&checkpoint_mu_);
      for (const auto& [holder_uid, holder] : checkpoint_.claims) {
        for (const CheckpointDevice& held : holder.devices) {
          still_held = still_held || (holder_uid != uid && SameDevice(held, d));
        }
      }
    }
    if (still_held) {
      continue;  // the other holders keep the device's interval or daemon
    }
    if (d.sharing->config.mode == sharing::SharingMode::kTimeSlicing && d.type == "gpu" &&
        options_.device_source != nullptr) {
      RETURN_IF_ERROR(WithReason(common::Annotate(options_.device_source->SetTimeSlice(
                                                      d.uuid, discovery::TimeSlice::kDefault),
                                                  absl::StrCat("reset time slice on ", d.uuid)),
                                 FailureReason::kSharingError));
    }
    if (d.sharing->config.mode == sharing::SharingMode::kMps && options_.mps != nullptr) {
      RETURN_IF_ERROR(WithReason(
          common::Annotate(options_.mps->Stop(d.uuid), absl::StrCat("stop MPS daemon of ", d.uuid)),
          FailureReason::kSharingError));
      const std::string& owner =
          d.sharing->mps_owner_claim_uid.empty() ? uid : d.sharing->mps_owner_claim_uid;
      if (absl::StatusOr<sharing::MpsPaths> paths = sharing::MpsPathsFor(options_.mps_root, owner);
          paths.ok()) {
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

absl::StatusOr<model::MigDevice> ClaimPreparer::CreateMigInstance(
    const CheckpointDevice::DynamicMig& mig) {
  if (options_.mig_source == nullptr) {
    return WithReason(absl::FailedPreconditionError("dynamic MIG without a device source"),
                      FailureReason::kMigError);
  }
  const absl::Time start = clock_.Now();
  absl::StatusOr<model::MigDevice> created =
      options_.mig_source->CreateMigDevice(mig.parent_uuid, mig.profile, mig.placement_start);
  if (absl::IsUnimplemented(created.status())) {
    // NVML's NOT_SUPPORTED here means MIG mode is off: dynamic MIG turns it on (Hopper and
    // later apply it at once).
    RETURN_IF_ERROR(WithReason(options_.mig_source->SetMigMode(mig.parent_uuid, true),
                               FailureReason::kMigError));
    created =
        options_.mig_source->CreateMigDevice(mig.parent_uuid, mig.profile, mig.placement_start);
  }
  if (options_.metrics != nullptr) {
    options_.metrics->RecordMigOperation(/*create=*/true, created.ok(), clock_.Now() - start);
  }
  if (!created.ok()) {
    return WithReason(common::Annotate(created.status(),
                                       absl::StrCat("create MIG ", mig.profile, " at slice ",
                                                    mig.placement_start, " on ", mig.parent_uuid)),
                      FailureReason::kMigError);
  }
  return created;
}

absl::Status ClaimPreparer::DestroyMigInstance(const CheckpointDevice::DynamicMig& mig) {
  if (options_.mig_source == nullptr) {
    return WithReason(absl::FailedPreconditionError("dynamic MIG without a device source"),
                      FailureReason::kMigError);
  }
  std::vector<std::pair<uint32_t, uint32_t>> instances;
  if (mig.gi_id.has_value() && mig.ci_id.has_value()) {
    instances.emplace_back(*mig.gi_id, *mig.ci_id);
  } else {
    // Created (maybe) but not recorded: whatever sits at the placement is ours, because the
    // device lock and the checkpoint keep any other claim off it.
    absl::StatusOr<model::Inventory> now = options_.mig_source->Discover();
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
    absl::Status destroyed = options_.mig_source->DestroyMigInstance(mig.parent_uuid, gi, ci);
    if (options_.metrics != nullptr) {
      options_.metrics->RecordMigOperation(
          /*create=*/false, destroyed.ok() || absl::IsNotFound(destroyed), clock_.Now() - start);
    }
    if (!destroyed.ok() && !absl::IsNotFound(destroyed)) {
      return WithReason(
          common::Annotate(destroyed, absl::StrCat("destroy MIG instance gi ", gi, " ci ", ci,
                                                   " on ", mig.parent_uuid)),
          FailureReason::kMigError);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ClaimPreparer::ReclaimOrphanMigInstances(const model::Inventory& discovered) {
  std::set<std::tuple<std::string, uint32_t, uint32_t>> owned;
  {
    absl::MutexLock lock(&checkpoint_mu_);
    for (const auto& [uid, claim] : checkpoint_.claims) {
      if (claim.state != ClaimState::kPrepareCompleted) {
        continue;  // a started claim is rolled back on its retry; its instances are orphans
      }
      for (const CheckpointDevice& d : claim.devices) {
        if (d.dynamic_mig.has_value() && d.dynamic_mig->gi_id && d.dynamic_mig->ci_id) {
          owned.emplace(d.dynamic_mig->parent_uuid, *d.dynamic_mig->gi_id, *d.dynamic_mig->ci_id);
        }
      }
    }
  }
  int destroyed = 0;
  absl::Status first_error;
  for (const model::MigDevice& d : discovered.mig_devices()) {
    if (owned.count({d.parent_uuid, d.gi_id, d.ci_id}) > 0) {
      continue;
    }
    absl::Status s = options_.mig_source != nullptr
                         ? options_.mig_source->DestroyMigInstance(d.parent_uuid, d.gi_id, d.ci_id)
                         : absl::FailedPreconditionError("dynamic MIG without a device source");
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
  if (!first_error.ok()) {
    return common::Annotate(first_error, "reclaim orphan MIG instances");
  }
  return destroyed;
}

absl::StatusOr<std::vector<PreparedDevice>> ClaimPreparer::PrepareOne(const ClaimRef& ref,
                                                                      ClaimTelemetry& telemetry) {
  const std::string key = Key(ref);
  const std::string context = absl::StrCat("prepare claim ", key);
  RETURN_IF_ERROR_CTX(WithReason(ValidateClaimUid(ref.uid), FailureReason::kInvalidRequest),
                      context);
  KeyedLocks::Guard claim_lock(claim_locks_, {ref.uid});

  // Idempotency: the kubelet re-sends prepared claims after every restart of its own.
  if (std::optional<CheckpointClaim> existing = LookUp(ref.uid); existing.has_value()) {
    if (existing->state == ClaimState::kPrepareCompleted) {
      // Another consumer of a shared claim (or the kubelet after its own restart): the
      // devices are reused as prepared.
      telemetry.AddEvent("replayed from checkpoint");
      if (options_.metrics != nullptr) {
        for (size_t i = 0; i < existing->devices.size(); ++i) {
          options_.metrics->RecordSharingDecision(
              sharing::ToString(sharing::SharingStrategy::kSharedClaim), true,
              sharing::ToString(sharing::Refusal::kNone));
        }
      }
      return Answer(existing->devices);
    }
    // PrepareStarted: we crashed (or failed) midway. Undo whatever may exist, then redo all.
    DLOG(kWarn, kComponent, "claim left in PrepareStarted; rolling back before preparing again",
         {{"claim", key}, {"uid", ref.uid}});
    telemetry.AddEvent("rolled back a crashed prepare");
    auto phase = telemetry.Time(Phase::kCheckpoint);
    KeyedLocks::Guard device_lock(device_locks_, DeviceKeys(existing->devices));
    RETURN_IF_ERROR_CTX(RollBack(ref.uid), context);
  }

  // The kubelet sends only identity; the allocation lives in the API server. A claim with the
  // same name may have been deleted and re-created, hence the UID check.
  absl::StatusOr<model::ResourceClaim> claim;
  {
    auto phase = telemetry.Time(Phase::kFetchClaim);
    absl::StatusOr<nlohmann::json> fetched =
        client_.Get(k8s::kResourceClaims, ref.namespace_name, ref.name);
    if (!fetched.ok()) {
      phase.Fail(fetched.status());
      return WithReason(
          common::Annotate(fetched.status(), absl::StrCat(context, ": get ResourceClaim")),
          k8s::IsNotFound(fetched.status()) ? FailureReason::kClaimNotFound
                                            : FailureReason::kApiError);
    }
    claim = model::Decode<model::ResourceClaim>(*fetched);
    if (!claim.ok()) {
      phase.Fail(claim.status());
      return WithReason(
          common::Annotate(claim.status(), absl::StrCat(context, ": decode ResourceClaim")),
          FailureReason::kApiError);
    }
  }
  if (claim->metadata.uid != ref.uid) {
    return WithReason(absl::FailedPreconditionError(
                          absl::StrCat(context, ": claim was replaced: the kubelet asked for UID ",
                                       ref.uid, ", the API server has UID ", claim->metadata.uid)),
                      FailureReason::kClaimReplaced);
  }

  std::shared_ptr<const std::map<std::string, OwnedDevice>> devices;
  {
    absl::MutexLock lock(&inventory_mu_);
    devices = devices_;
  }
  absl::StatusOr<ClaimPlan> plan =
      PlanClaim(*claim, options_.driver_name, options_.pool_name, *devices, options_.cdi_host);
  if (!plan.ok()) {
    return common::Annotate(plan.status(), context);  // PlanClaim's error says which reason
  }
  telemetry.SetAttribute("dra.driver", options_.driver_name);
  telemetry.SetAttribute("dra.device.count", static_cast<int64_t>(plan->devices.size()));
  if (plan->devices.size() == 1) {
    telemetry.SetAttribute("dra.device", plan->devices.front().device);
  }

  // The config of each device decides how it may be shared; a bad one fails the claim before
  // anything is recorded.
  std::vector<sharing::SharingRequest> sharing_requests;
  {
    auto phase = telemetry.Time(Phase::kSharing);
    for (size_t i = 0; i < plan->devices.size(); ++i) {
      absl::StatusOr<sharing::DeviceType> type = sharing::ParseDeviceType(plan->devices[i].type);
      absl::StatusOr<sharing::DeviceConfig> config =
          type.ok() ? sharing::ResolveDeviceConfig(claim->status.allocation->devices.config,
                                                   options_.driver_name,
                                                   {.request = plan->requests[i], .type = *type})
                    : absl::StatusOr<sharing::DeviceConfig>(type.status());
      if (!config.ok()) {
        phase.Fail(config.status());
        return WithReason(
            common::Annotate(config.status(), absl::StrCat(context, ": opaque device config")),
            FailureReason::kInvalidConfig);
      }
      sharing_requests.push_back(
          sharing::SharingRequest{.claim_uid = ref.uid,
                                  .sharing = config->sharing,
                                  .share_id = plan->devices[i].share_id,
                                  .consumed_memory = plan->consumed_memory[i]});
    }
  }

  // Claims that share a device run one after another from here; others stay parallel.
  KeyedLocks::Guard device_lock(device_locks_, DeviceKeys(plan->devices));

  CheckpointClaim entry;
  entry.state = ClaimState::kPrepareStarted;
  entry.namespace_name = ref.namespace_name;
  entry.name = ref.name;
  entry.devices = plan->devices;
  entry.cdi_spec_file = plan->cdi_inputs.empty() ? "" : CdiSpecFileName(ref.uid);

  // PrepareStarted is durable before any side effect, so a crash at any later point is found
  // and rolled back. The sharing decisions are taken in the same critical section as the
  // write (mutations see those queued before them), so two claims can never both record a
  // device on terms that exclude each other.
  const sharing::SharingPlanner planner;
  std::optional<sharing::SharingDecision> refused;
  std::vector<sharing::SharingDecision> decisions;
  std::optional<ClaimTelemetry::PhaseScope> started_phase;
  started_phase.emplace(telemetry, Phase::kCheckpoint);
  absl::Status started = UpdateCheckpoint([&](Checkpoint& cp) -> absl::Status {
    std::vector<sharing::SharingDecision> planned;
    for (size_t i = 0; i < entry.devices.size(); ++i) {
      const CheckpointDevice& wanted = entry.devices[i];
      std::vector<sharing::DeviceHolder> holders;
      std::vector<std::string> holder_names;  // for the error: "ns/name (uid ...)"
      for (const auto& [holder_uid, holder] : cp.claims) {
        if (holder_uid == ref.uid) {
          continue;
        }
        for (const CheckpointDevice& held : holder.devices) {
          if (SameDevice(held, wanted)) {
            holders.push_back(HolderOf(holder_uid, held));
            holder_names.push_back(
                absl::StrCat(holder.namespace_name, "/", holder.name, " (uid ", holder_uid, ")"));
          }
        }
      }
      // The claim's own earlier results for the same device (several shares of it).
      for (size_t j = 0; j < i; ++j) {
        if (SameDevice(entry.devices[j], wanted)) {
          CheckpointDevice earlier = entry.devices[j];
          earlier.sharing = RecordOf(planned[j], sharing_requests[j]);
          holders.push_back(HolderOf(ref.uid, earlier));
        }
      }
      sharing::SharingDevice device{
          .name = wanted.device,
          .type = wanted.type == "mig" ? sharing::DeviceType::kMig : sharing::DeviceType::kGpu,
          .uuid = wanted.uuid,
          .memory = std::nullopt};
      if (auto owned = devices->find(wanted.device); owned != devices->end()) {
        device.memory = owned->second.memory;
      }
      sharing::SharingDecision decision = planner.Plan(device, sharing_requests[i], holders);
      if (!decision.allowed) {
        refused = decision;
        return WithReason(
            absl::FailedPreconditionError(absl::StrCat(
                "device ", wanted.device, " in pool ", wanted.pool, " is already prepared for ",
                holder_names.empty() ? "this claim" : absl::StrJoin(holder_names, ", "),
                "; refusing it to claim ", key, " (uid ", ref.uid, "): ", decision.reason)),
            FailureReason::kDeviceBusy);
      }
      planned.push_back(std::move(decision));
    }
    for (size_t i = 0; i < entry.devices.size(); ++i) {
      entry.devices[i].sharing = RecordOf(planned[i], sharing_requests[i]);
    }
    decisions = std::move(planned);
    cp.claims[ref.uid] = entry;
    return absl::OkStatus();
  });
  if (refused.has_value() && options_.metrics != nullptr) {
    options_.metrics->RecordSharingDecision(sharing::ToString(refused->strategy), false,
                                            sharing::ToString(refused->refusal));
  }
  if (!started.ok()) {
    started_phase->Fail(started);
    return common::Annotate(started, context);
  }
  started_phase.reset();
  RETURN_IF_ERROR_CTX(
      states_.Transition(ref.uid, ClaimState::kUnprepared, ClaimState::kPrepareStarted), context);
  MaybeCrashForTest("after-started");

  // Dynamic MIG: create the instances now that PrepareStarted records where they go, then
  // record their ids before anything else can fail, so unprepare and rollback find them.
  bool dynamic = false;
  for (const CheckpointDevice& d : entry.devices) {
    dynamic = dynamic || d.dynamic_mig.has_value();
  }
  if (dynamic) {
    auto phase = telemetry.Time(Phase::kMig);
    for (size_t i = 0; i < entry.devices.size(); ++i) {
      CheckpointDevice& d = entry.devices[i];
      if (!d.dynamic_mig.has_value()) {
        continue;
      }
      absl::StatusOr<model::MigDevice> created = CreateMigInstance(*d.dynamic_mig);
      if (!created.ok()) {
        phase.Fail(created.status());
        absl::Status undo = RollBack(ref.uid);
        if (!undo.ok()) {
          DLOG(kError, kComponent, "roll back after a failed MIG create failed; retried next time",
               {{"claim", key}, {"uid", ref.uid}, {"error", undo.message()}});
        }
        return common::Annotate(created.status(), context);
      }
      d.uuid = created->uuid;
      d.dynamic_mig->gi_id = created->gi_id;
      d.dynamic_mig->ci_id = created->ci_id;
      plan->cdi_inputs[i].mig =
          CdiDeviceInput::Mig{.gi_id = created->gi_id, .ci_id = created->ci_id};
      telemetry.SetAttribute("gpu.mig.profile", d.dynamic_mig->profile);
    }
    RefreshMigLayoutMetrics();
    MaybeCrashForTest("after-mig-created");
    RETURN_IF_ERROR_CTX(UpdateCheckpoint([&](Checkpoint& cp) {
                          cp.claims[ref.uid].devices = entry.devices;
                          return absl::OkStatus();
                        }),
                        context);
    absl::StatusOr<CdiSpec> spec = BuildClaimCdiSpec(ref.uid, plan->cdi_inputs, options_.cdi_host);
    RETURN_IF_ERROR_CTX(WithReason(spec.status(), FailureReason::kInternal), context);
    plan->cdi_spec = *std::move(spec);
  }

  if (!decisions.empty()) {
    telemetry.SetAttribute("dra.sharing.strategy",
                           std::string(sharing::ToString(decisions.front().strategy)));
  }
  // Sharing settings, now that every device (dynamic MIG included) has its UUID. The MPS
  // client's environment and mounts join the device's CDI edits.
  bool shares = false;
  for (const CheckpointDevice& d : entry.devices) {
    shares =
        shares || (d.sharing.has_value() && d.sharing->config.mode != sharing::SharingMode::kNone);
  }
  if (shares) {
    auto phase = telemetry.Time(Phase::kSharing);
    for (size_t i = 0; i < entry.devices.size(); ++i) {
      const CheckpointDevice& d = entry.devices[i];
      int host_index = -1;
      if (auto owned = devices->find(d.device); owned != devices->end()) {
        host_index = owned->second.host_index;
      }
      CdiContainerEdits edits;
      absl::Status applied = ApplySharing(ref.uid, d, host_index, static_cast<int>(i), edits);
      if (applied.ok() && !edits.empty() && plan->cdi_spec.has_value()) {
        const std::string name = CdiDeviceName(ref.uid, d.device);
        for (CdiDevice& cd : plan->cdi_spec->devices) {
          if (cd.name == name) {
            cd.edits.env.insert(cd.edits.env.end(), edits.env.begin(), edits.env.end());
            cd.edits.mounts.insert(cd.edits.mounts.end(), edits.mounts.begin(), edits.mounts.end());
          }
        }
      }
      if (!applied.ok()) {
        phase.Fail(applied);
        if (options_.metrics != nullptr) {
          options_.metrics->RecordSharingDecision(sharing::ToString(decisions[i].strategy), false,
                                                  "apply_error");
        }
        absl::Status undo = RollBack(ref.uid);
        if (!undo.ok()) {
          DLOG(kError, kComponent,
               "roll back after failed sharing settings failed; retried next time",
               {{"claim", key}, {"uid", ref.uid}, {"error", undo.message()}});
        }
        return WithReason(common::Annotate(applied, context), FailureReason::kSharingError);
      }
    }
  }
  if (options_.metrics != nullptr) {
    for (const sharing::SharingDecision& d : decisions) {
      options_.metrics->RecordSharingDecision(sharing::ToString(d.strategy), true,
                                              sharing::ToString(sharing::Refusal::kNone));
    }
  }

  if (plan->cdi_spec.has_value()) {
    auto phase = telemetry.Time(Phase::kCdi);
    absl::StatusOr<std::string> written = cdi_.Write(ref.uid, *plan->cdi_spec);
    if (!written.ok()) {
      phase.Fail(written.status());
      absl::Status undo = RollBack(ref.uid);
      if (!undo.ok()) {
        DLOG(kError, kComponent, "roll back after a failed CDI write failed; retried next time",
             {{"claim", key}, {"uid", ref.uid}, {"error", undo.message()}});
      }
      return WithReason(common::Annotate(written.status(), context), FailureReason::kCdiError);
    }
  }
  MaybeCrashForTest("after-cdi");

  {
    auto phase = telemetry.Time(Phase::kCheckpoint);
    RETURN_IF_ERROR_CTX(UpdateCheckpoint([&](Checkpoint& cp) {
                          cp.claims[ref.uid].state = ClaimState::kPrepareCompleted;
                          return absl::OkStatus();
                        }),
                        context);
  }
  RETURN_IF_ERROR_CTX(
      states_.Transition(ref.uid, ClaimState::kPrepareStarted, ClaimState::kPrepareCompleted),
      context);
  MaybeCrashForTest("after-completed");
  RefreshMetrics();
  DLOG(kInfo, kComponent, "claim prepared",
       {{"claim", key}, {"uid", ref.uid}, {"devices", entry.devices.size()}});
  return Answer(entry.devices);
}

absl::Status ClaimPreparer::UnprepareOne(const ClaimRef& ref, ClaimTelemetry& telemetry) {
  const std::string context = absl::StrCat("unprepare claim ", Key(ref));
  RETURN_IF_ERROR_CTX(WithReason(ValidateClaimUid(ref.uid), FailureReason::kInvalidRequest),
                      context);
  KeyedLocks::Guard claim_lock(claim_locks_, {ref.uid});
  std::optional<CheckpointClaim> existing = LookUp(ref.uid);
  if (!existing.has_value()) {
    telemetry.AddEvent("not prepared here");
    return absl::OkStatus();  // never prepared here, or already unprepared: nothing to do
  }
  // The devices' locks: whether this claim is a device's last holder must not change under us.
  KeyedLocks::Guard device_lock(device_locks_, DeviceKeys(existing->devices));
  RETURN_IF_ERROR_CTX(states_.Transition(ref.uid, existing->state, ClaimState::kUnpreparing),
                      context);
  // The spec goes first: a crash in between leaves the entry, and the kubelet's retry finds the
  // claim and finishes. The reverse order could leak a spec that nothing records.
  absl::Status removed;
  {
    auto phase = telemetry.Time(Phase::kCdi);
    removed = WithReason(cdi_.Remove(ref.uid), FailureReason::kCdiError);
  }
  if (removed.ok()) {
    MaybeCrashForTest("unprepare-after-cdi-removed");
    auto phase = telemetry.Time(Phase::kSharing);
    removed = ReleaseSharing(ref.uid, existing->devices);
    if (!removed.ok()) {
      phase.Fail(removed);
    }
  }
  if (removed.ok()) {
    bool destroyed_any = false;
    for (const CheckpointDevice& d : existing->devices) {
      if (!d.dynamic_mig.has_value() || !removed.ok()) {
        continue;
      }
      auto phase = telemetry.Time(Phase::kMig);
      removed = DestroyMigInstance(*d.dynamic_mig);
      if (!removed.ok()) {
        phase.Fail(removed);
      }
      destroyed_any = true;
    }
    if (destroyed_any && removed.ok()) {
      MaybeCrashForTest("unprepare-after-mig-destroyed");
    }
    if (destroyed_any) {
      RefreshMigLayoutMetrics();
    }
  }
  if (removed.ok()) {
    auto phase = telemetry.Time(Phase::kCheckpoint);
    removed = UpdateCheckpoint([&](Checkpoint& cp) {
      cp.claims.erase(ref.uid);
      return absl::OkStatus();
    });
  }
  if (!removed.ok()) {
    absl::Status back = states_.Transition(ref.uid, ClaimState::kUnpreparing, existing->state);
    if (!back.ok()) {
      DLOG(kError, kComponent, "state machine refused restoring state",
           {{"error", back.message()}});
    }
    return common::Annotate(removed, context);
  }
  MaybeCrashForTest("unprepare-after-checkpoint");
  RETURN_IF_ERROR_CTX(
      states_.Transition(ref.uid, ClaimState::kUnpreparing, ClaimState::kUnprepared), context);
  RefreshMetrics();
  DLOG(kInfo, kComponent, "claim unprepared", {{"claim", Key(ref)}, {"uid", ref.uid}});
  return absl::OkStatus();
}

}  // namespace dralens::driver::prepare
