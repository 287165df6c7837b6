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
#include <httplib.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "driver/proto/dra/v1/api.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "src/common/clock.h"
#include "src/common/quantity.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "src/sim/kubelet.h"
#include "src/sim/workload.h"
#include "tests/bench/driver_util.h"
#include "tests/integration/subprocess.h"
#include "tests/testing/kubeconfig.h"

namespace {

namespace fs = std::filesystem;
using dralens::testing::Subprocess;
using nlohmann::json;

constexpr char kNode[] = "soak-node";
// Four H100 80GB for dynamic MIG, four A100 40GB (not Hopper: never dynamic MIG) for shares.
constexpr char kProfile[] = R"({"name": "soak", "gpus": [
  {"board": "h100-80gb", "count": 4}, {"board": "a100-40gb", "count": 4}]})";
// The node's crash points (driver/prepare/crash_points.h), armed in turn.
constexpr const char* kCrashSteps[] = {"after-started",
                                       "after-mig-created",
                                       "unprepare-after-cdi-removed",
                                       "after-cdi",
                                       "unprepare-after-mig-destroyed",
                                       "after-completed",
                                       "unprepare-after-checkpoint"};
constexpr char kCdiPrefix[] = "k8s.gpu.dralens.dev-claim_";

int64_t RssKiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    int64_t kib = 0;
    if (absl::StartsWith(line, "VmRSS:") &&
        absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(line.substr(6)), " kB"),
                         &kib)) {
      return kib;
    }
  }
  return -1;
}

int MetricsPort(const std::string& output) {
  std::smatch m;
  std::string last;
  std::regex re(R"(serving metrics"? address=\S+ port=(\d+))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re);
       it != std::sregex_iterator(); ++it) {
    last = (*it)[1];
  }
  return last.empty() ? 0 : std::stoi(last);
}

double Scrape(int port, const std::string& series) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(5, 0);
  auto res = c.Get("/metrics");
  if (!res || res->status != 200) {
    return -1;
  }
  for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
    if (absl::StartsWith(line, series + " ")) {
      double v = 0;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) {
        return v;
      }
    }
  }
  return -1;
}

// The sum of every sample of `family` whose labels contain `label` ("" for all), or -1.
double ScrapeSum(int port, const std::string& family, const std::string& label) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(5, 0);
  auto res = c.Get("/metrics");
  if (!res || res->status != 200) {
    return -1;
  }
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
    if (!absl::StartsWith(line, family + "{") || !absl::StrContains(line, label)) {
      continue;
    }
    double v = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) {
      sum += v;
    }
  }
  return sum;
}

// Kills a process with SIGKILL, from a thread of its own, the moment it commits its checkpoint
// (the atomic rename into `dir`) for the (skip+1)th time by a prepare (an entry new or changed)
// or, with `unprepare`, by an unprepare (an entry gone): armed once the node serves, the kill
// lands inside the NodePrepareResources or NodeUnprepareResources call that wrote it, before
// its answer (after PrepareStarted, after PrepareCompleted, or after the entry went). Which
// call is chosen, since each workload step finishes runs before it starts new ones: the first
// write after a restart is nearly always an unprepare's.
class CheckpointKiller {
 public:
  ~CheckpointKiller() { Disarm(); }

  using States = std::map<std::string, std::string>;  // checkpoint: uid -> state

  // `read_states` reads the checkpoint's claims; it is called on the killer's thread.
  bool Arm(pid_t pid, const std::string& dir, bool unprepare, int skip,
           std::function<States()> read_states) {
    Disarm();
    fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd_ < 0 || inotify_add_watch(fd_, dir.c_str(), IN_MOVED_TO) < 0) {
      return false;
    }
    stop_ = false;
    fired_ = false;
    before_ = read_states();
    thread_ =
        std::thread([this, pid, unprepare, skip, read_states = std::move(read_states)]() mutable {
          alignas(inotify_event) char buf[4096];
          while (!stop_) {
            pollfd p{fd_, POLLIN, 0};
            if (poll(&p, 1, 20) <= 0) {
              continue;
            }
            const ssize_t n = read(fd_, buf, sizeof(buf));
            for (ssize_t i = 0; i < n;) {
              const auto* e = reinterpret_cast<const inotify_event*>(buf + i);
              if (e->len > 0 && std::string(e->name) == "checkpoint.json") {
                States now = read_states();
                const bool gone = UnpreparedSince(now);
                if (gone == unprepare && skip-- == 0) {
                  kill(pid, SIGKILL);
                  fired_ = true;
                  unprepare_ = gone;
                  return;
                }
                before_ = std::move(now);
              }
              i += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
            }
          }
        });
    return true;
  }

  // Stops watching; returns whether it killed.
  bool Disarm() {
    stop_ = true;
    if (thread_.joinable()) {
      thread_.join();
    }
    if (fd_ >= 0) {
      close(fd_);
      fd_ = -1;
    }
    return fired_;
  }

  // Whether the write it killed at was an unprepare's (an entry gone), not a prepare's (an entry
  // new or changed). Valid after Disarm() returned true.
  bool unprepare() const { return unprepare_; }

 private:
  bool UnpreparedSince(const States& now) const {
    return std::any_of(before_.begin(), before_.end(),
                       [&](const auto& e) { return now.count(e.first) == 0; });
  }

  int fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{true};
  std::atomic<bool> fired_{false};
  States before_;  // the checkpoint before the write it watches for
  bool unprepare_ = false;
};

