#include "src/telemetry/tracing/otlp_http_exporter.h"

#include <httplib.h>

#include <algorithm>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/gzip.h"
#include "src/common/log.h"
#include "src/common/status.h"

namespace dralens::telemetry {
namespace {

constexpr absl::string_view kComponent = "otlp-exporter";
// Waits are sliced so Shutdown() is noticed within this, whatever the clock.
constexpr absl::Duration kWaitSlice = absl::Milliseconds(50);
constexpr size_t kMaxLoggedBody = 512;

bool IsRetryableStatus(int status) {
  return status == 429 || status == 502 || status == 503 || status == 504;
}

bool IsReservedHeader(absl::string_view name) {
  return absl::EqualsIgnoreCase(name, "Content-Type") ||
         absl::EqualsIgnoreCase(name, "Content-Encoding") ||
         absl::EqualsIgnoreCase(name, "Content-Length") || absl::EqualsIgnoreCase(name, "Host");
}

// Retry-After is either delay-seconds or an HTTP-date (RFC 9110 §10.2.3).
std::optional<absl::Duration> ParseRetryAfter(absl::string_view value, absl::Time now) {
  value = absl::StripAsciiWhitespace(value);
  if (value.empty()) {
    return std::nullopt;
  }
  int64_t seconds = 0;
  if (absl::SimpleAtoi(value, &seconds)) {
    if (seconds < 0) {
      return std::nullopt;
    }
    return absl::Seconds(seconds);
  }
  absl::Time when;
  std::string error;
  if (absl::ParseTime("%a, %d %b %Y %H:%M:%S GMT", std::string(value), absl::UTCTimeZone(), &when,
                      &error)) {
    return std::max(when - now, absl::ZeroDuration());
  }
  return std::nullopt;
}

std::string HostHeader(const HttpUrl& url) {
  const bool ipv6 = url.host.find(':') != std::string::npos;
  std::string host = ipv6 ? absl::StrCat("[", url.host, "]") : url.host;
  const int default_port = url.scheme == "https" ? 443 : 80;
  if (url.port != default_port) {
    absl::StrAppend(&host, ":", url.port);
  }
  return host;
}

template <typename Setter>
void SetTimeout(absl::Duration timeout, Setter setter) {
  timeout = std::max(timeout, absl::Milliseconds(1));
  const int64_t micros = absl::ToInt64Microseconds(timeout);
  setter(static_cast<time_t>(micros / 1000000), static_cast<time_t>(micros % 1000000));
}

}  // namespace

absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url) {
  const auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("URL \"", url, "\" ", why));
  };
  HttpUrl out;
  absl::string_view rest = url;
  if (absl::StartsWithIgnoreCase(rest, "http://")) {
    out.scheme = "http";
    out.port = 80;
    rest.remove_prefix(7);
  } else if (absl::StartsWithIgnoreCase(rest, "https://")) {
    out.scheme = "https";
    out.port = 443;
    rest.remove_prefix(8);
  } else {
    return invalid("must start with http:// or https://");
  }
  const size_t authority_end = rest.find_first_of("/?#");
  absl::string_view authority = rest.substr(0, authority_end);
  absl::string_view path =
      authority_end == absl::string_view::npos ? absl::string_view() : rest.substr(authority_end);
  if (absl::StrContains(authority, '@')) {
    return invalid("must not carry user info");
  }
  if (absl::StrContains(path, '#')) {
    return invalid("must not carry a fragment");
  }
  absl::string_view port;
  if (absl::StartsWith(authority, "[")) {
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) {
      return invalid("has an unterminated IPv6 address");
    }
    out.host = std::string(authority.substr(1, close - 1));
    absl::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') {
        return invalid("has junk after the IPv6 address");
      }
      port = after.substr(1);
    }
  } else {
    const size_t colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != absl::string_view::npos) {
      port = authority.substr(colon + 1);
    }
  }
  if (out.host.empty()) {
    return invalid("has no host");
  }
  if (!port.empty() || absl::EndsWith(authority, ":")) {
    int value = 0;
    if (!absl::SimpleAtoi(port, &value) || value < 1 || value > 65535 ||
        !std::all_of(port.begin(), port.end(), absl::ascii_isdigit)) {
      return invalid("has an invalid port");
    }
    out.port = value;
  }
  if (path.empty()) {
    out.path = "/";
  } else if (path[0] == '?') {
    out.path = absl::StrCat("/", path);
  } else {
    out.path = std::string(path);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<OtlpHttpExporter>> OtlpHttpExporter::Create(
    OtlpHttpExporterOptions options, TracingStats& stats, common::Clock& clock) {
  absl::StatusOr<HttpUrl> url = ParseHttpUrl(options.url);
  if (!url.ok()) {
    return common::Annotate(url.status(), "OTLP traces endpoint");
  }
  std::unique_ptr<httplib::ClientImpl> client;
  if (url->scheme == "https") {
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
    auto ssl = std::make_unique<httplib::SSLClient>(url->host, url->port, options.client_cert_file,
                                                    options.client_key_file);
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("OTLP traces endpoint ", options.url, ": cannot load client certificate ",
                       options.client_cert_file, " with key ", options.client_key_file));
    }
    // With no CA file httplib verifies against the system trust store.
    if (!options.ca_file.empty()) {
      ssl->set_ca_cert_path(options.ca_file);
    }
    client = std::move(ssl);
#else
    return absl::FailedPreconditionError(absl::StrCat(
        "OTLP traces endpoint ", options.url, ": https needs cpp-httplib built with OpenSSL"));
#endif
  } else {
    client = std::make_unique<httplib::ClientImpl>(url->host, url->port);
  }
  client->set_keep_alive(true);
  // Headers and body go out in separate writes; without this, delayed ACKs add ~40 ms each.
  client->set_tcp_nodelay(true);
  // Bodies are JSON we gzip ourselves, or not at all.
  client->set_compress(false);
  HttpUrl parsed = *std::move(url);
  return std::unique_ptr<OtlpHttpExporter>(
      new OtlpHttpExporter(std::move(options), std::move(parsed), std::move(client), stats, clock));
}

