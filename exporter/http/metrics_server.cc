#include "exporter/http/metrics_server.h"

#include <httplib.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "src/common/gzip.h"
#include "src/common/log.h"
#include "src/telemetry/catalog.h"
#include "src/telemetry/exposition.h"

namespace dralens::exporter {
namespace {

// What a scrape renders before it sends: a few hundred series of the cluster role.
constexpr size_t kScrapePieceBytes = 64 * 1024;

// Scrapes are expected in the sub-millisecond to tens-of-milliseconds range.
const prometheus::Histogram::BucketBoundaries& ScrapeBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1};
  return *buckets;
}

}  // namespace

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
    : registry_(std::move(registry)),
      ready_(std::move(ready)),
      exemplars_(exemplars),
      scrape_text_(nullptr),
      scrape_openmetrics_(nullptr) {
  auto& family = telemetry::BuildHistogram(*registry_, "dralens_scrape_duration_seconds");
  scrape_text_ = &family.Add({{"format", "text"}}, ScrapeBuckets());
  scrape_openmetrics_ = &family.Add({{"format", "openmetrics"}}, ScrapeBuckets());
}

MetricsServer::~MetricsServer() { Stop(); }

void MetricsServer::AddTextSource(const telemetry::TextSource* source) {
  text_sources_.push_back(source);
}

void MetricsServer::AddCollectable(const prometheus::Collectable* collectable) {
  collectables_.push_back(collectable);
}

void MetricsServer::AddJsonEndpoint(const std::string& path,
                                    std::function<nlohmann::json()> render) {
  json_endpoints_.emplace_back(path, std::move(render));
}

void MetricsServer::AddJsonPrefixEndpoint(const std::string& prefix, JsonLookup render) {
  json_prefix_endpoints_.emplace_back(prefix, std::move(render));
}

namespace {

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics bearer token file ", path, ": cannot be read"));
  }
  std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  token = std::string(absl::StripAsciiWhitespace(token));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics bearer token file ", path, ": is empty"));
  }
  return token;
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

bool Protected(const std::string& path) {
  return path == "/metrics" || absl::StartsWith(path, "/debug");
}

}  // namespace

bool MetricsServer::Authorized(const std::string& authorization) {
  constexpr absl::string_view kScheme = "Bearer ";
  if (!absl::StartsWith(authorization, kScheme)) {
    return false;
  }
  const absl::string_view presented = absl::string_view(authorization).substr(kScheme.size());
  std::lock_guard<std::mutex> lock(token_mu_);
  if (ConstantTimeEquals(presented, token_)) {
    return true;
  }
  // The token may have been rotated in the file (a mounted Secret).
  absl::StatusOr<std::string> fresh = ReadToken(token_file_);
  if (fresh.ok() && *fresh != token_) {
    token_ = *std::move(fresh);
    return ConstantTimeEquals(presented, token_);
  }
  return false;
}

