// soak_driver: the demo's workload against real `dralens node` and `dralens cluster` processes
// while everything around them fails, with the invariants checked after every recovery.
//
// The node runs as a real node would be configured: four H100 80GB in dynamic-MIG mode (every
// MIG profile and placement published as partitionable devices, instances made at prepare) and
// four A100 40GB published for consumable capacity (several claims each take 10Gi of a GPU's
// memory with a share ID). The workload asks for whole GPUs, MIG slices, time-sliced and MPS
// GPUs and memory shares.
//
// Runs for --minutes (default 5; `make soak SOAK_MINUTES=60` for the hour). Throughout:
//   - the embedded API server answers bursts of 500s and 429s, drops watches, answers 410 Gone
//     and answers slowly (3 s per response), every 15 s, in turn;
//   - the OTLP collector both roles export to is down (a closed port) for the whole run;
//   - the node role is killed with SIGKILL every --kill-every seconds (default 60) and started
//     again, as its DaemonSet would be. Of every three restarts, one arms the next of the node's
//     crash points (DRALENS_TEST_CRASH_AT, in turn: each step of prepare and unprepare, MIG
//     instance made or destroyed included) and one arms a killer thread that sends SIGKILL the
//     moment the node commits its checkpoint for a prepare or, the next time, an unprepare (the
//     1st or 2nd such write), so that the next kill lands inside a NodePrepareResources or
//     NodeUnprepareResources call of the workload (a mid-call kill: that call failed) or inside
//     the restore of a prepared claim at start (counted apart); the node is then started again
//     unarmed;
//   - the kubelet restarts every --kubelet-restart-every seconds (default 45): it deletes every
//     ResourceSlice of the node and driver, then registers the plugin again, whatever API fault
//     burst is in force; the node's pool must be published again within 60 s, and the time is
//     reported with the fault burst injected last (a 429 burst tells every client to wait).
// After every restart, and at the end once every claim is unprepared:
//   - every CDI spec on disk belongs to a claim the checkpoint records as prepared, and every
//     prepared claim has its spec (nothing leaked, nothing lost);
//   - no device is held by two claims, except by shares of consumable capacity, each with a
//     share ID, whose consumed memory fits the device;
//   - within 2 s of the restart the node's dralens_node_prepared_claims equals the checkpoint,
//     and its dralens_mig_devices shows exactly the MIG instances of the prepared claims and
//     none free (a free instance is a leak: the simulated GPUs live in the node process, so a
//     kill takes the instances along, and what the node shows after a restart is what it made
//     again for the restored claims); longer is a violation;
// and the node's and cluster role's RSS are sampled each minute: the last sample may not exceed
// the first by more than half plus 8 MiB. Prints the figures; exits 1 if an invariant failed.
// Not a ctest test (it is long); a short run is quick to try:
//
//   ./build/tests/bench/soak_driver --minutes=3 --kill-every=20
#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "driver/proto/dra/v1/api.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "src/common/clock.h"
#include "src/sim/workload.h"
#include "tests/bench/driver_util.h"
#include "tests/bench/soak_harness.h"
#include "tests/bench/soak_probes.h"

namespace {

namespace fs = std::filesystem;
using dralens::bench::soak::CheckpointKiller;
using dralens::bench::soak::kNode;
using dralens::bench::soak::RssKiB;
using dralens::bench::soak::Soak;
using nlohmann::json;

// The node's crash points (driver/prepare/crash_points.h), armed in turn.
constexpr const char* kCrashSteps[] = {"after-started",
                                       "after-mig-created",
                                       "unprepare-after-cdi-removed",
                                       "after-cdi",
                                       "unprepare-after-mig-destroyed",
                                       "after-completed",
                                       "unprepare-after-checkpoint"};

}  // namespace