class Soak {
 public:
  explicit Soak(fs::path root) : root_(std::move(root)) {}

  bool Start(int otlp_down_port) {
    if (!api_.Start().ok()) {
      return false;
    }
    dralens::k8s::RestConfig config;
    config.server = api_.url();
    client_ = *dralens::k8s::RestClient::FromConfig(config);
    (void)client_->Create(
        dralens::k8s::kNodes, "",
        {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", kNode}}}});
    profile_ = (root_ / "profile.json").string();
    std::ofstream(profile_) << kProfile;
    kubeconfig_ = (root_ / "kubeconfig").string();
    dralens::testing::WriteKubeconfig(kubeconfig_, api_.url());
    env_ = {{"NODE_NAME", kNode},
            {"KUBECONFIG", kubeconfig_},
            {"OTEL_EXPORTER_OTLP_ENDPOINT", absl::StrCat("http://127.0.0.1:", otlp_down_port)},
            {"OTEL_BSP_SCHEDULE_DELAY", "500"}};
    cluster_ = std::make_unique<Subprocess>(
        std::vector<std::string>{DRALENS_BINARY, "cluster", "--metrics-address=127.0.0.1:0"}, env_);
    if (!cluster_->WaitForOutput("serving metrics", absl::Seconds(60))) {
      std::fprintf(stderr, "cluster role did not start:\n%s\n", cluster_->Output().c_str());
      return false;
    }
    cluster_port_ = MetricsPort(cluster_->Output());
    return StartNode() == Started::kServing;
  }

  enum class Started { kServing, kCrashedAtStart, kFailed };
  // Starts the node, with the crash point `crash_at` armed unless it is empty. An armed node
  // may hit it while it prepares restored claims again, before it serves: kCrashedAtStart.
  Started StartNode(const std::string& crash_at = "") {
    std::map<std::string, std::string> env = env_;
    if (!crash_at.empty()) {
      env["DRALENS_TEST_CRASH_AT"] = crash_at;
    }
    node_ = std::make_unique<Subprocess>(
        std::vector<std::string>{DRALENS_BINARY, "node", "--device-source=simulated",
                                 "--simulated-profile=" + profile_, "--dynamic-mig",
                                 "--consumable-capacity", "--metrics-address=127.0.0.1:0",
                                 "--kubelet-registry-dir=" + (root_ / "registry").string(),
                                 "--kubelet-plugins-dir=" + Plugins(), "--cdi-root=" + Cdi()},
        env);
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (!node_->WaitForOutput("kubelet plugin serving", absl::Milliseconds(100))) {
      if (NodeExited()) {
        if (!crash_at.empty()) {
          return Started::kCrashedAtStart;
        }
        std::fprintf(stderr, "node exited at start:\n%s\n", node_->Output().c_str());
        return Started::kFailed;
      }
      if (absl::Now() > give_up) {
        std::fprintf(stderr, "node did not start:\n%s\n", node_->Output().c_str());
        return Started::kFailed;
      }
    }
    node_port_ = MetricsPort(node_->Output());
    return dralens::sim::RegisterPlugin((root_ / "registry/gpu.dralens.dev-reg.sock").string()).ok()
               ? Started::kServing
               : Started::kFailed;
  }

  bool NodeExited() { return node_->Wait(absl::Milliseconds(1)) >= 0; }

  // Spans each node process dropped because the collector is down, summed over the run.
  double DroppedSpans() {
    return Scrape(node_port_, "dralens_otlp_spans_total{outcome=\"dropped_export_failed\"}");
  }

  void KillNode() { node_->Stop(SIGKILL, absl::Seconds(10)); }

  // Devices of this node's pool as the API server holds them now; remembers the memory of
  // those that allow several allocations.
  int PublishedDevices() {
    dralens::k8s::ListOptions mine;
    mine.field_selector = absl::StrCat("spec.nodeName=", kNode, ",spec.driver=gpu.dralens.dev");
    auto slices = client_->List(dralens::k8s::kResourceSlices, "", mine);
    if (!slices.ok()) {
      return -1;
    }
    int devices = 0;
    for (const json& slice : slices->items) {
      for (const json& d : slice["spec"].value("devices", json::array())) {
        ++devices;
        if (d.value("allowMultipleAllocations", false)) {
          auto memory = dralens::common::Quantity::Parse(d.value("capacity", json::object())
                                                             .value("memory", json::object())
                                                             .value("value", ""));
          if (memory.ok()) {
            shareable_memory_[d.value("name", "")] = *memory;
          }
        }
      }
    }
    return devices;
  }

  // What a starting kubelet does: delete the node's slices of this driver, then register the
  // plugin again. The API server's fault bursts hit these calls too, so each is retried, as the
  // kubelet retries; the clock starts once the wipe went through. Returns the seconds until the
  // pool holds `devices` devices again, or -1 when it did not within 60 s.
  double RestartKubelet(int devices) {
    dralens::k8s::ListOptions wipe;
    wipe.field_selector = absl::StrCat("spec.nodeName=", kNode, ",spec.driver=gpu.dralens.dev");
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (!client_->DeleteCollection(dralens::k8s::kResourceSlices, "", wipe).ok()) {
      if (absl::Now() > give_up) {
        return -1;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    const absl::Time start = absl::Now();
    const std::string socket = (root_ / "registry/gpu.dralens.dev-reg.sock").string();
    while (!dralens::sim::RegisterPlugin(socket).ok() && absl::Now() - start < absl::Seconds(10)) {
      absl::SleepFor(absl::Milliseconds(100));
    }
    while (absl::Now() - start < absl::Seconds(60)) {
      if (PublishedDevices() == devices) {
        return absl::ToDoubleSeconds(absl::Now() - start);
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return -1;
  }

  // The invariants; returns the violations.
  std::vector<std::string> Check() {
    std::vector<std::string> violations;
    std::map<std::string, std::string> completed;         // uid -> spec file
    std::map<std::string, std::string> holder;            // device -> uid, of exclusive holders
    std::map<std::string, std::set<std::string>> shares;  // device -> uid/shareID
    std::map<std::string, dralens::common::Quantity> consumed;  // device -> by its shares
    completed_migs_ = 0;
    std::ifstream in(Plugins() + "/gpu.dralens.dev/checkpoint.json");
    json file = in ? json::parse(in, nullptr, false) : json::object();
    if (file.is_discarded()) {
      violations.push_back("checkpoint does not parse");
      return violations;
    }
    const json claims = file.value("claims", json::object());
    for (const auto& [uid, claim] : claims.items()) {
      const bool done = claim.value("state", "") == "PrepareCompleted";
      if (done) {
        completed[uid] = claim.value("cdiSpecFile", "");
      }
      const json devices = claim.value("devices", json::array());
      for (const json& d : devices) {
        const std::string device = d.value("device", "");
        if (done && d.contains("dynamicMig")) {
          ++completed_migs_;
        }
        if (d.contains("shareID")) {
          const std::string share = absl::StrCat(uid, "/", d.value("shareID", ""));
          if (!shares[device].insert(share).second) {
            violations.push_back(absl::StrCat("device ", device, " holds share ", share, " twice"));
          }
          auto memory = dralens::common::Quantity::Parse(
              d.value("sharing", json::object()).value("consumedMemory", ""));
          if (!memory.ok() || !consumed[device].Add(*memory).ok()) {
            violations.push_back(
                absl::StrCat("share ", share, " of ", device, " records no consumed memory"));
          }
          continue;
        }
        auto [it, inserted] = holder.emplace(device, uid);
        if (!inserted && it->second != uid) {
          violations.push_back(
              absl::StrCat("device ", device, " held by ", it->second, " and ", uid));
        }
      }
    }
    for (const auto& [device, used] : consumed) {
      if (holder.count(device) > 0) {
        violations.push_back(absl::StrCat("device ", device, " held by ", holder[device],
                                          " and by shares of consumable capacity"));
      }
      auto memory = shareable_memory_.find(device);
      if (memory == shareable_memory_.end() || used > memory->second) {
        violations.push_back(absl::StrCat("shares of ", device, " consume ", used.String(),
                                          ", more than the device has"));
      }
    }
    std::set<std::string> specs;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(Cdi(), ec)) {
      specs.insert(e.path().filename().string());
    }
    for (const std::string& s : specs) {
      const std::string uid =
          s.substr(std::string(kCdiPrefix).size(), s.size() - std::string(kCdiPrefix).size() - 5);
      if (claims.count(uid) == 0) {
        violations.push_back(absl::StrCat("leaked CDI spec ", s));
      }
    }
    for (const auto& [uid, spec] : completed) {
      if (!spec.empty() && specs.count(spec) == 0) {
        violations.push_back(absl::StrCat("prepared claim ", uid, " lost its CDI spec"));
      }
    }
    prepared_ = static_cast<int>(completed.size());
    return violations;
  }

  // Whether the node's metrics tell the truth of the checkpoint (Check() read it last): the
  // prepared claims, and the MIG instances, all held by prepared claims. `why` says what differs.
  bool MetricsTrue(std::string* why) {
    const double claims = Scrape(node_port_, "dralens_node_prepared_claims");
    const double free_migs = ScrapeSum(node_port_, "dralens_mig_devices", "state=\"free\"");
    const double migs = ScrapeSum(node_port_, "dralens_mig_devices", "");
    *why = absl::StrFormat(
        "prepared claims %.0f (checkpoint %d), MIG instances %.0f of which free %.0f (prepared "
        "dynamic MIG devices in the checkpoint %d)",
        claims, prepared_, migs, free_migs, completed_migs_);
    return claims == prepared_ && free_migs == 0 && migs == completed_migs_;
  }

  // Seconds until the node's metrics tell the truth (MetricsTrue), or -1 when they did not
  // within `limit`; `why` says what differed last.
  double Convergence(absl::Duration limit, std::string* why) {
    const absl::Time start = absl::Now();
    while (true) {
      if (MetricsTrue(why)) {
        return absl::ToDoubleSeconds(absl::Now() - start);
      }
      if (absl::Now() - start >= limit) {
        return -1;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  // What Faults(round) injects, for reports.
  static constexpr int kFaultKinds = 5;
  static const char* FaultName(int round) {
    static constexpr const char* kNames[kFaultKinds] = {"500 burst", "429 burst", "watch drop",
                                                        "410 Gone", "slow responses"};
    return round < 0 ? "none" : kNames[round % kFaultKinds];
  }

  void Faults(int round) {
    using dralens::sim::FaultRule;
    switch (round % kFaultKinds) {
      case 0: {
        FaultRule rule;
        rule.kind = FaultRule::Kind::kStatus;
        rule.code = 500;
        rule.times = 20;
        api_.InjectFault(rule);
        break;
      }
      case 1: {
        FaultRule rule;
        rule.kind = FaultRule::Kind::kTooManyRequests;
        rule.retry_after_seconds = 1;
        rule.times = 20;
        api_.InjectFault(rule);
        break;
      }
      case 2:
        api_.DropWatches();
        break;
      case 3:
        api_.CompactHistory();
        api_.DropWatches();  // the resumed watches get 410 Gone and relist
        break;
      case 4: {
        // A loaded API server: the next responses, whoever asks, take 3 s each.
        FaultRule rule;
        rule.kind = FaultRule::Kind::kSlow;
        rule.delay = absl::Seconds(3);
        rule.times = 20;
        api_.InjectFault(rule);
        break;
      }
    }
  }

  std::string Plugins() const { return (root_ / "plugins").string(); }
  std::string Cdi() const { return (root_ / "cdi").string(); }
  std::string DraSocket() const { return Plugins() + "/gpu.dralens.dev/dra.sock"; }

  dralens::sim::ApiServer api_;
  std::unique_ptr<dralens::k8s::RestClient> client_;
  std::unique_ptr<Subprocess> node_;
  std::unique_ptr<Subprocess> cluster_;
  int node_port_ = 0;
  int cluster_port_ = 0;
  int prepared_ = 0;
  int completed_migs_ = 0;  // dynamic MIG devices of prepared claims, as Check() read them

  // The claims of the checkpoint on disk: uid -> state.
  std::map<std::string, std::string> States() {
    std::ifstream in(Plugins() + "/gpu.dralens.dev/checkpoint.json");
    json file = in ? json::parse(in, nullptr, false) : json::object();
    std::map<std::string, std::string> out;
    const json claims = file.is_discarded() ? json::object() : file.value("claims", json::object());
    for (const auto& [uid, claim] : claims.items()) {
      out[uid] = claim.value("state", "");
    }
    return out;
  }

 private:
  fs::path root_;
  std::string profile_;
  std::map<std::string, dralens::common::Quantity> shareable_memory_;  // device -> memory
  std::string kubeconfig_;
  std::map<std::string, std::string> env_;
};

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