absl::Status MetricsServer::Start(const std::string& address,
                                  const MetricsServerSecurity& security) {
  std::string host;
  int port = 0;
  if (absl::Status s = SplitHostPort(address, &host, &port); !s.ok()) {
    return s;
  }
  if (security.tls_cert_file.empty() != security.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "metrics server: a TLS certificate file and a key file go together");
  }
  if (!security.bearer_token_file.empty()) {
    token_file_ = security.bearer_token_file;
    absl::StatusOr<std::string> token = ReadToken(token_file_);
    if (!token.ok()) {
      return token.status();
    }
    std::lock_guard<std::mutex> lock(token_mu_);
    token_ = *std::move(token);
  }
  if (!security.tls_cert_file.empty()) {
    auto tls = std::make_unique<httplib::SSLServer>(security.tls_cert_file.c_str(),
                                                    security.tls_key_file.c_str());
    if (!tls->is_valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("metrics server: cannot load the TLS certificate ", security.tls_cert_file,
                       " and key ", security.tls_key_file));
    }
    server_ = std::move(tls);
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  if (!token_file_.empty()) {
    server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!Protected(req.path) || Authorized(req.get_header_value("Authorization"))) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      res.status = 401;
      res.set_header("WWW-Authenticate", "Bearer");
      res.set_content("unauthorized\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    });
  }
  server_->new_task_queue = [] { return new httplib::ThreadPool(4); };
  server_->Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    const absl::Time start = absl::Now();
    const telemetry::ExpositionFormat format =
        telemetry::NegotiateFormat(req.get_header_value("Accept"));
    // httplib gzips text/* bodies itself (at zlib's default level) when the client accepts it,
    // and would compress a body compressed here a second time; OpenMetrics' media type is not
    // one it knows, so that one is compressed here, at gzip's fastest level.
    const bool gzip = format == telemetry::ExpositionFormat::kOpenMetrics &&
                      telemetry::AcceptsGzip(req.get_header_value("Accept-Encoding"));
    if (gzip) {
      res.set_header("Content-Encoding", "gzip");
    }
    // The body is written in pieces as it is rendered (chunked transfer encoding): a scrape
    // holds one piece at a time, and no text source holds its lock while a piece is sent.
    res.set_chunked_content_provider(
        std::string(telemetry::ContentType(format)),
        [this, format, gzip, start](size_t, httplib::DataSink& sink) {
          std::vector<prometheus::MetricFamily> families = registry_->Collect();
          for (const prometheus::Collectable* c : collectables_) {
            std::vector<prometheus::MetricFamily> more = c->Collect();
            families.insert(families.end(), std::make_move_iterator(more.begin()),
                            std::make_move_iterator(more.end()));
          }
          auto send = [&sink](absl::string_view piece) {
            return sink.is_writable() && sink.write(piece.data(), piece.size());
          };
          std::optional<common::GzipStream> gz;
          if (gzip) {
            gz.emplace(send);
          }
          telemetry::TextWriter out(kScrapePieceBytes, [&](absl::string_view piece) {
            return gz.has_value() ? gz->Write(piece).ok() : send(piece);
          });
          telemetry::RenderTo(families, exemplars_, format, text_sources_, out);
          const bool ok = !out.failed() && (!gz.has_value() || gz->Finish().ok());
          // Observed once written, so a scrape reports the one before it: that is what a
          // collector can do without rendering twice.
          (format == telemetry::ExpositionFormat::kOpenMetrics ? scrape_openmetrics_ : scrape_text_)
              ->Observe(absl::ToDoubleSeconds(absl::Now() - start));
          if (ok) {
            sink.done();
          }
          return ok;  // false drops the connection of a client that went away
        });
  });
  for (const auto& [prefix, render] : json_prefix_endpoints_) {
    // Prefixes are plain paths ("/debug/claims/"): no character in them is special to a regex.
    server_->Get(prefix + "(.+)", [render = render](const httplib::Request& req,
                                                    httplib::Response& res) {
      std::optional<nlohmann::json> body = render(req.matches[1].str());
      if (!body.has_value()) {
        res.status = 404;
        body = nlohmann::json{{"error", "not found"}, {"path", req.path}};
      }
      res.set_content(body->dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
                      "application/json");
    });
  }
  for (const auto& [path, render] : json_endpoints_) {
    server_->Get(path, [render = render](const httplib::Request&, httplib::Response& res) {
      // Claim names and API error texts end up here: never let a stray byte fail the page.
      res.set_content(render().dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
                      "application/json");
    });
  }
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
  listen_returned_ = false;
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    listen_returned_ = true;
  });
  // httplib's stop() does nothing until the listen loop runs, so a Stop() that came first would
  // leave the thread in accept() and the join hanging; wait for the loop (or its early end).
  while (!server_->is_running() && !listen_returned_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  DLOG(kInfo, "http", "serving metrics",
       {{"address", host},
        {"port", port_},
        {"tls", security.tls_cert_file.empty() ? "off" : "on"},
        {"auth", token_file_.empty() ? "none" : "bearer"}});
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
