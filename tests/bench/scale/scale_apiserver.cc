// scale_apiserver: the scale benchmark's API server, in its own process.
//
// Generates the fleet of (--claims, --seed, --epoch), preloads it into a LeanApiServer in the
// chosen LIST order and serves it until SIGTERM or SIGINT. The benchmark driver (scale_bench)
// generates the same fleet for its truth and drives changes through the /bench/ endpoints.
//
//   scale_apiserver --claims=N [--seed=1] [--epoch=UNIX_SECONDS] [--order=name|random|
//     pending-first|reverse] [--port=0] [--port-file=PATH] [--gzip=true] [--history=20000]
//     [--bookmark-seconds=60] [--precompress-limit=500] [--list-delay=PLURAL:MS,...]
//
// Prints one line "scale_apiserver ready port=P ..." on stdout once it serves.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/bench/scale/fleet.h"
#include "tests/bench/scale/lean_api_server.h"
#include "tests/bench/scale/render.h"

namespace {

using dralens::bench::scale::ClaimState;
using dralens::bench::scale::Fleet;
using dralens::bench::scale::FleetOptions;
using dralens::bench::scale::LeanApiServer;
using dralens::bench::scale::LeanServerOptions;
using dralens::bench::scale::Resource;
using dralens::bench::scale::Rng;

std::string Flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (absl::StartsWith(argv[i], prefix)) {
      return std::string(argv[i]).substr(prefix.size());
    }
  }
  return fallback;
}

int64_t IntFlag(int argc, char** argv, const std::string& name, int64_t fallback) {
  int64_t v = fallback;
  const std::string text = Flag(argc, argv, name, "");
  if (!text.empty() && !absl::SimpleAtoi(text, &v)) {
    std::fprintf(stderr, "scale_apiserver: --%s must be an integer, got '%s'\n", name.c_str(),
                 text.c_str());
    std::exit(2);
  }
  return v;
}

// The LIST order of `n` objects with sort keys `keys` and "first" flags (pending-first).
std::vector<int> Order(const std::string& order, const std::vector<std::string>& keys,
                       const std::vector<bool>& first, uint64_t seed) {
  std::vector<int> idx(keys.size());
  for (size_t i = 0; i < idx.size(); ++i) {
    idx[i] = static_cast<int>(i);
  }
  auto by_key = [&](int a, int b) { return keys[a] < keys[b]; };
  if (order == "random") {
    Rng rng(seed ^ 0x0dd0c0ffeeull);
    rng.Shuffle(idx);
  } else if (order == "reverse") {
    std::sort(idx.begin(), idx.end(), [&](int a, int b) { return keys[a] > keys[b]; });
  } else if (order == "pending-first") {
    std::sort(idx.begin(), idx.end(), [&](int a, int b) {
      if (first[a] != first[b]) {
        return static_cast<bool>(first[a]);
      }
      return keys[a] < keys[b];
    });
  } else {
    std::sort(idx.begin(), idx.end(), by_key);
  }
  return idx;
}

}  // namespace