int main(int argc, char** argv) {
  const int minutes = dralens::bench::IntFlag(argc, argv, "minutes", 5);
  const int kill_every = dralens::bench::IntFlag(argc, argv, "kill-every", 60);
  const int kubelet_every = dralens::bench::IntFlag(argc, argv, "kubelet-restart-every", 45);
  std::string tmpl = (fs::temp_directory_path() / "dralens-soak-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    return 1;
  }
  Soak soak(tmpl);
  if (!soak.Start(/*otlp_down_port=*/1)) {
    return 1;
  }
  dralens::sim::WorkloadOptions options;
  options.namespace_name = "soak";
  options.claim_interval = absl::Milliseconds(250);
  options.mean_pod_duration = absl::Seconds(10);
  options.max_claims = 24;
  options.memory_shares = true;
  options.plugin_sockets[kNode] = soak.DraSocket();
  dralens::sim::Workload workload(options, *soak.client_, dralens::common::RealClock());
  if (!workload.Setup().ok()) {
    return 1;
  }

  std::vector<std::string> violations;
  std::vector<double> convergence;
  std::vector<double> republished;  // seconds from each kubelet wipe to the pool back
  std::string republish_log;        // each of them, with the fault burst injected last
  const int devices = soak.PublishedDevices();
  std::vector<std::pair<int64_t, int64_t>> rss;  // node, cluster per minute
  int kills = 0;
  int periodic_kills = 0;
  int mid_prepare = 0;     // the armed node died inside a NodePrepareResources call
  int mid_unprepare = 0;   // ... inside a NodeUnprepareResources call
  int at_start = 0;        // ... while preparing restored claims again at start
  int not_reached = 0;     // armed crash points the workload did not reach before the next kill
  int between_calls = 0;   // a mid-call kill whose call did not fail: it landed after the answer
  int by_crash_point = 0;  // of the mid-call kills, those of a crash point
  CheckpointKiller killer;
  bool watching = false;  // the killer watches the running node
  std::map<std::string, int> crashes_by_step;
  size_t next_step = 0;
  std::string armed;  // the running node's crash point, "" when none
  std::vector<int> bursts(Soak::kFaultKinds, 0);
  double dropped = 0;

  // The invariants once the node is back, and the metrics within 2 s.
  auto recover = [&](const std::string& when) {
    for (std::string& v : soak.Check()) {
      violations.push_back(absl::StrCat(when, ": ", v));
    }
    std::string why;
    const double c = soak.Convergence(absl::Seconds(2), &why);
    convergence.push_back(c);
    if (c < 0) {
      violations.push_back(absl::StrCat(when,
                                        ": metrics not equal to the truth 2 s after the "
                                        "restart: ",
                                        why));
    }
  };
  // Starts the node with `crash_at` armed; when the armed node dies before it serves (the crash
  // point hit while restored claims whose MIG instance vanished are undone and prepared again),
  // it is started again unarmed.
  auto restart = [&](std::string crash_at, const std::string& when) {
    Soak::Started started = soak.StartNode(crash_at);
    while (started == Soak::Started::kCrashedAtStart) {
      ++kills;
      ++at_start;
      ++crashes_by_step[crash_at];
      // What a kill leaves on disk is checked once the node is back, not before.
      crash_at.clear();
      started = soak.StartNode();
    }
    if (started != Soak::Started::kServing) {
      violations.push_back(absl::StrCat(when, ": node did not restart"));
      return false;
    }
    armed = crash_at;
    recover(when);
    return true;
  };
  auto watch = [&] {
    watching = killer.Arm(soak.node_->pid(), soak.Plugins() + "/gpu.dralens.dev",
                          /*unprepare=*/periodic_kills / 3 % 2 == 1,
                          /*skip=*/periodic_kills / 6 % 2, [&soak] { return soak.States(); });
    if (!watching) {
      violations.push_back("could not watch the checkpoint");
    }
  };

  const absl::Time start = absl::Now();
  absl::Time next_kill = start + absl::Seconds(kill_every);
  absl::Time next_kubelet = start + absl::Seconds(kubelet_every);
  absl::Time next_fault = start + absl::Seconds(15);
  absl::Time next_sample = start + absl::Minutes(1);
  int fault_round = 0;
  while (absl::Now() - start < absl::Minutes(minutes)) {
    const dralens::sim::Workload::Stats before = workload.stats();
    (void)workload.Step();
    const dralens::sim::Workload::Stats after = workload.stats();
    absl::Time now = absl::Now();
    if ((!armed.empty() || watching) && soak.NodeExited()) {
      // The crash point went off, or the killer fired, inside a call of this step; the call
      // failed unless the kill came after its answer.
      ++kills;
      std::string how = armed;
      bool unprepare = absl::StartsWith(armed, "unprepare-");
      if (watching) {
        killer.Disarm();
        watching = false;
        how = "SIGKILL at a checkpoint write";
        unprepare = killer.unprepare();
      } else {
        ++crashes_by_step[armed];
      }
      const bool failed = after.prepare_errors > before.prepare_errors ||
                          after.unprepare_errors > before.unprepare_errors;
      if (!failed) {
        ++between_calls;
      } else {
        ++(unprepare ? mid_unprepare : mid_prepare);
        by_crash_point += armed.empty() ? 0 : 1;
      }
      if (!restart("", absl::StrCat("after mid-call kill (", how, ", kill ", kills, ")"))) {
        break;
      }
      now = absl::Now();
      next_kill = now + absl::Seconds(kill_every);
    }
    if (now >= next_fault) {
      ++bursts[fault_round % Soak::kFaultKinds];
      soak.Faults(fault_round++);
      next_fault = now + absl::Seconds(15);
    }
    if (now >= next_kill) {
      dropped += std::max(0.0, soak.DroppedSpans());
      not_reached += armed.empty() && !watching ? 0 : 1;
      killer.Disarm();
      watching = false;
      soak.KillNode();
      ++kills;
      ++periodic_kills;
      // Of every three restarts, one arms the next crash point and one the killer, so that the
      // next kill lands inside a call.
      const std::string arm =
          periodic_kills % 3 == 1 ? kCrashSteps[next_step++ % std::size(kCrashSteps)] : "";
      if (!restart(arm, absl::StrCat("after kill ", kills))) {
        break;
      }
      if (periodic_kills % 3 == 2) {
        watch();
      }
      next_kill = absl::Now() + absl::Seconds(kill_every);
    }
    if (now >= next_kubelet) {
      // The API faults of this round are still in force: the node must get there through them.
      const double back = soak.RestartKubelet(devices);
      republished.push_back(back);
      absl::StrAppend(&republish_log, back < 0 ? "never" : absl::StrFormat("%.3fs", back), " (",
                      Soak::FaultName(fault_round - 1), ") ");
      if (back < 0) {
        violations.push_back(absl::StrCat("kubelet restart ", republished.size(),
                                          ": pool not republished within 60 s"));
      }
      next_kubelet = absl::Now() + absl::Seconds(kubelet_every);
    }
    if (now >= next_sample) {
      rss.emplace_back(RssKiB(soak.node_->pid()), RssKiB(soak.cluster_->pid()));
      next_sample = now + absl::Minutes(1);
    }
    absl::SleepFor(options.claim_interval);
  }
  const double ran_minutes = absl::ToDoubleMinutes(absl::Now() - start);
  workload.Stop();
  soak.api_.ClearFaults();
  const dralens::sim::Workload::Stats stats = workload.stats();
  if (!armed.empty() || watching) {
    // The drain must not set off the crash point or the killer: start the node unarmed.
    not_reached += soak.NodeExited() ? 0 : 1;
    killer.Disarm();
    soak.KillNode();
    ++kills;
    (void)restart("", "before the drain");
  }

  // Drain: unprepare whatever the checkpoint holds, as the kubelet would once pods are gone.
  (void)soak.Check();
  {
    std::ifstream in(soak.Plugins() + "/gpu.dralens.dev/checkpoint.json");
    json file = in ? json::parse(in, nullptr, false) : json::object();
    auto stub = ::k8s::io::kubelet::pkg::apis::dra::v1::DRAPlugin::NewStub(
        grpc::CreateChannel("unix://" + soak.DraSocket(), grpc::InsecureChannelCredentials()));
    const json claims = file.value("claims", json::object());
    for (const auto& [uid, claim] : claims.items()) {
      ::k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesRequest request;
      auto* c = request.add_claims();
      c->set_uid(uid);
      c->set_namespace_(claim.value("namespace", ""));
      c->set_name(claim.value("name", ""));
      ::k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesResponse response;
      grpc::ClientContext context;
      if (!stub->NodeUnprepareResources(&context, request, &response).ok() ||
          !response.claims().at(uid).error().empty()) {
        violations.push_back(absl::StrCat("final unprepare of ", uid, " failed"));
      }
    }
  }
  for (std::string& v : soak.Check()) {
    violations.push_back(absl::StrCat("at the end: ", v));
  }
  {
    std::string why;
    if (soak.Convergence(absl::Seconds(2), &why) < 0) {
      violations.push_back(absl::StrCat("at the end: metrics not equal to the truth: ", why));
    }
  }
  std::error_code ec;
  if (!fs::is_empty(soak.Cdi(), ec) && !ec) {
    violations.push_back("CDI specs left after unpreparing everything");
  }
  rss.emplace_back(RssKiB(soak.node_->pid()), RssKiB(soak.cluster_->pid()));
  dropped += std::max(0.0, soak.DroppedSpans());
  const double node_exit = soak.node_->Stop(SIGTERM, absl::Seconds(15));
  const double cluster_exit = soak.cluster_->Stop(SIGTERM, absl::Seconds(15));

  // RSS flat: the last sample within half plus 8 MiB of the first.
  const auto grew = [](int64_t first, int64_t last) {
    return first > 0 && last > first + first / 2 + 8 * 1024;
  };
  if (grew(rss.front().first, rss.back().first)) {
    violations.push_back(absl::StrCat("node RSS grew from ", rss.front().first / 1024, " to ",
                                      rss.back().first / 1024, " MiB"));
  }
  if (grew(rss.front().second, rss.back().second)) {
    violations.push_back(absl::StrCat("cluster role RSS grew from ", rss.front().second / 1024,
                                      " to ", rss.back().second / 1024, " MiB"));
  }

  std::printf(
      "soak: %.1f min (%d asked), %d kills: %d periodic, %d mid-call (%d in "
      "NodePrepareResources, %d in NodeUnprepareResources; %d by a crash point, %d by a "
      "SIGKILL at the call's checkpoint write), %d while preparing restored claims at "
      "start, %d after a call's answer; %d armed kills not reached before the next one\n",
      ran_minutes, minutes, kills, periodic_kills, mid_prepare + mid_unprepare, mid_prepare,
      mid_unprepare, by_crash_point, mid_prepare + mid_unprepare - by_crash_point, at_start,
      between_calls, not_reached);
  std::string steps;
  for (const char* step : kCrashSteps) {
    absl::StrAppend(&steps, step, " ", crashes_by_step[step], ", ");
  }
  std::printf("crash points hit: %s\n", std::string(absl::StripSuffix(steps, ", ")).c_str());
  std::string kinds;
  for (int k = 0; k < Soak::kFaultKinds; ++k) {
    absl::StrAppend(&kinds, k > 0 ? ", " : "", Soak::FaultName(k), " ", bursts[k]);
  }
  std::printf("API fault bursts: %d (%s)\n", fault_round, kinds.c_str());
  std::printf(
      "workload: %d claims, %d allocated, %d prepares (%d MIG slices made at prepare, %d memory "
      "shares), %d prepare errors (node down or API faults, retried), %d unprepares\n",
      stats.created, stats.allocated, stats.prepared, stats.prepared_mig, stats.prepared_share,
      stats.prepare_errors, stats.unprepared);
  std::string conv;
  for (double c : convergence) {
    absl::StrAppend(&conv, c < 0 ? "never" : absl::StrCat(static_cast<int>(c * 1000), "ms"), " ");
  }
  std::printf(
      "metrics (prepared claims, MIG instances) equal to the truth after each restart in: "
      "%s(limit 2 s)\n",
      conv.c_str());
  std::printf("kubelet restarts: %zu, pool of %d devices republished in: %s\n", republished.size(),
              devices, dralens::bench::Percentiles(republished, "s").c_str());
  std::printf("  each (fault burst injected last): %s\n", republish_log.c_str());
  std::string mem;
  for (const auto& [node, cluster] : rss) {
    absl::StrAppend(&mem, node / 1024, "/", cluster / 1024, " ");
  }
  std::printf("RSS MiB per minute (node/cluster), the last at the end: %s\n", mem.c_str());
  std::printf("RSS at start and end: node %lld -> %lld MiB, cluster role %lld -> %lld MiB\n",
              static_cast<long long>(rss.front().first / 1024),
              static_cast<long long>(rss.back().first / 1024),
              static_cast<long long>(rss.front().second / 1024),
              static_cast<long long>(rss.back().second / 1024));
  std::printf("spans the node dropped because the collector was down: %.0f\n", dropped);
  std::printf("clean exits: node %.0f, cluster %.0f\n", node_exit, cluster_exit);
  std::printf("invariant violations: %zu\n", violations.size());
  for (const std::string& v : violations) {
    std::printf("  %s\n", v.c_str());
  }
  fs::remove_all(tmpl, ec);
  return violations.empty() ? 0 : 1;
}
