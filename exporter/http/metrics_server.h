// MetricsServer: the HTTP endpoint of every role: /metrics, /healthz, /readyz.
//
// /debug/... endpoints serve JSON that a role registers (the node: /debug/claims).
// /metrics renders the registry as Prometheus text 0.0.4 or, when the client's Accept header
// prefers it, as OpenMetrics 1.0 with exemplars (src/telemetry/exposition.h); gzip when the
// client accepts it.
// /healthz answers 200 while the process serves; /readyz runs the role's readiness check and
// answers 200 "ok" or 503 with the reason. Served by cpp-httplib on its own threads.
//
// Optional protection (MetricsServerSecurity): HTTPS with a certificate and key, and a bearer
// token that /metrics and /debug/... require (401 otherwise). /healthz and /readyz stay open
// for the kubelet's probes and reveal nothing.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "prometheus/collectable.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "src/telemetry/exemplar.h"
#include "src/telemetry/exposition.h"

namespace httplib {
class Server;
}

namespace dralens::exporter {

struct MetricsServerSecurity {
  // Both or neither: PEM files of the serving certificate (chain) and its private key.
  std::string tls_cert_file = {};
  std::string tls_key_file = {};
  // A file holding the token that /metrics and /debug/... require as "Authorization: Bearer
  // <token>". Re-read when a request does not match, so a rotated token takes effect without
  // a restart. Empty: no authentication.
  std::string bearer_token_file = {};
};

class MetricsServer {
 public:
  // Returns OK when ready, or a status whose message says what is missing.
  using ReadinessCheck = std::function<absl::Status()>;

  // `exemplars` may be null; when set it must outlive the server.
  MetricsServer(std::shared_ptr<prometheus::Registry> registry, ReadinessCheck ready,
                const telemetry::ExemplarStore* exemplars = nullptr);
  ~MetricsServer();  // Stop()
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds "host:port" (port 0 picks one; "[::1]:p" for IPv6) and serves in the background.
  // InvalidArgument for a half-configured TLS pair, an unreadable certificate, key or token
  // file, or an empty token.
  absl::Status Start(const std::string& address, const MetricsServerSecurity& security = {});
  // Adds families collected at scrape time next to the registry's (e.g. counters kept as
  // atomics elsewhere). Call before Start(); `collectable` must outlive the server.
  void AddCollectable(const prometheus::Collectable* collectable);
  // Also renders `source` (families that keep their own text, src/telemetry/text_family.h).
  // Same rules as AddCollectable.
  void AddTextSource(const telemetry::TextSource* source);
  // Serves GET `path` (e.g. "/debug/claims") as pretty-printed JSON from `render`, called per
  // request on a server thread. Call before Start().
  void AddJsonEndpoint(const std::string& path, std::function<nlohmann::json()> render);
  // Serves GET `prefix`<rest> (e.g. "/debug/claims/" + "ns/name") from `render(rest)`; nullopt
  // answers 404 with a JSON error. `prefix` ends with '/'. Call before Start().
  using JsonLookup = std::function<std::optional<nlohmann::json>(const std::string& rest)>;
  void AddJsonPrefixEndpoint(const std::string& prefix, JsonLookup render);
  void Stop();
  int port() const { return port_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  ReadinessCheck ready_;
  const telemetry::ExemplarStore* exemplars_;
  // dralens_scrape_duration_seconds{format="text"} and {format="openmetrics"}.
  prometheus::Histogram* scrape_text_;
  prometheus::Histogram* scrape_openmetrics_;
  std::vector<const prometheus::Collectable*> collectables_;
  std::vector<const telemetry::TextSource*> text_sources_;
  std::vector<std::pair<std::string, std::function<nlohmann::json()>>> json_endpoints_;
  std::vector<std::pair<std::string, JsonLookup>> json_prefix_endpoints_;
  // Whether `authorization` carries the expected bearer token (constant-time compare).
  bool Authorized(const std::string& authorization);

  std::unique_ptr<httplib::Server> server_;
  std::string token_file_;
  std::mutex token_mu_;
  std::string token_;  // guarded by token_mu_
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};  // set by thread_ when the listen loop ended
  int port_ = 0;
};

// Splits "host:port" or "[v6]:port"; port must be 0..65535.
absl::Status SplitHostPort(const std::string& address, std::string* host, int* port);

}  // namespace dralens::exporter
