#include "driver/prepare/claim_preparer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
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
      devices_(std::make_shared<const std::map<std::string, OwnedDevice>>(IndexDevices(inventory))),
      checkpoint_(load_result_.checkpoint) {}

void ClaimPreparer::SetInventory(const model::Inventory& inventory) {
  auto index = std::make_shared<const std::map<std::string, OwnedDevice>>(IndexDevices(inventory));
  absl::MutexLock lock(&inventory_mu_);
  devices_ = std::move(index);
}

Checkpoint ClaimPreparer::CheckpointForTest() const {
  absl::MutexLock lock(&checkpoint_mu_);
  return checkpoint_;
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
  absl::MutexLock lock(&checkpoint_mu_);
  Checkpoint next = checkpoint_;
  RETURN_IF_ERROR(mutate(next));
  RETURN_IF_ERROR(store_.Save(next));
  checkpoint_ = std::move(next);
  return absl::OkStatus();
}

std::map<std::string, PrepareResult> ClaimPreparer::Prepare(const std::vector<ClaimRef>& claims) {
  std::vector<ClaimRef> distinct = Distinct(claims);
  std::vector<PrepareResult> results(distinct.size());
  ForEachParallel(distinct.size(), [&](size_t i) {
    absl::StatusOr<std::vector<PreparedDevice>> devices = PrepareOne(distinct[i]);
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
    absl::Status status = UnprepareOne(distinct[i]);
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
  RETURN_IF_ERROR_CTX(cdi_.Remove(uid), "roll back");
  RETURN_IF_ERROR_CTX(UpdateCheckpoint([&](Checkpoint& cp) {
                        cp.claims.erase(uid);
                        return absl::OkStatus();
                      }),
                      "roll back");
  return states_.Transition(uid, ClaimState::kPrepareStarted, ClaimState::kUnprepared);
}

absl::StatusOr<std::vector<PreparedDevice>> ClaimPreparer::PrepareOne(const ClaimRef& ref) {
  const std::string key = Key(ref);
  const std::string context = absl::StrCat("prepare claim ", key);
  RETURN_IF_ERROR_CTX(ValidateClaimUid(ref.uid), context);
  KeyedLocks::Guard claim_lock(claim_locks_, {ref.uid});

  // Idempotency: the kubelet re-sends prepared claims after every restart of its own.
  if (std::optional<CheckpointClaim> existing = LookUp(ref.uid); existing.has_value()) {
    if (existing->state == ClaimState::kPrepareCompleted) {
      return Answer(existing->devices);
    }
    // PrepareStarted: we crashed (or failed) midway. Undo whatever may exist, then redo all.
    DLOG(kWarn, kComponent, "claim left in PrepareStarted; rolling back before preparing again",
         {{"claim", key}, {"uid", ref.uid}});
    RETURN_IF_ERROR_CTX(RollBack(ref.uid), context);
  }

  // The kubelet sends only identity; the allocation lives in the API server. A claim with the
  // same name may have been deleted and re-created, hence the UID check.
  absl::StatusOr<nlohmann::json> fetched =
      client_.Get(k8s::kResourceClaims, ref.namespace_name, ref.name);
  if (!fetched.ok()) {
    return common::Annotate(fetched.status(), absl::StrCat(context, ": get ResourceClaim"));
  }
  absl::StatusOr<model::ResourceClaim> claim = model::Decode<model::ResourceClaim>(*fetched);
  if (!claim.ok()) {
    return common::Annotate(claim.status(), absl::StrCat(context, ": decode ResourceClaim"));
  }
  if (claim->metadata.uid != ref.uid) {
    return absl::FailedPreconditionError(
        absl::StrCat(context, ": claim was replaced: the kubelet asked for UID ", ref.uid,
                     ", the API server has UID ", claim->metadata.uid));
  }

  std::shared_ptr<const std::map<std::string, OwnedDevice>> devices;
  {
    absl::MutexLock lock(&inventory_mu_);
    devices = devices_;
  }
  absl::StatusOr<ClaimPlan> plan =
      PlanClaim(*claim, options_.driver_name, options_.pool_name, *devices, options_.cdi_host);
  if (!plan.ok()) {
    return common::Annotate(plan.status(), context);
  }

  std::vector<std::string> device_keys;
  for (const CheckpointDevice& d : plan->devices) {
    device_keys.push_back(DeviceKey(d.pool, d.device));
  }
  // Claims that share a device run one after another from here; others stay parallel.
  KeyedLocks::Guard device_lock(device_locks_, device_keys);

  CheckpointClaim entry;
  entry.state = ClaimState::kPrepareStarted;
  entry.namespace_name = ref.namespace_name;
  entry.name = ref.name;
  entry.devices = plan->devices;
  entry.cdi_spec_file = plan->cdi_spec.has_value() ? CdiSpecFileName(ref.uid) : "";

  // PrepareStarted is durable before any side effect, so a crash at any later point is found
  // and rolled back. The duplicate-device guard runs in the same critical section as the
  // write, so two claims can never both record the same exclusive device.
  absl::Status started = UpdateCheckpoint([&](Checkpoint& cp) -> absl::Status {
    for (const auto& [holder_uid, holder] : cp.claims) {
      if (holder_uid == ref.uid) {
        continue;
      }
      for (const CheckpointDevice& held : holder.devices) {
        for (const CheckpointDevice& wanted : entry.devices) {
          if (held.pool != wanted.pool || held.device != wanted.device) {
            continue;
          }
          if (options_.sharing && options_.sharing(held, holder_uid, ref.uid)) {
            continue;
          }
          return absl::FailedPreconditionError(absl::StrCat(
              "device ", wanted.device, " in pool ", wanted.pool, " is already prepared for claim ",
              holder.namespace_name, "/", holder.name, " (uid ", holder_uid,
              "); refusing to prepare it also for claim ", key, " (uid ", ref.uid, ")"));
        }
      }
    }
    cp.claims[ref.uid] = entry;
    return absl::OkStatus();
  });
  if (!started.ok()) {
    return common::Annotate(started, context);
  }
  RETURN_IF_ERROR_CTX(
      states_.Transition(ref.uid, ClaimState::kUnprepared, ClaimState::kPrepareStarted), context);
  MaybeCrashForTest("after-started");

  if (plan->cdi_spec.has_value()) {
    absl::StatusOr<std::string> written = cdi_.Write(ref.uid, *plan->cdi_spec);
    if (!written.ok()) {
      absl::Status undo = RollBack(ref.uid);
      if (!undo.ok()) {
        DLOG(kError, kComponent, "roll back after a failed CDI write failed; retried next time",
             {{"claim", key}, {"uid", ref.uid}, {"error", undo.message()}});
      }
      return common::Annotate(written.status(), context);
    }
  }
  MaybeCrashForTest("after-cdi");

  RETURN_IF_ERROR_CTX(UpdateCheckpoint([&](Checkpoint& cp) {
                        cp.claims[ref.uid].state = ClaimState::kPrepareCompleted;
                        return absl::OkStatus();
                      }),
                      context);
  RETURN_IF_ERROR_CTX(
      states_.Transition(ref.uid, ClaimState::kPrepareStarted, ClaimState::kPrepareCompleted),
      context);
  MaybeCrashForTest("after-completed");
  DLOG(kInfo, kComponent, "claim prepared",
       {{"claim", key}, {"uid", ref.uid}, {"devices", entry.devices.size()}});
  return Answer(entry.devices);
}

absl::Status ClaimPreparer::UnprepareOne(const ClaimRef& ref) {
  const std::string context = absl::StrCat("unprepare claim ", Key(ref));
  RETURN_IF_ERROR_CTX(ValidateClaimUid(ref.uid), context);
  KeyedLocks::Guard claim_lock(claim_locks_, {ref.uid});
  std::optional<CheckpointClaim> existing = LookUp(ref.uid);
  if (!existing.has_value()) {
    return absl::OkStatus();  // never prepared here, or already unprepared: nothing to do
  }
  RETURN_IF_ERROR_CTX(states_.Transition(ref.uid, existing->state, ClaimState::kUnpreparing),
                      context);
  // The spec goes first: a crash in between leaves the entry, and the kubelet's retry finds the
  // claim and finishes. The reverse order could leak a spec that nothing records.
  absl::Status removed = cdi_.Remove(ref.uid);
  if (removed.ok()) {
    MaybeCrashForTest("unprepare-after-cdi-removed");
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
  DLOG(kInfo, kComponent, "claim unprepared", {{"claim", Key(ref)}, {"uid", ref.uid}});
  return absl::OkStatus();
}

}  // namespace dralens::driver::prepare
