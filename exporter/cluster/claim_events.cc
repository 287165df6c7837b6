#include "exporter/cluster/claim_events.h"

#include <algorithm>
#include <tuple>
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

double ClaimEventRecorder::TokensAt(absl::Time now) const {
  if (refilled_ == absl::InfinitePast()) {
    return tokens_;
  }
  return std::min<double>(options_.burst,
                          tokens_ + absl::ToDoubleSeconds(now - refilled_) * options_.qps);
}

bool ClaimEventRecorder::TakeToken(absl::Time now) {
  tokens_ = TokensAt(now);
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

ClaimEventRecorder::Rank ClaimEventRecorder::RankOf(int order, absl::Time since,
                                                    absl::string_view ns, absl::string_view name) {
  return {order, since, ns, name};
}

bool ClaimEventRecorder::Due::operator<(const Due& other) const {
  return RankOf(order, since, ns, name) < RankOf(other.order, other.since, other.ns, other.name);
}

int ClaimEventRecorder::Step() {
  const absl::Time now = clock_.Now();
  const uint64_t pass = ++pass_;
  // What is due: claims never written or whose reason moved first, then repeats, oldest first.
  // Only as many as the bucket can write this pass are kept (a max-heap: the last to be written
  // on top); the rest wait for a later pass, as they would behind an empty bucket.
  const size_t budget = static_cast<size_t>(std::max(0.0, TokensAt(now)));
  std::vector<Due> due;
  auto offer = [&](int order, absl::Time since, const Analyzer::PendingView& c) {
    if (budget == 0) {
      return;
    }
    if (due.size() == budget) {
      const Due& last = due.front();
      if (RankOf(order, since, c.ns, c.name) >=
          RankOf(last.order, last.since, last.ns, last.name)) {
        return;
      }
      std::pop_heap(due.begin(), due.end());
      due.pop_back();
    }
    due.push_back(
        {order, since, std::string(c.ns), std::string(c.name), std::string(c.uid), c.reason});
    std::push_heap(due.begin(), due.end());
  };
  analyzer_.VisitPending([&](const Analyzer::PendingView& c) {
    auto w = written_.find(c.key);
    if (w != written_.end()) {
      w->second.pass = pass;  // still pending: remembered
    }
    if (now - c.created < options_.min_pending) {
      // Too young to say anything about; not forgotten if it was written before.
    } else if (w == written_.end() || w->second.uid != c.uid) {
      offer(0, c.created, c);
    } else if (w->second.reason != c.reason) {
      if (now - w->second.at >= options_.min_interval) {
        offer(0, c.created, c);
      }
    } else if (now - w->second.at >= options_.repeat) {
      offer(1, w->second.at, c);
    }
  });
  absl::erase_if(written_, [pass](const auto& entry) { return entry.second.pass != pass; });
  std::sort_heap(due.begin(), due.end());
  int writes = 0;
  // One scan per request shape per pass: at fleet scale most pending claims share a few shapes.
  Analyzer::FunnelCache funnels;
  for (const Due& c : due) {
    std::optional<ClaimExplanation> e =
        analyzer_.Explain(c.ns, c.name, &funnels, options_.scan_limit);
    if (!e.has_value() || e->state != ClaimState::kPending || !e->reason.has_value()) {
      continue;  // gone or allocated since the walk
    }
    if (!TakeToken(now)) {
      break;
    }
    if (gangs_ != nullptr) {
      e->gang = gangs_->GangOfClaim(c.ns, c.name);
    }
    // The reason the analyzer's series give (what the walk compares against next pass),
    // not one re-derived by the scan, so that the two can never make the pass write again.
    const std::string reason = EventReason(c.reason);
    const std::string note = PendingNote(*e);
    const std::string key = absl::StrCat(c.ns, "/", c.name);
    ++writes;
    auto w = written_.find(key);
    if (c.order == 1 && w != written_.end() && w->second.note == note &&
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
    written_[key] = Written{c.uid, c.reason, *name, note, 1, now, pass};
    Count(reason, "created");
  }
  return writes;
}

}  // namespace dralens::exporter::cluster
