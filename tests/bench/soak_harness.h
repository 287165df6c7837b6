// The soak driver's world: the embedded API server with its fault bursts, the real `dralens
// cluster` and `dralens node` processes (the node on four H100s in dynamic MIG and four A100s
// for memory shares), the kubelet's restart, and the invariants checked after every recovery
// (soak_driver.cc says which).
#pragma once

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "src/common/quantity.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "src/sim/kubelet.h"
#include "tests/bench/soak_probes.h"
#include "tests/integration/subprocess.h"
#include "tests/testing/kubeconfig.h"

namespace dralens::bench::soak {

namespace fs = std::filesystem;
using dralens::testing::Subprocess;
using nlohmann::json;

inline constexpr char kNode[] = "soak-node";
// Four H100 80GB for dynamic MIG, four A100 40GB (not Hopper: never dynamic MIG) for shares.
inline constexpr char kProfile[] = R"({"name": "soak", "gpus": [
  {"board": "h100-80gb", "count": 4}, {"board": "a100-40gb", "count": 4}]})";
inline constexpr char kCdiPrefix[] = "k8s.gpu.dralens.dev-claim_";

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

}  // namespace dralens::bench::soak
