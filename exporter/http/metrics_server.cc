#include "exporter/http/metrics_server.h"

#include <httplib.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/common/log.h"
#include "src/telemetry/exposition.h"

namespace dralens::exporter {

absl::Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\": want host:port"));
  }
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  }
  int p = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &p) || p < 0 || p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\": bad port"));
  }
  *host = h.empty() ? "0.0.0.0" : h;
  *port = p;
  return absl::OkStatus();
}

MetricsServer::MetricsServer(std::shared_ptr<prometheus::Registry> registry, ReadinessCheck ready,
                             const telemetry::ExemplarStore* exemplars)
    : registry_(std::move(registry)), ready_(std::move(ready)), exemplars_(exemplars) {}

MetricsServer::~MetricsServer() { Stop(); }

absl::Status MetricsServer::Start(const std::string& address) {
  std::string host;
  int port = 0;
  if (absl::Status s = SplitHostPort(address, &host, &port); !s.ok()) {
    return s;
  }
  server_ = std::make_unique<httplib::Server>();
  server_->new_task_queue = [] { return new httplib::ThreadPool(4); };
  server_->Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    const telemetry::ExpositionFormat format =
        telemetry::NegotiateFormat(req.get_header_value("Accept"));
    std::string body = telemetry::Render(registry_->Collect(), exemplars_, format);
    // httplib gzips text/* bodies itself when the client accepts it; OpenMetrics' media type is
    // not one it knows, so that one is compressed here.
    if (format == telemetry::ExpositionFormat::kOpenMetrics &&
        telemetry::AcceptsGzip(req.get_header_value("Accept-Encoding"))) {
      absl::StatusOr<std::string> gz = telemetry::Gzip(body);
      if (gz.ok()) {
        body = *std::move(gz);
        res.set_header("Content-Encoding", "gzip");
      }
    }
    res.set_content(std::move(body), std::string(telemetry::ContentType(format)));
  });
  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server_->Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    absl::Status s = ready_ ? ready_() : absl::OkStatus();
    if (s.ok()) {
      res.set_content("ok\n", "text/plain");
      return;
    }
    res.status = 503;
    res.set_content(absl::StrCat("not ready: ", s.message(), "\n"), "text/plain");
  });
  if (host.find(':') != std::string::npos) {
    server_->set_address_family(AF_INET6);
  }
  if (port == 0) {
    port_ = server_->bind_to_any_port(host);
  } else {
    port_ = server_->bind_to_port(host, port) ? port : -1;
  }
  if (port_ <= 0) {
    server_.reset();
    return absl::UnavailableError(absl::StrCat("metrics server: cannot listen on ", address));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  DLOG(kInfo, "http", "serving metrics", {{"address", host}, {"port", port_}});
  return absl::OkStatus();
}

void MetricsServer::Stop() {
  if (server_ != nullptr) {
    server_->stop();
  }
  if (thread_.joinable()) {
    thread_.join();
  }
  server_.reset();
}

}  // namespace dralens::exporter
