// soak_driver: the demo's workload against real `dralens node` and `dralens cluster` processes
// while everything around them fails, with the invariants checked after every recovery.
//
// Runs for --minutes (default 5; `make soak SOAK_MINUTES=60` for the hour). Throughout:
//   - the embedded API server answers bursts of 500s and 429s, drops watches and answers 410
//     Gone (every 15 s, in turn);
//   - the OTLP collector both roles export to is down (a closed port) for the whole run;
//   - the node role is killed with SIGKILL every --kill-every seconds (default 60) and started
//     again, as its DaemonSet would be;
//   - the kubelet restarts every --kubelet-restart-every seconds (default 45): it deletes every
//     ResourceSlice of the node and driver, then registers the plugin again, whatever API fault
//     burst is in force; the node's pool must be published again within 60 s, and the time is
//     reported with the fault burst injected last (a 429 burst tells every client to wait).
// After every restart, and at the end once every claim is unprepared:
//   - every CDI spec on disk belongs to a claim the checkpoint records as prepared, and every
//     prepared claim has its spec (nothing leaked, nothing lost);
//   - no device is held by two claims (the workload allocates devices exclusively);
//   - the node's dralens_node_prepared_claims equals the checkpoint, and how long after the
//     restart it got there is recorded;
// and the node's and cluster role's RSS are sampled each minute. Prints the figures; exits 1
// if an invariant failed. Not a ctest test (it is long); a short run is quick to try:
//
//   ./build/tests/bench/soak_driver --minutes=2 --kill-every=20
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
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
#include "src/app/workload.h"
#include "src/common/clock.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "src/sim/kubelet.h"
#include "tests/bench/driver_util.h"
#include "tests/integration/subprocess.h"
#include "tests/testing/kubeconfig.h"

