// load_driver: the node role under load through its real sockets.
//
// Starts `dralens node` (simulated GPUs with consumable capacity) against an embedded API
// server, creates N allocated claims (8 consumable 8Gi shares per H100), then sends all N
// NodePrepareResources calls at once, one claim per call as N pods starting together, while S
// scrapers fetch /metrics in a loop; then all N NodeUnprepareResources calls at once. Prints
// p50/p99/max latency of prepare, unprepare and scrape, the errors, and the node's peak RSS
// (VmHWM). Not a test: it prints figures for docs/reliability.md.
//
//   ./build/tests/bench/load_driver [--claims=1000] [--scrapers=50]
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/barrier.h"
#include "absl/time/clock.h"
#include "driver/proto/dra/v1/api.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "src/sim/kubelet.h"
#include "tests/bench/driver_util.h"
#include "tests/integration/subprocess.h"
#include "tests/testing/kubeconfig.h"

namespace {

namespace fs = std::filesystem;
namespace dra = ::k8s::io::kubelet::pkg::apis::dra::v1;
using dralens::testing::Subprocess;
using nlohmann::json;

constexpr char kNode[] = "load-node";
constexpr char kDriver[] = "gpu.dralens.dev";
constexpr char kNs[] = "load";
constexpr int kSharesPerGpu = 8;

struct Latencies {
  std::mutex mu;
  std::vector<double> ms;
  void Add(double v) {
    std::lock_guard<std::mutex> lock(mu);
    ms.push_back(v);
  }
  std::string Summary() {
    std::lock_guard<std::mutex> lock(mu);
    return dralens::bench::Percentiles(ms, "ms");
  }
};

std::string StatusField(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, field + ":")) {
      return line.substr(field.size() + 1);
    }
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  const int claims = dralens::bench::IntFlag(argc, argv, "claims", 1000);
  const int scrapers = dralens::bench::IntFlag(argc, argv, "scrapers", 50);
  const int gpus = (claims + kSharesPerGpu - 1) / kSharesPerGpu;

  std::string tmpl = (fs::temp_directory_path() / "dralens-load-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const fs::path root = tmpl;
  dralens::sim::ApiServer api;
  if (!api.Start().ok()) {
    std::fprintf(stderr, "cannot start the embedded API server\n");
    return 1;
  }
  dralens::k8s::RestConfig config;
  config.server = api.url();
  auto client = *dralens::k8s::RestClient::FromConfig(config);
  (void)client->Create(dralens::k8s::kNodes, "",
                       {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", kNode}}}});
  const std::string kubeconfig = (root / "kubeconfig").string();
  dralens::testing::WriteKubeconfig(kubeconfig, api.url());
  const std::string profile = (root / "profile.json").string();
  json gpu_specs = json::array();
  for (int left = gpus; left > 0; left -= 64) {  // a profile entry holds at most 64 GPUs
    gpu_specs.push_back({{"board", "h100-80gb"}, {"count", std::min(left, 64)}});
  }
  std::ofstream(profile) << json{{"name", "load"}, {"gpus", gpu_specs}}.dump();
  const std::string registry = (root / "registry").string();
  const std::string plugins = (root / "plugins").string();
  Subprocess node({DRALENS_BINARY, "node", "--device-source=simulated",
                   "--simulated-profile=" + profile, "--consumable-capacity",
                   "--metrics-address=127.0.0.1:0", "--kubelet-registry-dir=" + registry,
                   "--kubelet-plugins-dir=" + plugins, "--cdi-root=" + (root / "cdi").string()},
                  {{"NODE_NAME", kNode}, {"KUBECONFIG", kubeconfig}});
  if (!node.WaitForOutput("kubelet plugin serving", absl::Seconds(60))) {
    std::fprintf(stderr, "node did not start:\n%s\n", node.Output().c_str());
    return 1;
  }
  std::smatch m;
  const std::string out = node.Output();
  if (!std::regex_search(out, m, std::regex(R"(serving metrics"? address=\S+ port=(\d+))"))) {
    std::fprintf(stderr, "no metrics port in:\n%s\n", out.c_str());
    return 1;
  }
  const int metrics_port = std::stoi(m[1]);
  if (auto registered = dralens::sim::RegisterPlugin(registry + "/gpu.dralens.dev-reg.sock");
      !registered.ok()) {
    std::fprintf(stderr, "registration failed: %s\n", registered.status().ToString().c_str());
    return 1;
  }
  const std::string rss_idle = StatusField(node.pid(), "VmRSS");
  const std::string file_idle = StatusField(node.pid(), "RssFile");

  // The claims, allocated as the scheduler would: consumable shares of the GPUs.
  std::vector<std::pair<std::string, std::string>> refs;  // name, uid
  const absl::Time setup_start = absl::Now();
  for (int i = 0; i < claims; ++i) {
    const std::string name = absl::StrCat("claim-", i);
    json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"name", name}, {"namespace", kNs}}}};
    claim["spec"]["devices"]["requests"] =
        json::array({{{"name", "gpu"}, {"exactly", {{"deviceClassName", kDriver}}}}});
    auto created = client->Create(dralens::k8s::kResourceClaims, kNs, claim);
    if (!created.ok()) {
      std::fprintf(stderr, "create claim: %s\n", created.status().ToString().c_str());
      return 1;
    }
    json obj = *created;
    obj["status"]["allocation"]["devices"]["results"] =
        json::array({{{"request", "gpu"},
                      {"driver", kDriver},
                      {"pool", kNode},
                      {"device", absl::StrCat("gpu-", i / kSharesPerGpu)},
                      {"shareID", absl::StrFormat("00000000-0000-4000-8000-%012d", i)},
                      {"consumedCapacity", {{"memory", "8Gi"}}}}});
    auto updated = client->Update(dralens::k8s::kResourceClaims, kNs, obj, "status");
    if (!updated.ok()) {
      std::fprintf(stderr, "allocate claim: %s\n", updated.status().ToString().c_str());
      return 1;
    }
    refs.emplace_back(name, obj["metadata"]["uid"].get<std::string>());
  }
  std::printf("setup: %d claims on %d simulated H100s in %.1f s\n", claims, gpus,
              absl::ToDoubleSeconds(absl::Now() - setup_start));

  auto channel = grpc::CreateChannel("unix://" + plugins + "/gpu.dralens.dev/dra.sock",
                                     grpc::InsecureChannelCredentials());
  auto stub = dra::DRAPlugin::NewStub(channel);

  std::atomic<bool> scraping{true};
  std::atomic<int> scrape_errors{0};
  std::atomic<size_t> largest_body{0};  // decompressed
  Latencies scrape;
  std::vector<std::thread> scraper_threads;
  for (int s = 0; s < scrapers; ++s) {
    scraper_threads.emplace_back([&, s] {
      httplib::Client c("127.0.0.1", metrics_port);
      c.set_read_timeout(30, 0);
      httplib::Headers headers = {
          {"Accept", s % 2 ? "application/openmetrics-text; version=1.0.0" : "text/plain"}};
      while (scraping.load()) {
        const auto start = std::chrono::steady_clock::now();
        auto res = c.Get("/metrics", headers);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        if (!res || res->status != 200) {
          ++scrape_errors;
        } else {
          scrape.Add(ms);
          size_t seen = largest_body.load();
          while (res->body.size() > seen &&
                 !largest_body.compare_exchange_weak(seen, res->body.size())) {
          }
        }
      }
    });
  }

  // All calls at once, as many pods starting together.
  auto phase = [&](bool prepare, Latencies& lat, std::atomic<int>& errors) {
    absl::Barrier* barrier = new absl::Barrier(claims);
    std::vector<std::thread> threads;
    threads.reserve(claims);
    for (int i = 0; i < claims; ++i) {
      threads.emplace_back([&, i] {
        if (barrier->Block()) {
          delete barrier;
        }
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
        const auto start = std::chrono::steady_clock::now();
        std::string error;
        if (prepare) {
          dra::NodePrepareResourcesRequest request;
          auto* c = request.add_claims();
          c->set_namespace_(kNs);
          c->set_name(refs[i].first);
          c->set_uid(refs[i].second);
          dra::NodePrepareResourcesResponse response;
          grpc::Status s = stub->NodePrepareResources(&context, request, &response);
          error = !s.ok() ? s.error_message() : response.claims().at(refs[i].second).error();
        } else {
          dra::NodeUnprepareResourcesRequest request;
          auto* c = request.add_claims();
          c->set_namespace_(kNs);
          c->set_name(refs[i].first);
          c->set_uid(refs[i].second);
          dra::NodeUnprepareResourcesResponse response;
          grpc::Status s = stub->NodeUnprepareResources(&context, request, &response);
          error = !s.ok() ? s.error_message() : response.claims().at(refs[i].second).error();
        }
        lat.Add(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count());
        if (!error.empty()) {
          if (errors.fetch_add(1) < 3) {
            std::fprintf(stderr, "%s %s: %s\n", prepare ? "prepare" : "unprepare",
                         refs[i].first.c_str(), error.c_str());
          }
        }
      });
    }
    for (std::thread& t : threads) {
      t.join();
    }
  };
  Latencies prepare, unprepare;
  std::atomic<int> prepare_errors{0}, unprepare_errors{0};
  absl::Time start = absl::Now();
  phase(true, prepare, prepare_errors);
  const double prepare_wall = absl::ToDoubleSeconds(absl::Now() - start);
  const std::string rss_loaded = StatusField(node.pid(), "VmRSS");
  const std::string anon_loaded = StatusField(node.pid(), "RssAnon");
  start = absl::Now();
  phase(false, unprepare, unprepare_errors);
  const double unprepare_wall = absl::ToDoubleSeconds(absl::Now() - start);
  scraping = false;
  for (std::thread& t : scraper_threads) {
    t.join();
  }
  const std::string hwm = StatusField(node.pid(), "VmHWM");
  const int exit_code = node.Stop(SIGTERM, absl::Seconds(30));
  api.Stop();
  std::error_code ec;
  fs::remove_all(root, ec);

  std::printf("prepare:   %d concurrent calls in %.2f s: %s, errors %d\n", claims, prepare_wall,
              prepare.Summary().c_str(), prepare_errors.load());
  std::printf("unprepare: %d concurrent calls in %.2f s: %s, errors %d\n", claims, unprepare_wall,
              unprepare.Summary().c_str(), unprepare_errors.load());
  std::printf("scrape:    %d scrapers during both phases: %s, errors %d, largest body %zu kB\n",
              scrapers, scrape.Summary().c_str(), scrape_errors.load(), largest_body.load() / 1024);
  std::printf("node RSS:  idle%s, with %d claims prepared%s, peak (VmHWM)%s; exit code %d\n",
              rss_idle.c_str(), claims, rss_loaded.c_str(), hwm.c_str(), exit_code);
  std::printf("           of which mapped files (code) when idle%s, anonymous when prepared%s\n",
              file_idle.c_str(), anon_loaded.c_str());
  return prepare_errors.load() + unprepare_errors.load() + scrape_errors.load() == 0 &&
                 exit_code == 0
             ? 0
             : 2;
}
