#include "exporter/cluster/claim_events.h"

#include <algorithm>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/log.h"
#include "src/telemetry/catalog.h"

namespace dralens::exporter::cluster {

ClaimEventRecorder::ClaimEventRecorder(Analyzer& analyzer, ClaimEventSink& sink,
                                       prometheus::Registry& registry, ClaimEventOptions options,
                                       const GangTracker* gangs)
    : analyzer_(analyzer),
      sink_(sink),
      gangs_(gangs),
      events_(telemetry::BuildCounter(registry, "dralens_cluster_claim_events_total")),
      options_(options),
      clock_(options.clock != nullptr ? *options.clock : common::RealClock()),
      tokens_(options.burst) {}

void ClaimEventRecorder::Reset() { written_.clear(); }

bool ClaimEventRecorder::TakeToken(absl::Time now) {
  if (refilled_ != absl::InfinitePast()) {
    tokens_ = std::min<double>(options_.burst,
                               tokens_ + absl::ToDoubleSeconds(now - refilled_) * options_.qps);
  }
  refilled_ = now;
  if (tokens_ < 1) {
    return false;
  }
  tokens_ -= 1;
  return true;
}

void ClaimEventRecorder::Count(const std::string& reason, const char* result) {
  events_.Add({{"reason", reason}, {"result", result}}).Increment();
}

int ClaimEventRecorder::Step() {
  const absl::Time now = clock_.Now();
  std::vector<Analyzer::PendingClaim> pending = analyzer_.PendingClaims();
  std::unordered_set<std::string> keys;
  keys.reserve(pending.size());
  // What is due: claims never written or whose reason moved first, then repeats, oldest first.
  struct Due {
    int order;         // 0: new or changed, 1: repeat
    absl::Time since;  // 0: when it was created; 1: when it was last written
    Analyzer::PendingClaim* claim;
  };
  std::vector<Due> due;
  for (Analyzer::PendingClaim& c : pending) {
    std::string key = absl::StrCat(c.ns, "/", c.name);
    auto w = written_.find(key);
    if (now - c.created < options_.min_pending) {
      // Too young to say anything about; not forgotten if it was written before.
    } else if (w == written_.end() || w->second.uid != c.uid) {
      due.push_back({0, c.created, &c});
    } else if (w->second.reason != c.reason) {
      if (now - w->second.at >= options_.min_interval) {
        due.push_back({0, c.created, &c});
      }
    } else if (now - w->second.at >= options_.repeat) {
      due.push_back({1, w->second.at, &c});
    }
    keys.insert(std::move(key));
  }
  for (auto it = written_.begin(); it != written_.end();) {
    it = keys.count(it->first) > 0 ? std::next(it) : written_.erase(it);
  }
  std::sort(due.begin(), due.end(), [](const Due& a, const Due& b) {
    if (a.order != b.order) {
      return a.order < b.order;
    }
    if (a.since != b.since) {
      return a.since < b.since;
    }
    return std::tie(a.claim->ns, a.claim->name) < std::tie(b.claim->ns, b.claim->name);
  });
  int writes = 0;
  // One scan per request shape per pass: at fleet scale most pending claims share a few shapes.
  Analyzer::FunnelCache funnels;
  for (const Due& d : due) {
    const Analyzer::PendingClaim& c = *d.claim;
    std::optional<ClaimExplanation> e =
        analyzer_.Explain(c.ns, c.name, &funnels, options_.scan_limit);
    if (!e.has_value() || e->state != ClaimState::kPending || !e->reason.has_value()) {
      continue;  // gone or allocated since PendingClaims()
    }
    if (!TakeToken(now)) {
      break;
    }
    if (gangs_ != nullptr) {
      e->gang = gangs_->GangOfClaim(c.ns, c.name);
    }
    // The reason the analyzer's series give (what PendingClaims() compares against next pass),
    // not one re-derived by the scan, so that the two can never make the pass write again.
    const std::string reason = EventReason(c.reason);
    const std::string note = PendingNote(*e);
    const std::string key = absl::StrCat(c.ns, "/", c.name);
    ++writes;
    auto w = written_.find(key);
    if (d.order == 1 && w != written_.end() && w->second.note == note &&
        w->second.reason == c.reason) {
      absl::Status s = sink_.UpdateSeries(c.ns, w->second.event, w->second.count + 1, now);
      if (s.ok()) {
        ++w->second.count;
        w->second.at = now;
        Count(reason, "series_updated");
        continue;
      }
      if (!absl::IsNotFound(s)) {
        DLOG(kWarn, "cluster", "cannot update the Event of a pending claim",
             {{"claim", key}, {"event", w->second.event}, {"error", s.message()}});
        Count(reason, "failed");
        continue;
      }
      // Expired: write it anew below.
    }
    ClaimEvent event{c.ns,
                     c.name,
                     c.uid,
                     reason,
                     c.reason == PendingReason::kWaitingForPod ? "Normal" : "Warning",
                     note,
                     now};
    absl::StatusOr<std::string> name = sink_.Create(event);
    if (!name.ok()) {
      DLOG(kWarn, "cluster", "cannot write an Event on a pending claim",
           {{"claim", key}, {"error", name.status().message()}});
      Count(reason, "failed");
      continue;
    }
    written_[key] = Written{c.uid, c.reason, *name, note, 1, now};
    Count(reason, "created");
  }
  return writes;
}

}  // namespace dralens::exporter::cluster
