// embedded_list_probe: can the embedded API server (src/sim/api_server) serve the scale fleet,
// and how fast does the lean one (lean_api_server.h) serve it?
//
// --server=embedded loads the fleet of --claims through the embedded server's own API (create,
// then a status update for the objects that carry status); --server=lean preloads it into a
// LeanApiServer in name order. Both in this process. Then a plain HTTP client pages through
// every resource the way `dralens cluster` does (limit=500, continue tokens) without parsing
// the items, and the probe prints the bytes served, the time and the resident memory. The
// answer decided which server the scale benchmark runs against (tests/bench/scale/README.md).
//
//   ./build/tests/bench/scale/embedded_list_probe [--claims=10000] [--server=embedded|lean]
#include <httplib.h>
#include <sys/resource.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "tests/bench/driver_util.h"
#include "tests/bench/scale/child.h"
#include "tests/bench/scale/fleet.h"
#include "tests/bench/scale/lean_api_server.h"
#include "tests/bench/scale/render.h"

namespace {

namespace k8s = dralens::k8s;
namespace s = dralens::bench::scale;

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

bool Load(k8s::RestClient& client, const k8s::ResourceType& type, nlohmann::json object) {
  const std::string ns = object["metadata"].value("namespace", "");
  nlohmann::json status = object.value("status", nlohmann::json());
  absl::StatusOr<nlohmann::json> created = client.Create(type, ns, object);
  if (!created.ok()) {
    std::fprintf(stderr, "create %s: %s\n", type.plural.c_str(),
                 std::string(created.status().message()).c_str());
    return false;
  }
  if (!status.is_null() && type.plural != "resourceslices" && type.plural != "deviceclasses") {
    (*created)["status"] = status;
    absl::StatusOr<nlohmann::json> updated = client.Update(type, ns, *created, "status");
    if (!updated.ok()) {
      std::fprintf(stderr, "update status %s: %s\n", type.plural.c_str(),
                   std::string(updated.status().message()).c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  s::FleetOptions options;
  options.claims = dralens::bench::IntFlag(argc, argv, "claims", 10000);
  const s::Fleet fleet = s::Generate(options);
  bool lean = false;
  for (int i = 1; i < argc; ++i) {
    lean = lean || std::string(argv[i]) == "--server=lean";
  }
  dralens::sim::ApiServer server;
  s::LeanApiServer lean_server({});
  const int64_t rss0 = s::SelfStatusBytes("VmRSS:");
  const int64_t t0 = s::MonotonicNanos();
  int port = 0;
  if (lean) {
    for (int i = 0; i < s::kClassCount; ++i) {
      lean_server.Preload(s::Resource::kDeviceClasses, s::RenderClass(i, fleet));
    }
    for (size_t i = 0; i < fleet.nodes.size(); ++i) {
      if (fleet.nodes[i].exists) {
        lean_server.Preload(s::Resource::kNodes, s::RenderNode(fleet, static_cast<int>(i)));
      }
      lean_server.Preload(s::Resource::kResourceSlices, s::RenderSlice(fleet, static_cast<int>(i)));
    }
    for (size_t i = 0; i < fleet.claims.size(); ++i) {
      lean_server.Preload(s::Resource::kResourceClaims, s::RenderClaim(fleet, static_cast<int>(i)));
      lean_server.Preload(s::Resource::kPods, s::RenderPod(fleet, static_cast<int>(i)));
    }
    if (!lean_server.Start().ok()) {
      return 1;
    }
    port = lean_server.port();
  } else {
    if (!server.Start().ok()) {
      std::fprintf(stderr, "embedded server did not start\n");
      return 1;
    }
    port = server.port();
    k8s::RestConfig config;
    config.server = server.url();
    auto client = k8s::RestClient::FromConfig(config);
    if (!client.ok()) {
      return 1;
    }
    bool ok = true;
    for (int i = 0; i < s::kClassCount && ok; ++i) {
      ok = Load(**client, k8s::kDeviceClasses, s::RenderClass(i, fleet));
    }
    for (size_t i = 0; i < fleet.nodes.size() && ok; ++i) {
      if (fleet.nodes[i].exists) {
        ok = Load(**client, k8s::kNodes, s::RenderNode(fleet, static_cast<int>(i)));
      }
      ok = ok && Load(**client, k8s::kResourceSlices, s::RenderSlice(fleet, static_cast<int>(i)));
    }
    for (size_t i = 0; i < fleet.claims.size() && ok; ++i) {
      ok = Load(**client, k8s::kResourceClaims, s::RenderClaim(fleet, static_cast<int>(i))) &&
           Load(**client, k8s::kPods, s::RenderPod(fleet, static_cast<int>(i)));
    }
    if (!ok) {
      return 1;
    }
  }
  const int64_t t1 = s::MonotonicNanos();
  const int64_t rss1 = s::SelfStatusBytes("VmRSS:");
  std::printf("%s server: loaded %d claims in %.1f s; RSS %.0f MB -> %.0f MB\n",
              lean ? "lean" : "embedded", options.claims, (t1 - t0) / 1e9, rss0 / 1e6, rss1 / 1e6);

  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(std::chrono::seconds(300));
  int64_t total = 0;
  const double cpu0 = CpuSeconds();
  const int64_t l0 = s::MonotonicNanos();
  for (s::Resource r : s::kResources) {
    std::string cont;
    int64_t bytes = 0;
    int pages = 0;
    const int64_t r0 = s::MonotonicNanos();
    while (true) {
      std::string path = absl::StrCat(s::InfoOf(r).path, "?limit=500");
      if (!cont.empty()) {
        absl::StrAppend(&path, "&continue=", cont);
      }
      httplib::Result res = http.Get(path);
      if (!res || res->status != 200) {
        std::fprintf(stderr, "LIST %s failed\n", path.c_str());
        return 1;
      }
      bytes += static_cast<int64_t>(res->body.size());
      ++pages;
      const size_t at = res->body.rfind("\"continue\":\"");
      if (at == std::string::npos) {
        break;
      }
      const size_t start = at + 12;
      cont = res->body.substr(start, res->body.find('"', start) - start);
    }
    total += bytes;
    std::printf("  %-15s %6.1f MB in %4d pages, %.2f s\n", s::InfoOf(r).plural, bytes / 1e6, pages,
                (s::MonotonicNanos() - r0) / 1e9);
  }
  const double seconds = (s::MonotonicNanos() - l0) / 1e9;
  std::printf(
      "LISTs: %.1f MB in %.2f s (%.0f MB/s), %.1f s CPU (server and client); peak RSS "
      "%.0f MB\n",
      total / 1e6, seconds, total / 1e6 / seconds, CpuSeconds() - cpu0,
      s::SelfStatusBytes("VmHWM:") / 1e6);
  server.Stop();
  lean_server.Stop();
  return 0;
}