int main(int argc, char** argv) {
  FleetOptions fleet_options;
  fleet_options.claims = static_cast<int>(IntFlag(argc, argv, "claims", 1000));
  fleet_options.seed = static_cast<uint64_t>(IntFlag(argc, argv, "seed", 1));
  fleet_options.epoch =
      absl::FromUnixSeconds(IntFlag(argc, argv, "epoch", absl::ToUnixSeconds(fleet_options.epoch)));
  const std::string order = Flag(argc, argv, "order", "name");
  if (order != "name" && order != "random" && order != "pending-first" && order != "reverse") {
    std::fprintf(stderr,
                 "scale_apiserver: --order must be name, random, pending-first or "
                 "reverse, got '%s'\n",
                 order.c_str());
    return 2;
  }
  LeanServerOptions options;
  options.port = static_cast<int>(IntFlag(argc, argv, "port", 0));
  options.gzip = Flag(argc, argv, "gzip", "true") == "true";
  options.history = static_cast<size_t>(IntFlag(argc, argv, "history", 20000));
  options.bookmark_interval = absl::Seconds(IntFlag(argc, argv, "bookmark-seconds", 60));
  const int64_t precompress = IntFlag(argc, argv, "precompress-limit", 500);
  for (absl::string_view item :
       absl::StrSplit(Flag(argc, argv, "list-delay", ""), ',', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(item, ':');
    int64_t ms = 0;
    bool known = false;
    for (Resource r : dralens::bench::scale::kResources) {
      if (parts.size() == 2 && parts[0] == dralens::bench::scale::InfoOf(r).plural &&
          absl::SimpleAtoi(parts[1], &ms)) {
        options.list_delays[r] = absl::Milliseconds(ms);
        known = true;
      }
    }
    if (!known) {
      std::fprintf(stderr, "scale_apiserver: --list-delay wants PLURAL:MS, got '%s'\n",
                   std::string(item).c_str());
      return 2;
    }
  }
  const std::string port_file = Flag(argc, argv, "port-file", "");

  // Block the stop signals before any thread starts, so that sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const int64_t started = dralens::bench::scale::MonotonicNanos();
  const Fleet fleet = dralens::bench::scale::Generate(fleet_options);
  LeanApiServer server(options);
  namespace s = dralens::bench::scale;
  {
    for (int i = 0; i < s::kClassCount; ++i) {
      server.Preload(Resource::kDeviceClasses, s::RenderClass(i, fleet));
    }
    std::vector<std::string> keys;
    std::vector<bool> first;
    std::vector<int> ids;
    for (size_t i = 0; i < fleet.nodes.size(); ++i) {
      if (fleet.nodes[i].exists) {
        keys.push_back(fleet.nodes[i].name);
        first.push_back(false);
        ids.push_back(static_cast<int>(i));
      }
    }
    for (int i : Order(order, keys, first, fleet_options.seed)) {
      server.Preload(Resource::kNodes, s::RenderNode(fleet, ids[i]));
    }
    keys.clear();
    first.clear();
    for (const s::Node& node : fleet.nodes) {
      keys.push_back(node.slice_name);
      first.push_back(false);
    }
    for (int i : Order(order, keys, first, fleet_options.seed + 1)) {
      server.Preload(Resource::kResourceSlices, s::RenderSlice(fleet, i));
    }
    keys.clear();
    first.clear();
    for (const s::Claim& claim : fleet.claims) {
      keys.push_back(absl::StrCat(claim.ns, "/", claim.name));
      first.push_back(fleet.StateOf(claim) == ClaimState::kPending);
    }
    for (int i : Order(order, keys, first, fleet_options.seed + 2)) {
      server.Preload(Resource::kResourceClaims, s::RenderClaim(fleet, i));
    }
    keys.clear();
    first.clear();
    for (const s::Pod& pod : fleet.pods) {
      keys.push_back(absl::StrCat(pod.ns, "/", pod.name));
      first.push_back(fleet.StateOf(pod.claim) == ClaimState::kPending);
    }
    for (int i : Order(order, keys, first, fleet_options.seed + 3)) {
      server.Preload(Resource::kPods, s::RenderPod(fleet, i));
    }
  }
  const int64_t rendered = s::MonotonicNanos();
  if (precompress > 0) {
    server.PrecompressPages(precompress);
  }
  const int64_t compressed = s::MonotonicNanos();
  absl::Status status = server.Start();
  if (!status.ok()) {
    std::fprintf(stderr, "scale_apiserver: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  if (!port_file.empty()) {
    const std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << server.port() << "\n";
    std::rename(tmp.c_str(), port_file.c_str());
  }
  const nlohmann::json stats = server.Stats();
  std::printf(
      "scale_apiserver ready port=%d claims=%d nodes=%zu order=%s render_s=%.2f gzip_s=%.2f "
      "rss_mb=%.0f\n",
      server.port(), fleet_options.claims, fleet.nodes.size(), order.c_str(),
      (rendered - started) / 1e9, (compressed - rendered) / 1e9,
      stats["rss_bytes"].get<double>() / 1e6);
  std::fflush(stdout);

  int signal = 0;
  sigwait(&stop_signals, &signal);
  server.Stop();
  return 0;
}