OtlpHttpExporter::OtlpHttpExporter(OtlpHttpExporterOptions options, HttpUrl url,
                                   std::unique_ptr<httplib::ClientImpl> client, TracingStats& stats,
                                   common::Clock& clock)
    : options_(std::move(options)),
      url_(std::move(url)),
      stats_(stats),
      clock_(clock),
      client_(std::move(client)) {}

OtlpHttpExporter::~OtlpHttpExporter() = default;

void OtlpHttpExporter::Shutdown() noexcept {
  shutdown_.store(true);
  // Breaks a request in flight: httplib shuts the socket down under its own lock.
  client_->stop();
}

bool OtlpHttpExporter::WaitUnlessShutdown(absl::Duration d) {
  while (d > absl::ZeroDuration() && !shutdown_.load()) {
    const absl::Duration step = std::min(d, kWaitSlice);
    clock_.SleepFor(step);
    d -= step;
  }
  return !shutdown_.load();
}

ExportResult OtlpHttpExporter::Export(absl::Span<const SpanData> spans,
                                      absl::Duration timeout) noexcept {
  if (spans.empty()) {
    return {.success = true};
  }
  if (shutdown_.load()) {
    return {.success = false};
  }
  const absl::Time deadline = clock_.Now() + std::min(options_.timeout, timeout);
  try {
    std::string body = EncodeTraceRequest(options_.resource, options_.scope, spans);
    bool gzipped = false;
    if (options_.gzip) {
      absl::StatusOr<std::string> compressed = common::Gzip(body);
      if (compressed.ok()) {
        body = *std::move(compressed);
        gzipped = true;
      } else {
        DLOG(kWarn, kComponent, "sending spans uncompressed",
             {{"error", common::Message(compressed.status())}});
      }
    }
    absl::MutexLock lock(&export_mu_);
    return ExportBody(body, gzipped, spans.size(), deadline);
  } catch (const std::exception& e) {
    // Telemetry must not take the host down; the batch is lost and counted by the caller.
    DLOG(kError, kComponent, "span export failed", {{"error", e.what()}});
    return {.success = false};
  }
}

