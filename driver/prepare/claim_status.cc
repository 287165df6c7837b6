#include "driver/prepare/claim_status.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "driver/sharing/planner.h"
#include "src/common/log.h"
#include "src/telemetry/catalog.h"

namespace dralens::driver::prepare {
namespace {

constexpr char kComponent[] = "claim-status";

using EntryKey = std::tuple<std::string, std::string, std::string, std::string>;

EntryKey KeyOf(const nlohmann::json& entry) {
  auto str = [&](const char* k) {
    auto it = entry.find(k);
    return it != entry.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  return {str("driver"), str("pool"), str("device"), str("shareID")};
}

bool Ours(const nlohmann::json& entry, absl::string_view driver, absl::string_view pool) {
  const EntryKey key = KeyOf(entry);
  return std::get<0>(key) == driver && std::get<1>(key) == pool;
}

// Whether every entry of `ours` is in `stored` (by key).
bool ContainsAll(const nlohmann::json& stored, const nlohmann::json& ours) {
  std::set<EntryKey> have;
  if (stored.is_array()) {
    for (const nlohmann::json& e : stored) {
      have.insert(KeyOf(e));
    }
  }
  for (const nlohmann::json& e : ours) {
    if (have.count(KeyOf(e)) == 0) {
      return false;
    }
  }
  return true;
}

const nlohmann::json* StatusDevices(const nlohmann::json& claim) {
  auto status = claim.find("status");
  if (status == claim.end() || !status->is_object()) {
    return nullptr;
  }
  auto devices = status->find("devices");
  return devices == status->end() || devices->is_null() ? nullptr : &*devices;
}

}  // namespace

nlohmann::json DeviceStatusEntries(const CheckpointClaim& claim,
                                   const std::map<std::string, OwnedDevice>& owned,
                                   absl::string_view driver, absl::string_view node,
                                   int64_t generation, absl::Time now) {
  nlohmann::json out = nlohmann::json::array();
  std::set<std::pair<std::string, std::string>> seen;  // device, shareID
  for (const CheckpointDevice& d : claim.devices) {
    if (!seen.insert({d.device, d.share_id.value_or("")}).second) {
      continue;
    }
    nlohmann::json condition = {
        {"type", "Ready"},
        {"status", "True"},
        {"reason", "Prepared"},
        {"message", absl::StrCat("prepared by ", driver, " on node ", node)},
        {"lastTransitionTime", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", now, absl::UTCTimeZone())}};
    if (generation > 0) {
      condition["observedGeneration"] = generation;
    }
    nlohmann::json data = {{"uuid", d.uuid}};
    if (d.type == model::DeviceType::kMig) {
      std::string profile;
      if (d.dynamic_mig.has_value()) {
        profile = d.dynamic_mig->profile;
      } else if (auto it = owned.find(d.device); it != owned.end()) {
        profile = it->second.mig_profile;
      }
      data["migProfile"] = profile;
    }
    data["sharingStrategy"] = std::string(sharing::ToString(
        d.sharing.has_value() ? d.sharing->strategy : sharing::SharingStrategy::kExclusive));
    nlohmann::json entry = {{"driver", std::string(driver)},
                            {"pool", d.pool},
                            {"device", d.device},
                            {"conditions", nlohmann::json::array({condition})},
                            {"data", data}};
    if (d.share_id.has_value()) {
      entry["shareID"] = *d.share_id;
    }
    out.push_back(std::move(entry));
  }
  return out;
}

nlohmann::json MergeDeviceStatus(const nlohmann::json& current, absl::string_view driver,
                                 absl::string_view pool, const nlohmann::json& ours) {
  nlohmann::json out = nlohmann::json::array();
  if (current.is_array()) {
    for (const nlohmann::json& e : current) {
      if (!e.is_object() || !Ours(e, driver, pool)) {
        out.push_back(e);
      }
    }
  }
  for (const nlohmann::json& e : ours) {
    out.push_back(e);
  }
  return out;
}

absl::string_view ToString(StatusWrite write) {
  return write == StatusWrite::kPublish ? "publish" : "clear";
}

absl::string_view ToString(StatusWriteResult result) {
  switch (result) {
    case StatusWriteResult::kOk:
      return "ok";
    case StatusWriteResult::kDropped:
      return "dropped";
    case StatusWriteResult::kGone:
      return "gone";
    case StatusWriteResult::kError:
      return "error";
  }
  return "error";
}

ClaimStatusMetrics ClaimStatusMetrics::Create(prometheus::Registry& registry) {
  ClaimStatusMetrics m{
      .writes_total = telemetry::BuildCounter(registry, "dralens_node_claim_status_writes_total")};
  for (StatusWrite w : {StatusWrite::kPublish, StatusWrite::kClear}) {
    for (StatusWriteResult r : {StatusWriteResult::kOk, StatusWriteResult::kDropped,
                                StatusWriteResult::kGone, StatusWriteResult::kError}) {
      m.writes[static_cast<int>(w)][static_cast<int>(r)] = &m.writes_total.Add(
          {{"operation", std::string(ToString(w))}, {"result", std::string(ToString(r))}});
    }
  }
  return m;
}

void ClaimStatusMetrics::Record(StatusWrite write, StatusWriteResult result) {
  writes[static_cast<int>(write)][static_cast<int>(result)]->Increment();
}

ApiClaimStatusWriter::ApiClaimStatusWriter(k8s::KubeClient& client, ClaimStatusMetrics& metrics,
                                           ApiClaimStatusOptions options)
    : client_(client), metrics_(metrics), options_(std::move(options)) {}

ApiClaimStatusWriter::~ApiClaimStatusWriter() { Stop(); }

void ApiClaimStatusWriter::Start() {
  absl::MutexLock lock(&mu_);
  if (thread_ == nullptr && !stopping_) {
    thread_ = std::make_unique<std::thread>([this] { Run(); });
  }
}

void ApiClaimStatusWriter::Stop() {
  size_t dropped = 0;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    dropped = order_.size();
  }
  if (thread_ != nullptr) {
    thread_->join();
    thread_.reset();
  }
  if (dropped > 0) {
    DLOG(kWarn, kComponent, "stopping with ResourceClaim status writes not done",
         {{"claims", dropped}});
  }
}

void ApiClaimStatusWriter::Publish(const ClaimRef& claim, nlohmann::json fetched,
                                   nlohmann::json entries) {
  Enqueue(Wish{.claim = claim,
               .write = StatusWrite::kPublish,
               .fetched = std::move(fetched),
               .entries = std::move(entries)});
}

void ApiClaimStatusWriter::Clear(const ClaimRef& claim) {
  Enqueue(Wish{.claim = claim,
               .write = StatusWrite::kClear,
               .fetched = std::nullopt,
               .entries = nlohmann::json::array()});
}

void ApiClaimStatusWriter::Enqueue(Wish wish) {
  absl::MutexLock lock(&mu_);
  const std::string uid = wish.claim.uid;
  auto [it, inserted] = wishes_.insert_or_assign(uid, std::move(wish));
  ++enqueued_;
  if (inserted) {
    order_.push_back(uid);
  }
}

bool ApiClaimStatusWriter::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const auto idle = [this]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return order_.empty() && !busy_; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

void ApiClaimStatusWriter::Run() {
  while (true) {
    Wish wish;
    {
      absl::MutexLock lock(&mu_);
      while (true) {
        if (stopping_) {
          return;
        }
        const absl::Time now = absl::Now();
        absl::Time next = absl::InfiniteFuture();
        auto ready = order_.end();
        for (auto it = order_.begin(); it != order_.end(); ++it) {
          const absl::Time at = wishes_.at(*it).not_before;
          if (at <= now) {
            ready = it;
            break;
          }
          next = std::min(next, at);
        }
        if (ready != order_.end()) {
          wish = std::move(wishes_.at(*ready));
          wishes_.erase(*ready);
          order_.erase(ready);
          busy_ = true;
          break;
        }
        const uint64_t seen = enqueued_;
        const auto woken = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || enqueued_ != seen;
        };
        if (next == absl::InfiniteFuture()) {
          const auto any = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
            return stopping_ || !order_.empty();
          };
          mu_.Await(absl::Condition(&any));
        } else {
          // A retry is due later; a new wish (queued with no delay) wakes us earlier.
          mu_.AwaitWithDeadline(absl::Condition(&woken), next);
        }
      }
    }
    absl::Duration retry_in = absl::ZeroDuration();
    std::optional<StatusWriteResult> result = Attempt(wish, retry_in);
    absl::MutexLock lock(&mu_);
    busy_ = false;
    const std::string uid = wish.claim.uid;
    if (!result.has_value() && wishes_.count(uid) == 0) {
      wish.not_before = absl::Now() + retry_in;
      order_.push_back(uid);
      wishes_.emplace(uid, std::move(wish));
      continue;
    }
    if (!result.has_value()) {
      continue;  // a newer wish for the claim replaced this one
    }
    metrics_.Record(wish.write, *result);
    if (*result == StatusWriteResult::kDropped && !warned_dropped_) {
      warned_dropped_ = true;
      DLOG(kWarn, kComponent,
           "the API server stored no status.devices (DRAResourceClaimDeviceStatus disabled?); "
           "claims work, their device status is not reported",
           {{"claim", absl::StrCat(wish.claim.namespace_name, "/", wish.claim.name)}});
    }
  }
}

std::optional<StatusWriteResult> ApiClaimStatusWriter::Attempt(Wish& wish,
                                                               absl::Duration& retry_in) {
  ++wish.attempts;
  const bool last = wish.attempts >= options_.max_attempts;
  const std::string key = absl::StrCat(wish.claim.namespace_name, "/", wish.claim.name);
  auto transient = [&](const absl::Status& status) -> std::optional<StatusWriteResult> {
    absl::Duration backoff = options_.initial_backoff;
    for (int i = 1; i < wish.attempts && backoff < options_.max_backoff; ++i) {
      backoff *= 2;
    }
    retry_in = std::min(backoff, options_.max_backoff);
    if (last) {
      DLOG(kWarn, kComponent, "giving up writing the ResourceClaim's device status",
           {{"claim", key}, {"operation", ToString(wish.write)}, {"error", status.message()}});
      return StatusWriteResult::kError;
    }
    return std::nullopt;
  };

  nlohmann::json claim;
  if (wish.fetched.has_value()) {
    claim = *std::move(wish.fetched);
    wish.fetched.reset();  // a retry reads the claim again
  } else {
    absl::StatusOr<nlohmann::json> got =
        client_.Get(k8s::kResourceClaims, wish.claim.namespace_name, wish.claim.name);
    if (k8s::IsNotFound(got.status())) {
      return StatusWriteResult::kGone;
    }
    if (!got.ok()) {
      return transient(got.status());
    }
    claim = *std::move(got);
  }
  if (claim.value("/metadata/uid"_json_pointer, "") != wish.claim.uid) {
    return StatusWriteResult::kGone;  // deleted and re-created under the same name
  }
  const nlohmann::json* current = StatusDevices(claim);
  const nlohmann::json before = current != nullptr ? *current : nlohmann::json::array();
  nlohmann::json merged =
      MergeDeviceStatus(before, options_.driver_name, options_.pool_name, wish.entries);
  if (merged == before) {
    return StatusWriteResult::kOk;  // already as wished
  }
  if (merged.empty()) {
    claim["status"].erase("devices");
  } else {
    claim["status"]["devices"] = std::move(merged);
  }
  absl::StatusOr<nlohmann::json> stored =
      client_.Update(k8s::kResourceClaims, wish.claim.namespace_name, claim, "status");
  if (stored.ok()) {
    const nlohmann::json* now = StatusDevices(*stored);
    if (!ContainsAll(now != nullptr ? *now : nlohmann::json::array(), wish.entries)) {
      return StatusWriteResult::kDropped;
    }
    return StatusWriteResult::kOk;
  }
  if (k8s::IsNotFound(stored.status())) {
    return StatusWriteResult::kGone;
  }
  if (k8s::IsConflict(stored.status()) && !last) {
    retry_in = absl::ZeroDuration();  // someone else wrote the claim: read it again, at once
    return std::nullopt;
  }
  return transient(stored.status());
}

}  // namespace dralens::driver::prepare
