// LeaderElector: leader election through a coordination.k8s.io/v1 Lease, as client-go does it.
//
// Each candidate loops every `retry_period`: it reads the Lease; if it holds it, it renews
// (renewTime); if the Lease is free (no holder) or expired, it takes it with an optimistic PUT
// (the resourceVersion decides between racing candidates). Expiry is judged on the candidate's
// own clock, never on timestamps written by another process: a Lease is expired when its
// record (holder, renewTime, transitions) has not changed for `lease_duration` since this
// candidate last saw it change. A leader that fails to renew for `renew_deadline` steps down.
// Stop() releases a held Lease (clears the holder) so that a standby takes over at once.
//
// Thread-safe. Callbacks run on the elector's thread, never concurrently with each other.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "src/common/clock.h"
#include "src/k8s/client.h"

namespace dralens::k8s {

struct LeaderElectionOptions {
  std::string lease_namespace = "default";
  std::string lease_name = "dralens-cluster";
  std::string identity;  // required: unique per candidate (e.g. the pod name)
  absl::Duration lease_duration = absl::Seconds(15);
  absl::Duration renew_deadline = absl::Seconds(10);
  absl::Duration retry_period = absl::Seconds(2);
  // Time source for the loop and for expiry; nullptr means the real clock. Not owned.
  common::Clock* clock = nullptr;
  std::function<void()> on_started_leading;
  std::function<void()> on_stopped_leading;
};

class LeaderElector {
 public:
  // `client` must outlive the elector. Fails on invalid options (empty identity, durations
  // out of order: retry_period < renew_deadline < lease_duration).
  static absl::StatusOr<std::unique_ptr<LeaderElector>> Create(KubeClient& client,
                                                               LeaderElectionOptions options);
  ~LeaderElector();  // Stop()
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  void Start();
  // Ends the loop; a leader releases the Lease and its on_stopped_leading runs. Idempotent.
  void Stop();
  bool IsLeader() const { return leader_.load(); }
  const std::string& identity() const { return options_.identity; }

  // One round of the loop (read, then acquire or renew). Exposed for tests that drive rounds
  // by hand; returns whether this candidate holds the Lease afterwards.
  bool TryAcquireOrRenewForTest() { return TryAcquireOrRenew(); }

 private:
  LeaderElector(KubeClient& client, LeaderElectionOptions options);
  void Run();
  bool TryAcquireOrRenew();
  void SetLeader(bool leader);
  void Release();
  nlohmann::json LeaseObject(const nlohmann::json& current, bool acquire) const;

  KubeClient& client_;
  const LeaderElectionOptions options_;
  common::Clock& clock_;
  std::atomic<bool> leader_{false};
  std::atomic<bool> stopping_{false};
  // Loop thread only.
  std::string observed_record_;
  absl::Time observed_time_ = absl::InfinitePast();
  absl::Time last_renew_ = absl::InfinitePast();
  std::unique_ptr<std::thread> thread_;
  absl::Mutex run_mu_;  // serialises rounds between the loop and Stop()
};

using LeaderElectorPtr = std::unique_ptr<LeaderElector>;

}  // namespace dralens::k8s