ExportResult OtlpHttpExporter::ExportBody(const std::string& body, bool gzipped, size_t span_count,
                                          absl::Time deadline) {
  httplib::Request request;
  request.method = "POST";
  request.path = url_.path;
  for (const auto& [name, value] : options_.headers) {
    if (!IsReservedHeader(name)) {
      request.headers.emplace(name, value);
    }
  }
  request.headers.emplace("Host", HostHeader(url_));
  request.headers.emplace("Content-Type", "application/json");
  if (gzipped) {
    request.headers.emplace("Content-Encoding", "gzip");
  }
  if (!options_.scope.version.empty()) {
    request.headers.emplace("User-Agent", absl::StrCat("dralens/", options_.scope.version));
  }
  request.body = body;

  absl::Duration backoff = options_.initial_backoff;
  std::string last_error = "export deadline passed";
  int attempts = 0;
  while (true) {
    const absl::Time start = clock_.Now();
    const absl::Duration remaining = deadline - start;
    if (remaining <= absl::ZeroDuration()) {
      break;
    }
    SetTimeout(remaining, [&](time_t s, time_t us) { client_->set_connection_timeout(s, us); });
    SetTimeout(remaining, [&](time_t s, time_t us) { client_->set_read_timeout(s, us); });
    SetTimeout(remaining, [&](time_t s, time_t us) { client_->set_write_timeout(s, us); });

    std::optional<absl::Duration> retry_after;
    ++attempts;
    // httplib's timeouts run on real time whatever clock_ is, so this one measures the attempt.
    const absl::Time sent = absl::Now();
    httplib::Result result = client_->send(request);
    if (shutdown_.load()) {
      last_error = "exporter shut down";
      break;
    }
    if (!result) {
      const httplib::Error error = result.error();
      // A certificate that does not verify will not verify on the next attempt either.
      if (error == httplib::Error::SSLServerVerification ||
          error == httplib::Error::SSLLoadingCerts) {
        stats_.requests_connection_error.fetch_add(1, std::memory_order_relaxed);
        last_error = absl::StrCat("TLS: ", httplib::to_string(error));
        break;
      }
      // httplib reports a read timeout as a plain read error: tell them apart by the time taken.
      if (error == httplib::Error::ConnectionTimeout ||
          ((error == httplib::Error::Read || error == httplib::Error::Write) &&
           absl::Now() - sent >= remaining * 0.9)) {
        stats_.requests_timeout.fetch_add(1, std::memory_order_relaxed);
        last_error = "no response before the export timeout";
      } else {
        stats_.requests_connection_error.fetch_add(1, std::memory_order_relaxed);
        last_error = absl::StrCat("connection error: ", httplib::to_string(error));
      }
    } else if (result->status >= 200 && result->status < 300) {
      stats_.requests_success.fetch_add(1, std::memory_order_relaxed);
      const PartialSuccess partial = ParsePartialSuccess(result->body);
      if (partial.rejected_spans > 0 || !partial.error_message.empty()) {
        DLOG(kWarn, kComponent, "collector rejected some spans",
             {{"rejected_spans", partial.rejected_spans},
              {"spans", span_count},
              {"message", partial.error_message}});
      }
      return {.success = true, .rejected_spans = partial.rejected_spans};
    } else if (IsRetryableStatus(result->status)) {
      stats_.requests_retryable_status.fetch_add(1, std::memory_order_relaxed);
      last_error = absl::StrCat("HTTP ", result->status);
      if (result->has_header("Retry-After")) {
        retry_after = ParseRetryAfter(result->get_header_value("Retry-After"), clock_.Now());
      }
    } else {
      stats_.requests_failed_status.fetch_add(1, std::memory_order_relaxed);
      DLOG(kWarn, kComponent, "collector refused spans; not retrying",
           {{"status", result->status},
            {"spans", span_count},
            {"url", options_.url},
            {"body", absl::string_view(result->body).substr(0, kMaxLoggedBody)}});
      return {.success = false};
    }

    const absl::Duration wait = retry_after.value_or(backoff * absl::Uniform(bitgen_, 0.5, 1.0));
    backoff = std::min(backoff * 2, options_.max_backoff);
    if (clock_.Now() + wait >= deadline) {
      break;
    }
    if (!WaitUnlessShutdown(wait)) {
      last_error = "exporter shut down";
      break;
    }
  }
  DLOG(kWarn, kComponent, "span export failed; dropping the batch",
       {{"spans", span_count},
        {"attempts", attempts},
        {"url", options_.url},
        {"error", last_error}});
  return {.success = false};
}

}  // namespace dralens::telemetry
