// The demo's workload: a stand-in for users, the scheduler and the kubelet, so that every
// metric, span, dashboard and alert of `dralens demo` has live data.
//
// Each step (every `claim_interval`):
//   1. pods whose run is over are finished: the kubelet stand-in calls NodeUnprepareResources
//      on the node's real dra.sock, the pods are deleted and, most of the time, the claim too;
//      some claims keep their allocation for a while with no pod (stranded capacity);
//   2. one new claim of a seeded random kind is created, with its pods (none for some claims,
//      two for shared claims): full GPUs, MIG profiles, time-sliced and MPS configs, requests
//      no device can ever satisfy and, with memory_shares, 10Gi shares of a GPU's memory;
//   3. every pending claim that has pods is allocated by the scheduler stand-in (scheduler.h)
//      if devices fit, by the cluster analyzer's rules (src/fit/device_fit.h); then the claim is
//      reserved for its pods, the pods are bound, NodePrepareResources is called once per pod
//      (as the kubelet does), and the pods run for an exponentially distributed time.
//
// Runs are reproducible for a seed, apart from timing. The objects live in one namespace, or
// in turn in each of team_namespaces.
//
// Thread-safety: Setup and Step are not concurrent with each other; Start runs Step on a thread
// of its own until Stop. stats() may be called from any thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "src/common/clock.h"
#include "src/k8s/client.h"
#include "src/sim/scheduler.h"

namespace dralens::sim {

struct WorkloadOptions {
  std::string driver_name = "gpu.dralens.dev";
  std::string namespace_name = "demo";
  // When set, claims (with their pods) go to these namespaces in turn, as several teams' would;
  // namespace_name is then unused.
  std::vector<std::string> team_namespaces;
  uint64_t seed = 1;
  absl::Duration claim_interval = absl::Seconds(2);
  absl::Duration mean_pod_duration = absl::Seconds(60);
  int max_claims = 32;  // claims alive at once; no new ones beyond it
  // Node name -> the plugin's dra.sock, dialled as the node's kubelet would.
  std::map<std::string, std::string> plugin_sockets;
  // Also make claims for a 10Gi share of a GPU's memory (consumable capacity, a node's
  // --consumable-capacity). They are placed only on devices published with
  // allowMultipleAllocations, with a share ID and the consumed memory in the allocation, and the
  // other kinds never go there (the planner refuses to mix shares with other holders). Off, the
  // mix and its seeded sequence are as before.
  bool memory_shares = false;
  // Also make claims for two full GPUs of one node. The scheduler stand-in places them without
  // regard to topology (see scheduler.h), so on a two-socket node some land across NUMA nodes.
  // Drawn after the mix and the memory shares, so the sequences without it stay as they were;
  // the first claim of a run is one.
  bool two_gpu_claims = false;
  // The GPU load of a claim's pods: called with the node, the claim's UID and a utilisation
  // (0..1) when its pods start running, and with nullopt when they stop. About a quarter of the
  // runs sit idle (below 3 %), as forgotten notebooks and stuck jobs do; the others keep their
  // GPU 35-95 % busy. Drawn from a stream of its own, so the claims made stay those of the seed.
  // Unset: no load.
  std::function<void(const std::string& node, const std::string& claim_uid,
                     std::optional<double> utilization)>
      pod_load;
};

// The kinds of claim the generator makes, with their weights in the mix.
enum class WorkloadKind {
  kFullGpu,
  kMig1g,
  kMig2g,
  kMig3g,
  kTimeSliced,
  kMps,
  kShared,         // one claim, two pods
  kUnsatisfiable,  // asks for more memory than any GPU has
  kNoPod,          // created ahead of its pod, which never comes
  kMemoryShare,    // 10Gi of a GPU's memory through consumable capacity (memory_shares only)
  kTwoGpu,         // two full GPUs of one node (two_gpu_claims only)
};
absl::string_view ToString(WorkloadKind kind);

// The DeviceClasses the workload uses (created by Setup): full GPUs, MIG devices, and full GPUs
// time-sliced by class config.
std::vector<nlohmann::json> WorkloadDeviceClasses(const std::string& driver);

class Workload {
 public:
  // `client` and `clock` must outlive the workload.
  Workload(WorkloadOptions options, k8s::KubeClient& client, common::Clock& clock);
  ~Workload();  // Stop()
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;

  // Creates the namespace and the DeviceClasses (AlreadyExists is fine).
  absl::Status Setup();
  // One round, as described at the top. Errors of single objects are logged and counted, not
  // returned; an error listing the slices is returned.
  absl::Status Step();
  void Start();
  void Stop();  // idempotent

  struct Stats {
    int created = 0;
    int allocated = 0;
    int prepared = 0;        // successful NodePrepareResources claim entries
    int prepared_mig = 0;    // of them, MIG slices
    int prepared_share = 0;  // of them, memory shares (consumable capacity)
    int prepare_errors = 0;
    int unprepared = 0;
    int unprepare_errors = 0;  // failed NodeUnprepareResources calls (retried next step)
    int finish_errors = 0;     // ends of claims (unprepare, pods, claim) that failed, retried
    int deleted = 0;
    int pending = 0;    // alive, not allocated
    int running = 0;    // allocated with running pods
    int lingering = 0;  // allocated, no pod
  };
  Stats stats() const;

 private:
  enum class State { kPending, kAllocated, kRunning, kLingering };
  struct Tracked {
    std::string ns;
    std::string name;
    std::string uid;
    WorkloadKind kind = WorkloadKind::kFullGpu;
    std::vector<std::string> pods;
    State state = State::kPending;
    std::string node;
    std::vector<Placement> held;
    absl::Time created;
    absl::Time until;  // end of the run, of the lingering, or of a hopeless wait
  };
  WorkloadKind PickKind();
  absl::Status CreateClaim(absl::Time now);
  absl::Status Allocate(Tracked& claim, const Scheduler::View& view, absl::Time now);
  absl::Status Prepare(Tracked& claim, absl::Time now);
  absl::Status Finish(Tracked& claim, absl::Time now);
  absl::Status DeleteClaim(const Tracked& claim);
  absl::Status SetPodPhase(const std::string& ns, const std::string& pod, const std::string& phase,
                           const std::string& node);

  const WorkloadOptions options_;
  k8s::KubeClient& client_;
  common::Clock& clock_;
  Scheduler scheduler_;
  // Two streams: the claims made depend on the seed alone; run times and lingering also on
  // what could be scheduled.
  std::mt19937_64 kind_rng_;
  std::mt19937_64 run_rng_;
  std::mt19937_64 load_rng_;
  int serial_ = 0;
  std::vector<Tracked> claims_;

  mutable absl::Mutex stats_mu_;
  Stats stats_ ABSL_GUARDED_BY(stats_mu_);

  absl::Notification stop_;
  std::unique_ptr<std::thread> thread_;
};

}  // namespace dralens::sim
