// MetricsServer: the HTTP endpoint of every role: /metrics, /healthz, /readyz.
//
// /metrics renders the registry as Prometheus text 0.0.4 or, when the client's Accept header
// prefers it, as OpenMetrics 1.0 with exemplars (src/telemetry/exposition.h); gzip when the
// client accepts it.
// /healthz answers 200 while the process serves; /readyz runs the role's readiness check and
// answers 200 "ok" or 503 with the reason. Served by cpp-httplib on its own threads.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "prometheus/registry.h"
#include "src/telemetry/exemplar.h"

namespace httplib {
class Server;
}

namespace dralens::exporter {

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
  absl::Status Start(const std::string& address);
  void Stop();
  int port() const { return port_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  ReadinessCheck ready_;
  const telemetry::ExemplarStore* exemplars_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

// Splits "host:port" or "[v6]:port"; port must be 0..65535.
absl::Status SplitHostPort(const std::string& address, std::string* host, int* port);

}  // namespace dralens::exporter