namespace {

namespace fs = std::filesystem;
using dralens::testing::Subprocess;
using nlohmann::json;

constexpr char kNode[] = "soak-a100";
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
    return StartNode();
  }

  bool StartNode() {
    node_ = std::make_unique<Subprocess>(
        std::vector<std::string>{DRALENS_BINARY, "node", "--device-source=simulated",
                                 "--simulated-profile=a100-40gb", "--metrics-address=127.0.0.1:0",
                                 "--kubelet-registry-dir=" + (root_ / "registry").string(),
                                 "--kubelet-plugins-dir=" + Plugins(), "--cdi-root=" + Cdi()},
        env_);
    if (!node_->WaitForOutput("kubelet plugin serving", absl::Seconds(60))) {
      std::fprintf(stderr, "node did not start:\n%s\n", node_->Output().c_str());
      return false;
    }
    node_port_ = MetricsPort(node_->Output());
    return dralens::sim::RegisterPlugin((root_ / "registry/gpu.dralens.dev-reg.sock").string())
        .ok();
  }

  // Spans each node process dropped because the collector is down, summed over the run.
  double DroppedSpans() {
    return Scrape(node_port_, "dralens_otlp_spans_total{outcome=\"dropped_export_failed\"}");
  }

  void KillNode() { node_->Stop(SIGKILL, absl::Seconds(10)); }

  // Devices of this node's pool as the API server holds them now.
  int PublishedDevices() {
    dralens::k8s::ListOptions mine;
    mine.field_selector = absl::StrCat("spec.nodeName=", kNode, ",spec.driver=gpu.dralens.dev");
    auto slices = client_->List(dralens::k8s::kResourceSlices, "", mine);
    if (!slices.ok()) {
      return -1;
    }
    int devices = 0;
    for (const json& slice : slices->items) {
      devices += static_cast<int>(slice["spec"].value("devices", json::array()).size());
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
    std::map<std::string, std::string> completed;  // uid -> spec file
    std::map<std::string, std::string> holder;     // device -> uid
    std::ifstream in(Plugins() + "/gpu.dralens.dev/checkpoint.json");
    json file = in ? json::parse(in, nullptr, false) : json::object();
    if (file.is_discarded()) {
      violations.push_back("checkpoint does not parse");
      return violations;
    }
    const json claims = file.value("claims", json::object());
    for (const auto& [uid, claim] : claims.items()) {
      if (claim.value("state", "") == "PrepareCompleted") {
        completed[uid] = claim.value("cdiSpecFile", "");
      }
      const json devices = claim.value("devices", json::array());
      for (const json& d : devices) {
        const std::string device = d.value("device", "");
        auto [it, inserted] = holder.emplace(device, uid);
        if (!inserted && it->second != uid) {
          violations.push_back(
              absl::StrCat("device ", device, " held by ", it->second, " and ", uid));
        }
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

  // Seconds until the node's prepared-claims gauge equals the checkpoint, or -1.
  double Convergence() {
    const absl::Time start = absl::Now();
    while (absl::Now() - start < absl::Seconds(30)) {
      if (Scrape(node_port_, "dralens_node_prepared_claims") == prepared_) {
        return absl::ToDoubleSeconds(absl::Now() - start);
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return -1;
  }

  // What Faults(round) injects, for reports.
  static const char* FaultName(int round) {
    static constexpr const char* kNames[] = {"500 burst", "429 burst", "watch drop", "410 Gone"};
    return round < 0 ? "none" : kNames[round % 4];
  }

  void Faults(int round) {
    using dralens::sim::FaultRule;
    switch (round % 4) {
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

 private:
  fs::path root_;
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
  dralens::app::WorkloadOptions options;
  options.namespace_name = "soak";
  options.claim_interval = absl::Milliseconds(250);
  options.mean_pod_duration = absl::Seconds(10);
  options.max_claims = 24;
  options.plugin_sockets[kNode] = soak.DraSocket();
  dralens::app::Workload workload(options, *soak.client_, dralens::common::RealClock());
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
  double dropped = 0;
  const absl::Time start = absl::Now();
  absl::Time next_kill = start + absl::Seconds(kill_every);
  absl::Time next_kubelet = start + absl::Seconds(kubelet_every);
  absl::Time next_fault = start + absl::Seconds(15);
  absl::Time next_sample = start + absl::Minutes(1);
  int fault_round = 0;
  while (absl::Now() - start < absl::Minutes(minutes)) {
    (void)workload.Step();
    const absl::Time now = absl::Now();
    if (now >= next_fault) {
      soak.Faults(fault_round++);
      next_fault = now + absl::Seconds(15);
    }
    if (now >= next_kill) {
      dropped += std::max(0.0, soak.DroppedSpans());
      soak.KillNode();
      ++kills;
      if (!soak.StartNode()) {
        violations.push_back("node did not restart");
        break;
      }
      for (std::string& v : soak.Check()) {
        violations.push_back(absl::StrCat("after kill ", kills, ": ", v));
      }
      convergence.push_back(soak.Convergence());
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
  workload.Stop();
  soak.api_.ClearFaults();
  const dralens::app::Workload::Stats stats = workload.stats();

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
  std::error_code ec;
  if (!fs::is_empty(soak.Cdi(), ec) && !ec) {
    violations.push_back("CDI specs left after unpreparing everything");
  }
  dropped += std::max(0.0, soak.DroppedSpans());
  const double node_exit = soak.node_->Stop(SIGTERM, absl::Seconds(15));
  const double cluster_exit = soak.cluster_->Stop(SIGTERM, absl::Seconds(15));

  std::printf("soak: %d min, node killed %d times, %d fault bursts (500, 429, watch drop, 410)\n",
              minutes, kills, fault_round);
  std::printf(
      "workload: %d claims, %d allocated, %d prepared, %d prepare errors (node down or "
      "API faults, retried), %d unprepared\n",
      stats.created, stats.allocated, stats.prepared, stats.prepare_errors, stats.unprepared);
  std::string conv;
  for (double c : convergence) {
    absl::StrAppend(&conv, c < 0 ? "never" : absl::StrCat(static_cast<int>(c * 1000), "ms"), " ");
  }
  std::printf("metrics converged to the checkpoint after each restart in: %s\n", conv.c_str());
  std::printf("kubelet restarts: %zu, pool of %d devices republished in: %s\n", republished.size(),
              devices, dralens::bench::Percentiles(republished, "s").c_str());
  std::printf("  each (fault burst injected last): %s\n", republish_log.c_str());
  std::string mem;
  for (const auto& [node, cluster] : rss) {
    absl::StrAppend(&mem, node / 1024, "/", cluster / 1024, " ");
  }
  std::printf("RSS MiB per minute (node/cluster): %s\n", mem.c_str());
  std::printf("spans the node dropped because the collector was down: %.0f\n", dropped);
  std::printf("clean exits: node %.0f, cluster %.0f\n", node_exit, cluster_exit);
  std::printf("invariant violations: %zu\n", violations.size());
  for (const std::string& v : violations) {
    std::printf("  %s\n", v.c_str());
  }
  fs::remove_all(tmpl, ec);
  return violations.empty() ? 0 : 1;
}
