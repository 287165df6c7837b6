#include "driver/prepare/orphan_detector.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/model/codec.h"
#include "src/model/resource.h"
#include "src/telemetry/catalog.h"

namespace dralens::driver::prepare {
namespace {

constexpr char kComponent[] = "orphans";
constexpr const char* kReasons[] = {"gone", "replaced", "not_allocated"};

// Whether the allocation holds `device` of our driver in its pool.
bool Allocated(const model::ResourceClaim& claim, const std::string& driver,
               const CheckpointDevice& device) {
  for (const model::DeviceRequestAllocationResult& r : claim.status.allocation->devices.results) {
    if (r.driver == driver && r.pool == device.pool && r.device == device.device) {
      return true;
    }
  }
  return false;
}

}  // namespace

OrphanDetector::OrphanDetector(OrphanDetectorOptions options, k8s::KubeClient& client,
                               ClaimLedger& ledger, ClaimHandler& unprepare, common::Clock& clock,
                               prometheus::Registry& registry)
    : options_(std::move(options)),
      client_(client),
      ledger_(ledger),
      unprepare_(unprepare),
      clock_(clock),
      orphaned_(telemetry::BuildGauge(registry, "dralens_node_orphaned_claims")),
      age_(telemetry::BuildGauge(registry, "dralens_node_orphaned_claim_age_seconds")),
      checks_(telemetry::BuildCounter(registry, "dralens_node_orphan_checks_total")),
      unprepared_(telemetry::BuildCounter(registry, "dralens_node_orphans_unprepared_total")),
      loop_(clock, options_.interval, options_.poll_interval, [this] { Check(); }) {
  for (const char* reason : kReasons) {
    orphaned_.Add({{"reason", reason}});
  }
  for (const char* result : {"ok", "error"}) {
    checks_.Add({{"result", result}});
    unprepared_.Add({{"result", result}});
  }
}

OrphanDetector::~OrphanDetector() { Stop(); }

absl::StatusOr<std::string> OrphanDetector::Judge(const std::string& uid,
                                                  const CheckpointClaim& entry) {
  absl::StatusOr<nlohmann::json> fetched =
      client_.Get(k8s::kResourceClaims, entry.namespace_name, entry.name);
  if (!fetched.ok()) {
    if (k8s::IsNotFound(fetched.status())) {
      return std::string("gone");
    }
    return common::Annotate(fetched.status(), "get ResourceClaim");
  }
  absl::StatusOr<model::ResourceClaim> claim = model::Decode<model::ResourceClaim>(*fetched);
  if (!claim.ok()) {
    return common::Annotate(claim.status(), "decode ResourceClaim");
  }
  if (claim->metadata.uid != uid) {
    return std::string("replaced");
  }
  if (!claim->status.allocation.has_value()) {
    return std::string("not_allocated");
  }
  for (const CheckpointDevice& device : entry.devices) {
    if (!Allocated(*claim, options_.driver_name, device)) {
      return std::string("not_allocated");
    }
  }
  return std::string();
}

OrphanCheckResult OrphanDetector::Check() {
  absl::MutexLock check_lock(&check_mu_);
  OrphanCheckResult result;
  const CheckpointSnapshot snapshot = ledger_.Snapshot();
  std::map<std::string, Orphan> before;
  {
    absl::MutexLock lock(&mu_);
    before = orphans_;
  }
  std::map<std::string, Orphan> now_orphaned;
  const absl::Time now = clock_.Now();
  if (snapshot.checkpoint != nullptr) {
    for (const auto& [uid, entry] : snapshot.checkpoint->claims) {
      ++result.checked;
      absl::StatusOr<std::string> reason = Judge(uid, entry);
      const auto previous = before.find(uid);
      if (!reason.ok()) {
        ++result.errors;
        DLOG(kWarn, kComponent, "could not check a prepared claim",
             {{"claim", absl::StrCat(entry.namespace_name, "/", entry.name)},
              {"uid", uid},
              {"error", reason.status().message()}});
        if (previous != before.end()) {
          now_orphaned.emplace(uid, previous->second);  // unknown: as it was
        }
        continue;
      }
      if (reason->empty()) {
        continue;
      }
      Orphan orphan{.namespace_name = entry.namespace_name,
                    .name = entry.name,
                    .uid = uid,
                    .reason = *reason,
                    .since = previous != before.end() ? previous->second.since : now};
      if (previous == before.end()) {
        DLOG(kWarn, kComponent, "prepared claim is orphaned",
             {{"claim", absl::StrCat(entry.namespace_name, "/", entry.name)},
              {"uid", uid},
              {"reason", *reason},
              {"devices", entry.devices.size()}});
      }
      now_orphaned.emplace(uid, std::move(orphan));
    }
  }
  checks_.Add({{"result", result.errors == 0 ? "ok" : "error"}}).Increment();

  if (options_.unprepare_after.has_value()) {
    for (auto it = now_orphaned.begin(); it != now_orphaned.end();) {
      const Orphan& orphan = it->second;
      if (now - orphan.since < *options_.unprepare_after) {
        ++it;
        continue;
      }
      DLOG(kWarn, kComponent, "unpreparing orphaned claim",
           {{"claim", absl::StrCat(orphan.namespace_name, "/", orphan.name)},
            {"uid", orphan.uid},
            {"reason", orphan.reason},
            {"orphaned_for", absl::FormatDuration(now - orphan.since)}});
      std::map<std::string, std::string> errors = unprepare_.Unprepare(
          {ClaimRef{
              .namespace_name = orphan.namespace_name, .uid = orphan.uid, .name = orphan.name}},
          KubeletCall{});
      const std::string error = errors.count(orphan.uid) > 0 ? errors[orphan.uid] : "";
      if (error.empty()) {
        ++result.unprepared;
        unprepared_.Add({{"result", "ok"}}).Increment();
        DLOG(kInfo, kComponent, "orphaned claim unprepared",
             {{"claim", absl::StrCat(orphan.namespace_name, "/", orphan.name)},
              {"uid", orphan.uid}});
        it = now_orphaned.erase(it);
      } else {
        ++result.unprepare_errors;
        unprepared_.Add({{"result", "error"}}).Increment();
        DLOG(kWarn, kComponent, "unpreparing orphaned claim failed",
             {{"claim", absl::StrCat(orphan.namespace_name, "/", orphan.name)},
              {"uid", orphan.uid},
              {"error", error}});
        ++it;
      }
    }
  }

  Export(now_orphaned, now);
  for (const auto& [uid, orphan] : now_orphaned) {
    result.orphans.push_back(orphan);
  }
  absl::MutexLock lock(&mu_);
  orphans_ = std::move(now_orphaned);
  return result;
}

void OrphanDetector::Export(const std::map<std::string, Orphan>& orphans, absl::Time now) {
  std::map<std::string, int> by_reason;
  for (const char* reason : kReasons) {
    by_reason[reason] = 0;
  }
  for (const auto& [uid, orphan] : orphans) {
    ++by_reason[orphan.reason];
    prometheus::Gauge*& series = age_series_[uid];
    if (series == nullptr) {
      series = &age_.Add(
          {{"namespace", orphan.namespace_name}, {"claim", orphan.name}, {"uid", orphan.uid}});
    }
    series->Set(absl::ToDoubleSeconds(now - orphan.since));
  }
  for (const auto& [reason, count] : by_reason) {
    orphaned_.Add({{"reason", reason}}).Set(count);
  }
  // Only orphans have an age series.
  for (auto it = age_series_.begin(); it != age_series_.end();) {
    if (orphans.count(it->first) == 0) {
      age_.Remove(it->second);
      it = age_series_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<Orphan> OrphanDetector::Orphans() const {
  absl::MutexLock lock(&mu_);
  std::vector<Orphan> out;
  for (const auto& [uid, orphan] : orphans_) {
    out.push_back(orphan);
  }
  return out;
}

void OrphanDetector::Run() { loop_.Start(); }

void OrphanDetector::Stop() { loop_.Stop(); }

}  // namespace dralens::driver::prepare
