// ClaimEventRecorder: Kubernetes Events on pending claims, where `kubectl get events` and
// `kubectl describe resourceclaim` show them.
//
// Each pass (Step, called by the leader only) reads the analyzer's pending claims and, per
// claim pending for at least `min_pending` (30 s: a claim the scheduler allocates at once gets
// none), writes at most:
//  - a new Event when the claim starts pending or its reason changes, at most one a minute
//    (`min_interval`) for a claim whose reason flaps (reason = the pending
//    reason in CamelCase, type Warning, or Normal for WaitingForPod; note = each request's
//    funnel, explain.h);
//  - after `repeat` (10 minutes) with the same reason: the same Event again as a series
//    (series.count + 1, series.lastObservedTime) when the funnel reads the same, else a new
//    Event with the new funnel.
// Writes are rate-limited fleet-wide (a token bucket of `qps` and `burst`); what the bucket
// does not allow waits for the next pass: first the claims never written or whose reason moved,
// longest pending first, then the repeats, longest unwritten first. A failed write is retried
// next pass. A pass walks the pending claims in place (Analyzer::VisitPending) and keeps only
// the few the bucket lets it write: O(pending) lookups and no copy of a claim that waits.
// A claim that stops pending is forgotten: if it pends again, it gets a new Event.
//
// dralens_cluster_claim_events_total{reason, result} counts the writes (created,
// series_updated, failed). Not thread-safe: one caller.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/gangs.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"

namespace dralens::exporter::cluster {

// An Event on a pending claim, as the recorder writes it.
struct ClaimEvent {
  std::string ns, claim, uid;
  std::string reason;  // "NoCapacity"
  std::string type;    // "Warning" or "Normal"
  std::string note;
  absl::Time time;
};

// Where the Events go: the API server (src/app/claim_event_writer.h) or a test.
class ClaimEventSink {
 public:
  virtual ~ClaimEventSink() = default;
  // Creates the Event; returns its name.
  virtual absl::StatusOr<std::string> Create(const ClaimEvent& event) = 0;
  // The Event `name` was observed again: sets its series to `count` observations, the last
  // at `last`. NotFound when the Event is gone (Events expire).
  virtual absl::Status UpdateSeries(const std::string& ns, const std::string& name, int32_t count,
                                    absl::Time last) = 0;
};

struct ClaimEventOptions {
  absl::Duration min_pending = absl::Seconds(30);
  // A claim whose reason flaps (capacity comes and goes) gets at most one Event per this.
  absl::Duration min_interval = absl::Minutes(1);
  absl::Duration repeat = absl::Minutes(10);
  double qps = 5;
  int burst = 25;
  // Classes with more devices than this are explained from the counts kept per request shape
  // (no breakdown of who holds the busy devices, no nearest miss): a scan costs O(devices).
  size_t scan_limit = 2000;
  // Clock for the repeat interval and the bucket; null: the real clock.
  common::Clock* clock = nullptr;
};

class ClaimEventRecorder {
 public:
  // `analyzer`, `sink`, `registry` and `gangs` (null where Workloads are not served; the notes
  // of a gang's claims then name the gang) must outlive the recorder.
  ClaimEventRecorder(Analyzer& analyzer, ClaimEventSink& sink, prometheus::Registry& registry,
                     ClaimEventOptions options, const GangTracker* gangs = nullptr);

  // One pass over the pending claims. Returns the number of writes made.
  int Step();
  // Forgets what was written (this replica stopped leading: the next leader may have written
  // since).
  void Reset();

 private:
  struct Written {
    std::string uid;
    PendingReason reason = PendingReason::kWaitingForPod;
    std::string event;  // name of the Event
    std::string note;
    int32_t count = 1;
    absl::Time at;
    uint64_t pass = 0;  // the last pass that saw the claim pending
  };
  // A claim due for a write this pass.
  struct Due {
    int order = 0;     // 0: never written, or its reason moved; 1: a repeat
    absl::Time since;  // order 0: when it was created; 1: when it was last written
    std::string ns, name, uid;
    PendingReason reason = PendingReason::kWaitingForPod;
    bool operator<(const Due& other) const;  // by RankOf
  };
  // Which of two due claims is written first: the smaller rank (order, then since, then
  // namespace and name).
  using Rank = std::tuple<int, absl::Time, absl::string_view, absl::string_view>;
  static Rank RankOf(int order, absl::Time since, absl::string_view ns, absl::string_view name);
  // What the bucket holds at `now` (its whole tokens: what a pass can write at most).
  double TokensAt(absl::Time now) const;
  bool TakeToken(absl::Time now);
  void Count(const std::string& reason, const char* result);

  Analyzer& analyzer_;
  ClaimEventSink& sink_;
  const GangTracker* gangs_;
  prometheus::Family<prometheus::Counter>& events_;
  const ClaimEventOptions options_;
  common::Clock& clock_;
  absl::flat_hash_map<std::string, Written> written_;  // by "ns/name"
  uint64_t pass_ = 0;
  double tokens_;
  absl::Time refilled_ = absl::InfinitePast();
};

}  // namespace dralens::exporter::cluster
