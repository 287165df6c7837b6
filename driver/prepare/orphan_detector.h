// OrphanDetector: finds prepared claims that nobody will unprepare.
//
// The kubelet unprepares a claim when the last pod using it is gone. If the kubelet lost track
// of it (its own state wiped, a node upgrade, a bug), the claim stays in this node's
// checkpoint and its devices stay held — while the scheduler, which reads the API server,
// believes them free. Check() looks at every claim in the checkpoint (through the ClaimLedger)
// and fetches its ResourceClaim. A claim is orphaned when
//   - gone:          the ResourceClaim does not exist;
//   - replaced:      a ResourceClaim of that name exists with another UID;
//   - not_allocated: it has no allocation, or its allocation no longer holds every device the
//                    claim holds here (same driver, this node's pool, same device name).
// A claim whose fetch fails otherwise is not judged this time (its orphan status, if any, and
// its age stay as they were); the check counts as an error.
//
// Metrics (updated by each check, never at scrape time):
//   dralens_node_orphaned_claims{reason}                        orphans now, by reason
//   dralens_node_orphaned_claim_age_seconds{namespace,claim,uid}  one series per orphan: time
//       since a check first found it orphaned (by this process), deleted when it is not
//   dralens_node_orphan_checks_total{result}                    ok | error
//   dralens_node_orphans_unprepared_total{result}               ok | error
//
// With `unprepare_after` set, an orphan found orphaned by every check for at least that long is
// unprepared through the ClaimHandler — the very path of the kubelet's NodeUnprepareResources,
// so the CDI spec, the checkpoint entry, MIG instances and sharing settings are released the
// same way, the state change goes through the ClaimLedger, and the claim's span records it.
// Each one is logged and counted. Off by default: an orphan is reported, not touched.
//
// Run() checks at once and then every `interval` (Clock time; the loop looks at the Clock at
// least every `poll_interval` of real time, so a test's FakeClock releases it).
//
// Thread-safety: Check() calls are serialised; every public method is thread-safe.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "driver/prepare/claim_handler.h"
#include "driver/prepare/claim_ledger.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/common/periodic.h"
#include "src/k8s/client.h"

namespace dralens::driver::prepare {

struct OrphanDetectorOptions {
  std::string driver_name;
  std::string pool_name;  // this node's pool: the node name
  absl::Duration interval = absl::Minutes(1);
  // Unprepare orphans after they stayed orphaned this long; nullopt: never.
  std::optional<absl::Duration> unprepare_after;
  absl::Duration poll_interval = absl::Seconds(1);
};

// One orphan, as the last check saw it.
struct Orphan {
  std::string namespace_name;
  std::string name;
  std::string uid;
  std::string reason;  // gone | replaced | not_allocated
  absl::Time since;    // when a check first found it orphaned
  bool operator==(const Orphan&) const = default;
};

struct OrphanCheckResult {
  int checked = 0;              // claims looked at
  int errors = 0;               // claims whose fetch failed (not judged)
  std::vector<Orphan> orphans;  // orphaned after this check, by UID
  int unprepared = 0;           // orphans unprepared by this check
  int unprepare_errors = 0;
};

class OrphanDetector {
 public:
  // Not owned; all must outlive the detector. `unprepare` is the kubelet's entry point.
  OrphanDetector(OrphanDetectorOptions options, k8s::KubeClient& client, ClaimLedger& ledger,
                 ClaimHandler& unprepare, common::Clock& clock, prometheus::Registry& registry);
  ~OrphanDetector();  // Stop()
  OrphanDetector(const OrphanDetector&) = delete;
  OrphanDetector& operator=(const OrphanDetector&) = delete;

  // One check of every claim in the checkpoint; see the top of this file.
  OrphanCheckResult Check();

  void Run();   // idempotent
  void Stop();  // waits for a check in progress; idempotent

  // The orphans after the last check, by UID.
  std::vector<Orphan> Orphans() const;

 private:
  // The reason `entry` (the checkpoint's claim `uid`) is orphaned, "" when it is not, or an
  // error when the API server could not tell.
  absl::StatusOr<std::string> Judge(const std::string& uid, const CheckpointClaim& entry);
  void Export(const std::map<std::string, Orphan>& orphans, absl::Time now);

  const OrphanDetectorOptions options_;
  k8s::KubeClient& client_;
  ClaimLedger& ledger_;
  ClaimHandler& unprepare_;
  common::Clock& clock_;
  prometheus::Family<prometheus::Gauge>& orphaned_;
  prometheus::Family<prometheus::Gauge>& age_;
  prometheus::Family<prometheus::Counter>& checks_;
  prometheus::Family<prometheus::Counter>& unprepared_;

  absl::Mutex check_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // serialises Check()
  // Age series exported, by UID.
  std::map<std::string, prometheus::Gauge*> age_series_ ABSL_GUARDED_BY(check_mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, Orphan> orphans_ ABSL_GUARDED_BY(mu_);
  common::Periodic loop_;  // last: stopped (destroyed) before the state Check() uses
};

}  // namespace dralens::driver::prepare
