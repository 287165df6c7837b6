#include "src/k8s/rest_client.h"

#include <httplib.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/k8s/http_stream.h"
#include "src/k8s/openssl_text.h"

namespace dralens::k8s {
namespace {

// A server or proxy that echoes the request's credentials in an error body must not carry
// them into our errors and logs.
absl::Status RedactToken(absl::Status status, const std::string& token) {
  if (status.ok() || token.empty() || status.message().find(token) == absl::string_view::npos) {
    return status;
  }
  absl::Status redacted(status.code(),
                        absl::StrReplaceAll(status.message(), {{token, "<redacted>"}}));
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { redacted.SetPayload(url, payload); });
  return redacted;
}

constexpr absl::string_view kComponent = "k8s-client";
// A single watch event larger than this is treated as a malformed stream.
constexpr size_t kMaxWatchLine = 64 << 20;
constexpr size_t kMaxErrorBody = 64 << 10;

// Percent-encodes everything but RFC 3986 unreserved characters.
std::string Escape(absl::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

class Query {
 public:
  void Add(absl::string_view key, absl::string_view value) {
    if (value.empty()) {
      return;
    }
    absl::StrAppend(&text_, text_.empty() ? "?" : "&", Escape(key), "=", Escape(value));
  }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

std::string DescribeHttplibError(httplib::Error error) { return httplib::to_string(error); }

bool IsSafeMethod(absl::string_view method) { return method == "GET"; }

// Fills in kind/apiVersion, which list items omit, so cached objects look the same whether
// they came from a list or a watch.
// A response body or watch line, through `projection` when given; discarded when malformed.
nlohmann::json ParseBody(absl::string_view text, const Projection* projection) {
  if (projection == nullptr) {
    return nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  }
  absl::StatusOr<nlohmann::json> projected = ParseProjected(text, *projection);
  return projected.ok() ? *std::move(projected)
                        : nlohmann::json(nlohmann::json::value_t::discarded);
}

void Normalize(const ResourceType& type, nlohmann::json& object) {
  if (!object.is_object()) {
    return;
  }
  if (!object.contains("kind")) {
    object["kind"] = type.kind;
  }
  if (!object.contains("apiVersion")) {
    object["apiVersion"] = type.ApiVersion();
  }
}

absl::StatusOr<std::string> ReadPemSource(const std::string& file, const std::string& data,
                                          absl::string_view what) {
  if (!data.empty()) {
    return data;
  }
  absl::StatusOr<std::string> text = ReadFileToString(file);
  if (!text.ok()) {
    return common::Annotate(text.status(), absl::StrCat("read ", what));
  }
  return *text;
}

// Verifies the server chain against the configured CA only. httplib adds the system default
// paths to whatever store it is given, so the verdict is computed here against a private store.
int VerifyAgainstConfiguredCa(X509_STORE_CTX* ctx, void* arg) {
  X509_STORE* store = static_cast<X509_STORE*>(arg);
  X509* leaf = X509_STORE_CTX_get0_cert(ctx);
  STACK_OF(X509)* untrusted = X509_STORE_CTX_get0_untrusted(ctx);
  X509_STORE_CTX* own = X509_STORE_CTX_new();
  if (own == nullptr || leaf == nullptr) {
    X509_STORE_CTX_free(own);
    X509_STORE_CTX_set_error(ctx, X509_V_ERR_UNSPECIFIED);
    return 0;
  }
  int ok = 0;
  int err = X509_V_ERR_UNSPECIFIED;
  if (X509_STORE_CTX_init(own, store, leaf, untrusted) == 1) {
    X509_STORE_CTX_set_default(own, "ssl_server");
    ok = X509_verify_cert(own);
    err = X509_STORE_CTX_get_error(own);
  }
  X509_STORE_CTX_free(own);
  X509_STORE_CTX_set_error(ctx,
                           ok == 1 ? X509_V_OK : (err == X509_V_OK ? X509_V_ERR_UNSPECIFIED : err));
  return ok == 1 ? 1 : 0;
}

// One line of a watch stream: parsed (through `projection` when set) and handed to
// `callback`. Returns false when the watch must end: the callback said so
// (`ended_by_callback`), or the line is no event or an ERROR event (`status`).
bool DeliverWatchLine(const ResourceType& type, absl::string_view line,
                      const std::optional<Projection>& projection, const std::string& context,
                      const WatchEventCallback& callback, absl::Status& status,
                      bool& ended_by_callback) {
  const Projection* p = projection.has_value() ? &*projection : nullptr;
  nlohmann::json event = ParseBody(line, p);
  // An ERROR event carries a Status, which the projection of the watched type would cut.
  if (p != nullptr && event.is_object() && event.value("type", nlohmann::json()) == "ERROR") {
    event = ParseBody(line, nullptr);
  }
  if (event.is_discarded() || !event.is_object() || !event.contains("type") ||
      !event["type"].is_string() || !event.contains("object") || !event["object"].is_object()) {
    status = absl::DataLossError(
        absl::StrCat(context, ": malformed watch event (", line.size(), " bytes)"));
    return false;
  }
  const std::string& event_type = event["type"].get_ref<const std::string&>();
  WatchEvent out;
  if (event_type == "ADDED") {
    out.type = WatchEventType::kAdded;
  } else if (event_type == "MODIFIED") {
    out.type = WatchEventType::kModified;
  } else if (event_type == "DELETED") {
    out.type = WatchEventType::kDeleted;
  } else if (event_type == "BOOKMARK") {
    out.type = WatchEventType::kBookmark;
  } else if (event_type == "ERROR") {
    status = StatusFromApiStatus(event["object"], context);
    return false;
  } else {
    status =
        absl::DataLossError(absl::StrCat(context, ": unknown watch event type '", event_type, "'"));
    return false;
  }
  out.object = std::move(event["object"]);
  if (out.type != WatchEventType::kBookmark) {
    Normalize(type, out.object);
  }
  if (!callback(out)) {
    ended_by_callback = true;
    return false;
  }
  return true;
}

absl::StatusOr<X509_STORE*> StoreFromPem(const std::string& pem, absl::string_view origin) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) {
    return absl::InternalError("BIO_new_mem_buf failed");
  }
  X509_STORE* store = X509_STORE_new();
  int count = 0;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store, cert);
    X509_free(cert);
    ++count;
  }
  ERR_clear_error();
  BIO_free(bio);
  if (count == 0) {
    X509_STORE_free(store);
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": no PEM certificate found in the certificate authority"));
  }
  return store;
}

}  // namespace

// TLS material shared by every connection of one client.
struct RestClient::Tls {
  std::string ca_pem;                  // empty: system store
  X509_STORE* verify_store = nullptr;  // the configured CA only
  X509* client_cert = nullptr;
  EVP_PKEY* client_key = nullptr;
  // Watches' TLS context (HttpStream): the same trust, verification and client certificate as
  // the connections above.
  SSL_CTX* watch_ctx = nullptr;

  ~Tls() {
    SSL_CTX_free(watch_ctx);
    X509_STORE_free(verify_store);
    X509_free(client_cert);
    EVP_PKEY_free(client_key);
  }
};

namespace {

// A TLS context that trusts the configured CA only (`verify_store`, through the same
// verification callback), or else the system store; nothing is checked when `insecure`.
absl::StatusOr<SSL_CTX*> WatchTlsContext(X509* client_cert, EVP_PKEY* client_key,
                                         X509_STORE* verify_store, bool insecure) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) {
    return absl::InternalError(absl::StrCat("TLS client setup failed: ", OpenSslError()));
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  if (client_cert != nullptr && (SSL_CTX_use_certificate(ctx, client_cert) != 1 ||
                                 SSL_CTX_use_PrivateKey(ctx, client_key) != 1)) {
    const std::string error = OpenSslError();
    SSL_CTX_free(ctx);
    return absl::InvalidArgumentError(absl::StrCat("client certificate: ", error));
  }
  if (insecure) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
    return ctx;
  }
  if (verify_store != nullptr) {
    SSL_CTX_set_cert_verify_callback(ctx, &VerifyAgainstConfiguredCa, verify_store);
  } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
    const std::string error = OpenSslError();
    SSL_CTX_free(ctx);
    return absl::InternalError(absl::StrCat("system certificate store: ", error));
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  return ctx;
}

}  // namespace

struct RestClient::Request {
  std::string method;
  absl::string_view verb;  // metrics label
  std::string resource;
  std::string path;
  std::string body;
  std::string content_type;
};

struct RestClient::Attempt {
  bool transport_ok = false;
  absl::Status transport_error;
  int status = 0;
  std::string body;
  std::string retry_after;
};

RestClient::RestClient(RestConfig config, RestClientOptions options)
    : config_(std::move(config)),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : common::RealClock()),
      tokens_(config_) {}

RestClient::~RestClient() {
  absl::MutexLock lock(&pool_mu_);
  idle_.clear();  // connections before the TLS material they reference
}

absl::StatusOr<std::unique_ptr<RestClient>> RestClient::FromConfig(const RestConfig& config,
                                                                   RestClientOptions options) {
  std::unique_ptr<RestClient> client(new RestClient(config, std::move(options)));
  RETURN_IF_ERROR(client->Init());
  return client;
}

absl::Status RestClient::Init() {
  absl::string_view rest = config_.server;
  if (absl::ConsumePrefix(&rest, "https://")) {
    https_ = true;
  } else if (absl::ConsumePrefix(&rest, "http://")) {
    https_ = false;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("server URL must start with http:// or https://, got '", config_.server, "'"));
  }
  const size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  if (slash != absl::string_view::npos) {
    base_path_ = std::string(absl::StripSuffix(rest.substr(slash), "/"));
  }
  absl::string_view host = authority;
  absl::string_view port_text;
  if (absl::StartsWith(authority, "[")) {
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad server URL '", config_.server, "'"));
    }
    host = authority.substr(1, close - 1);
    absl::string_view after = authority.substr(close + 1);
    if (absl::ConsumePrefix(&after, ":")) {
      port_text = after;
    }
  } else if (const size_t colon = authority.rfind(':'); colon != absl::string_view::npos) {
    host = authority.substr(0, colon);
    port_text = authority.substr(colon + 1);
  }
  if (host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("server URL '", config_.server, "' has no host"));
  }
  host_ = std::string(host);
  port_ = https_ ? 443 : 80;
  if (!port_text.empty() && (!absl::SimpleAtoi(port_text, &port_) || port_ <= 0 || port_ > 65535)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad port in server URL '", config_.server, "'"));
  }

  const bool has_cert =
      !config_.client_certificate_file.empty() || !config_.client_certificate_data.empty();
  const bool has_ca =
      !config_.certificate_authority_file.empty() || !config_.certificate_authority_data.empty();
  if (!https_) {
    if (has_cert) {
      return absl::InvalidArgumentError(
          absl::StrCat("client certificates need an https:// server, got '", config_.server, "'"));
    }
    return absl::OkStatus();
  }
  tls_ = std::make_unique<Tls>();
  if (has_ca && !config_.insecure_skip_tls_verify) {
    ASSIGN_OR_RETURN(tls_->ca_pem,
                     ReadPemSource(config_.certificate_authority_file,
                                   config_.certificate_authority_data, "certificate authority"));
    const std::string origin = config_.certificate_authority_data.empty()
                                   ? config_.certificate_authority_file
                                   : std::string("certificate-authority-data");
    ASSIGN_OR_RETURN(tls_->verify_store, StoreFromPem(tls_->ca_pem, origin));
  }
  if (has_cert) {
    ASSIGN_OR_RETURN(std::string cert_pem,
                     ReadPemSource(config_.client_certificate_file, config_.client_certificate_data,
                                   "client certificate"));
    ASSIGN_OR_RETURN(std::string key_pem,
                     ReadPemSource(config_.client_key_file, config_.client_key_data, "client key"));
    BIO* bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
    tls_->client_cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    if (tls_->client_cert == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "client certificate ",
          config_.client_certificate_data.empty() ? config_.client_certificate_file
                                                  : std::string("(client-certificate-data)"),
          " is not a PEM certificate: ", OpenSslError()));
    }
    bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
    tls_->client_key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    if (tls_->client_key == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("client key ",
                       config_.client_key_data.empty() ? config_.client_key_file
                                                       : std::string("(client-key-data)"),
                       " is not a PEM private key: ", OpenSslError()));
    }
    if (X509_check_private_key(tls_->client_cert, tls_->client_key) != 1) {
      ERR_clear_error();
      return absl::InvalidArgumentError("client key does not match the client certificate");
    }
  }
  ASSIGN_OR_RETURN(tls_->watch_ctx,
                   WatchTlsContext(tls_->client_cert, tls_->client_key, tls_->verify_store,
                                   config_.insecure_skip_tls_verify));
  // Build one connection now so that TLS setup problems surface at startup.
  ASSIGN_OR_RETURN(auto probe, NewConnection());
  Release(std::move(probe));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> RestClient::NewConnection() {
  std::unique_ptr<httplib::ClientImpl> connection;
  if (https_) {
    auto ssl =
        std::make_unique<httplib::SSLClient>(host_, port_, tls_->client_cert, tls_->client_key);
    if (!ssl->is_valid()) {
      return absl::InternalError(absl::StrCat("TLS client setup failed: ", OpenSslError()));
    }
    if (config_.insecure_skip_tls_verify) {
      ssl->enable_server_certificate_verification(false);
    } else {
      ssl->enable_server_certificate_verification(true);
      if (tls_->verify_store != nullptr) {
        // httplib takes ownership of this store; the verdict comes from the callback below.
        ASSIGN_OR_RETURN(X509_STORE * store, StoreFromPem(tls_->ca_pem, "certificate authority"));
        ssl->set_ca_cert_store(store);
        SSL_CTX_set_cert_verify_callback(ssl->ssl_context(), &VerifyAgainstConfiguredCa,
                                         tls_->verify_store);
      }
    }
    connection = std::move(ssl);
  } else {
    connection = std::make_unique<httplib::ClientImpl>(host_, port_);
  }
  const auto to_usec = [](absl::Duration d) {
    return std::chrono::microseconds(absl::ToInt64Microseconds(d));
  };
  connection->set_connection_timeout(to_usec(config_.connect_timeout));
  connection->set_read_timeout(to_usec(config_.request_timeout));
  connection->set_write_timeout(to_usec(config_.request_timeout));
  connection->set_url_encode(false);  // paths are escaped here
  connection->set_keep_alive(true);
  connection->set_tcp_nodelay(true);  // headers and body go out as separate writes
  connection->set_follow_location(false);
  return connection;
}

absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> RestClient::Acquire() {
  {
    absl::MutexLock lock(&pool_mu_);
    if (!idle_.empty()) {
      std::unique_ptr<httplib::ClientImpl> connection = std::move(idle_.back());
      idle_.pop_back();
      return connection;
    }
  }
  return NewConnection();
}

void RestClient::Release(std::unique_ptr<httplib::ClientImpl> connection) {
  absl::MutexLock lock(&pool_mu_);
  if (idle_.size() < options_.max_idle_connections) {
    idle_.push_back(std::move(connection));
  }
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> RestClient::Headers() {
  std::vector<std::pair<std::string, std::string>> headers;
  headers.emplace_back("Accept", "application/json");
  headers.emplace_back("User-Agent", options_.user_agent);
  ASSIGN_OR_RETURN(std::string token, tokens_.Token());
  if (!token.empty()) {
    headers.emplace_back("Authorization", absl::StrCat("Bearer ", token));
  }
  return headers;
}

RestClient::Attempt RestClient::RoundTrip(const Request& request) {
  Attempt attempt;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> headers = Headers();
  if (!headers.ok()) {
    attempt.transport_error = headers.status();
    return attempt;
  }
  absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> connection = Acquire();
  if (!connection.ok()) {
    attempt.transport_error = connection.status();
    return attempt;
  }
  httplib::Request req;
  req.method = request.method;
  req.path = base_path_ + request.path;
  for (auto& [key, value] : *headers) {
    req.headers.emplace(key, value);
  }
  if (!request.content_type.empty()) {
    req.headers.emplace("Content-Type", request.content_type);
  }
  req.body = request.body;
  const absl::Time start = absl::Now();
  httplib::Result result = (*connection)->send(req);
  const absl::Duration elapsed = absl::Now() - start;
  if (!result) {
    const httplib::Error error = result.error();
    const std::string what =
        absl::StrCat(request.method, " ", request.path, ": ", DescribeHttplibError(error));
    if (error == httplib::Error::ConnectionTimeout ||
        (error == httplib::Error::Read && elapsed >= config_.request_timeout * 0.9)) {
      attempt.transport_error = absl::DeadlineExceededError(absl::StrCat(what, " (timed out)"));
    } else if (error == httplib::Error::SSLServerVerification) {
      attempt.transport_error = absl::UnavailableError(absl::StrCat(what, ": ", kUntrustedServer));
    } else {
      attempt.transport_error = absl::UnavailableError(what);
    }
    return attempt;  // the connection is dropped, never reused after a failure
  }
  attempt.transport_ok = true;
  attempt.status = result->status;
  attempt.body = std::move(result->body);
  attempt.retry_after = result->get_header_value("Retry-After");
  if (result->get_header_value("Connection") != "close") {
    Release(*std::move(connection));
  }
  return attempt;
}

absl::Duration RestClient::Backoff(int retry) {
  const RetryPolicy& policy = options_.retry;
  absl::Duration d = policy.initial_backoff;
  for (int i = 1; i < retry && d < policy.max_backoff; ++i) {
    d *= 2;
  }
  d = std::min(d, policy.max_backoff);
  // Equal jitter: half fixed, half random, so concurrent clients spread out.
  absl::BitGen gen;
  return d / 2 + absl::Uniform(gen, 0.0, 1.0) * (d / 2);
}

absl::StatusOr<nlohmann::json> RestClient::Do(const Request& request,
                                              const Projection* projection) {
  const RetryPolicy& policy = options_.retry;
  const bool safe = IsSafeMethod(request.method);
  int backoff_attempts = 0;
  int server_asked_attempts = 0;
  bool retried_unauthorized = false;
  const std::string context = absl::StrCat(request.method, " ", request.path);
  while (true) {
    Attempt attempt = RoundTrip(request);
    if (options_.metrics != nullptr) {
      options_.metrics->RecordRequest(request.verb, request.resource,
                                      attempt.transport_ok ? attempt.status : 0);
    }
    absl::Status status;
    if (!attempt.transport_ok) {
      status = attempt.transport_error;
    } else if (attempt.status >= 200 && attempt.status < 300) {
      nlohmann::json body = ParseBody(attempt.body, projection);
      if (!body.is_discarded() && body.is_object()) {
        return body;
      }
      status = absl::UnavailableError(absl::StrCat(
          context, ": truncated or malformed response body (", attempt.body.size(), " bytes)"));
    } else {
      status =
          RedactToken(StatusFromHttp(attempt.status, attempt.body, attempt.retry_after, context),
                      tokens_.Token().value_or(""));
    }

    // 401 with a token file: the token may have rotated under us. One re-read, one retry.
    if (attempt.transport_ok && attempt.status == 401 && !retried_unauthorized &&
        !config_.token_file.empty() && config_.token.empty()) {
      retried_unauthorized = true;
      tokens_.Invalidate();
      continue;
    }
    // The server says it did not process the request: retry any verb after its delay.
    const bool server_asked =
        attempt.transport_ok &&
        (attempt.status == 429 || (attempt.status >= 500 && !attempt.retry_after.empty()));
    if (server_asked && ++server_asked_attempts < policy.max_retry_after_attempts) {
      absl::Duration delay = RetryAfter(status).value_or(policy.default_retry_after);
      delay = std::min(delay, policy.max_retry_after);
      DLOG(
          kInfo, kComponent, "server asked to retry",
          {{"request", context}, {"code", attempt.status}, {"delay", absl::FormatDuration(delay)}});
      clock_.SleepFor(delay);
      continue;
    }
    const bool transient = !attempt.transport_ok || attempt.status >= 500 ||
                           (attempt.status >= 200 && attempt.status < 300);
    if (safe && transient && !server_asked && ++backoff_attempts < policy.max_attempts) {
      const absl::Duration delay = Backoff(backoff_attempts);
      DLOG(kDebug, kComponent, "retrying request",
           {{"request", context},
            {"error", status.message()},
            {"delay", absl::FormatDuration(delay)}});
      clock_.SleepFor(delay);
      continue;
    }
    return status;
  }
}

absl::StatusOr<std::string> RestClient::Path(const ResourceType& type, absl::string_view ns,
                                             absl::string_view name,
                                             absl::string_view subresource) const {
  if (!type.namespaced && !ns.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(type.plural, " are cluster-scoped; got namespace '", ns, "'"));
  }
  std::string path = type.group.empty() ? absl::StrCat("/api/", type.version)
                                        : absl::StrCat("/apis/", type.group, "/", type.version);
  if (!ns.empty()) {
    absl::StrAppend(&path, "/namespaces/", Escape(ns));
  }
  absl::StrAppend(&path, "/", type.plural);
  if (!name.empty()) {
    absl::StrAppend(&path, "/", Escape(name));
  }
  if (!subresource.empty()) {
    absl::StrAppend(&path, "/", Escape(subresource));
  }
  return path;
}

absl::StatusOr<nlohmann::json> RestClient::Get(const ResourceType& type, absl::string_view ns,
                                               absl::string_view name) {
  if (name.empty()) {
    return absl::InvalidArgumentError("Get: empty name");
  }
  if (type.namespaced && ns.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("Get ", type.plural, ": namespace required"));
  }
  ASSIGN_OR_RETURN(std::string path, Path(type, ns, name, ""));
  ASSIGN_OR_RETURN(nlohmann::json object, Do({"GET", "get", type.plural, path, "", ""}));
  Normalize(type, object);
  return object;
}

absl::StatusOr<nlohmann::json> RestClient::ServerVersion() {
  return Do({"GET", "get", "version", "/version", "", ""});
}

absl::StatusOr<ListResult> RestClient::List(const ResourceType& type, absl::string_view ns,
                                            const ListOptions& options) {
  ASSIGN_OR_RETURN(std::string path, Path(type, ns, "", ""));
  Query query;
  query.Add("labelSelector", options.label_selector);
  query.Add("fieldSelector", options.field_selector);
  if (options.limit > 0) {
    query.Add("limit", absl::StrCat(options.limit));
  }
  query.Add("continue", options.continue_token);
  query.Add("resourceVersion", options.resource_version);
  // A list keeps its metadata whole and projects each item.
  std::optional<Projection> list_projection;
  if (options.projection != nullptr) {
    list_projection =
        Projection::Fields({{"metadata", Projection()}, {"items", *options.projection}});
  }
  ASSIGN_OR_RETURN(nlohmann::json list,
                   Do({"GET", "list", type.plural, path + query.text(), "", ""},
                      list_projection.has_value() ? &*list_projection : nullptr));
  ListResult result;
  const auto items = list.find("items");
  if (items != list.end() && !items->is_null()) {
    if (!items->is_array()) {
      return absl::UnavailableError(absl::StrCat("LIST ", path, ": 'items' is not an array"));
    }
    result.items.reserve(items->size());
    for (nlohmann::json& item : *items) {
      if (!item.is_object()) {
        return absl::UnavailableError(absl::StrCat("LIST ", path, ": an item is not an object"));
      }
      Normalize(type, item);
      result.items.push_back(std::move(item));
    }
  }
  const auto metadata = list.find("metadata");
  if (metadata != list.end() && metadata->is_object()) {
    result.resource_version = metadata->value("resourceVersion", "");
    result.continue_token = metadata->value("continue", "");
  }
  return result;
}

absl::Status RestClient::Watch(const ResourceType& type, absl::string_view ns,
                               const WatchOptions& options, const WatchEventCallback& callback,
                               WatchCancel* cancel) {
  ASSIGN_OR_RETURN(std::string path, Path(type, ns, "", ""));
  Query query;
  query.Add("watch", "true");
  query.Add("labelSelector", options.label_selector);
  query.Add("fieldSelector", options.field_selector);
  query.Add("resourceVersion", options.resource_version);
  if (options.allow_bookmarks) {
    query.Add("allowWatchBookmarks", "true");
  }
  if (options.timeout_seconds > 0) {
    query.Add("timeoutSeconds", absl::StrCat(options.timeout_seconds));
  }
  const std::string context = absl::StrCat("WATCH ", path);
  std::optional<Projection> event_projection;
  if (options.projection != nullptr) {
    event_projection =
        Projection::Fields({{"type", Projection()}, {"object", *options.projection}});
  }
  absl::Duration read_timeout = options.read_timeout;
  if (read_timeout <= absl::ZeroDuration()) {
    read_timeout = options.timeout_seconds > 0
                       ? absl::Seconds(options.timeout_seconds) + absl::Seconds(30)
                       : absl::Minutes(10);
  }
  ASSIGN_OR_RETURN(auto headers, Headers());
  HttpStream stream({.host = host_,
                     .port = port_,
                     .tls = https_ ? tls_->watch_ctx : nullptr,
                     .verify_host = https_ && !config_.insecure_skip_tls_verify,
                     .connect_timeout = config_.connect_timeout,
                     .read_timeout = read_timeout,
                     .write_timeout = config_.request_timeout});
  if (cancel != nullptr) {
    cancel->SetAbort([&stream] { stream.Abort(); });
  }
  absl::Status stream_status;  // what ended the stream, when not its end
  bool ended_by_callback = false;
  std::string buffer;  // received, not yet a whole line
  // Hands every whole line in `buffer` to the callback; false when the watch must end.
  auto deliver = [&]() -> bool {
    size_t start = 0;
    bool go_on = true;
    while (go_on) {
      const size_t newline = buffer.find('\n', start);
      if (newline == std::string::npos) {
        break;
      }
      absl::string_view line =
          absl::StripAsciiWhitespace(absl::string_view(buffer).substr(start, newline - start));
      start = newline + 1;
      if (!line.empty()) {
        go_on = DeliverWatchLine(type, line, event_projection, context, callback, stream_status,
                                 ended_by_callback) &&
                (cancel == nullptr || !cancel->cancelled());
      }
    }
    buffer.erase(0, start);
    if (go_on && buffer.size() > kMaxWatchLine) {
      stream_status = absl::DataLossError(
          absl::StrCat(context, ": watch event larger than ", kMaxWatchLine, " bytes"));
      return false;
    }
    return go_on;
  };

  absl::Status transport = stream.Open(base_path_ + path + query.text(), headers);
  const int http_status = transport.ok() ? stream.status() : 0;
  std::string error_body;
  bool ended = false;
  if (transport.ok() && http_status == 200 && options.on_established) {
    options.on_established();
  }
  while (transport.ok() && !ended && (cancel == nullptr || !cancel->cancelled())) {
    std::string& sink = http_status == 200 ? buffer : error_body;
    absl::StatusOr<bool> more = stream.Read(sink);
    if (!more.ok()) {
      transport = more.status();
    } else if (!*more) {
      ended = true;
    } else if (http_status != 200) {
      if (error_body.size() >= kMaxErrorBody) {
        error_body.resize(kMaxErrorBody);
        ended = true;
      }
    } else if (!deliver()) {
      break;
    }
  }
  if (cancel != nullptr) {
    cancel->SetAbort(nullptr);
  }
  if (options_.metrics != nullptr) {
    options_.metrics->RecordRequest("watch", type.plural, http_status);
  }
  if (!stream_status.ok()) {
    return stream_status;
  }
  if (ended_by_callback || (cancel != nullptr && cancel->cancelled())) {
    return absl::OkStatus();
  }
  if (http_status != 0 && http_status != 200 && (ended || transport.ok())) {
    return StatusFromHttp(http_status, error_body, stream.Header("Retry-After"), context);
  }
  if (!transport.ok()) {
    if (transport.code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(absl::StrCat(context, ": ", transport.message()));
    }
    return absl::UnavailableError(absl::StrCat(context, ": stream broken: ", transport.message()));
  }
  if (!absl::StripAsciiWhitespace(buffer).empty()) {
    return absl::DataLossError(
        absl::StrCat(context, ": stream ended inside an event (", buffer.size(), " bytes)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> RestClient::Create(const ResourceType& type, absl::string_view ns,
                                                  const nlohmann::json& object) {
  if (type.namespaced && ns.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("Create ", type.plural, ": namespace required"));
  }
  ASSIGN_OR_RETURN(std::string path, Path(type, ns, "", ""));
  nlohmann::json body = object;
  Normalize(type, body);
  ASSIGN_OR_RETURN(nlohmann::json created,
                   Do({"POST", "create", type.plural, path, body.dump(), "application/json"}));
  Normalize(type, created);
  return created;
}

absl::StatusOr<nlohmann::json> RestClient::Update(const ResourceType& type, absl::string_view ns,
                                                  const nlohmann::json& object,
                                                  absl::string_view subresource) {
  const std::string name =
      object.is_object() && object.contains("metadata") && object["metadata"].is_object()
          ? object["metadata"].value("name", "")
          : "";
  if (name.empty()) {
    return absl::InvalidArgumentError("Update: object has no metadata.name");
  }
  if (type.namespaced && ns.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("Update ", type.plural, ": namespace required"));
  }
  ASSIGN_OR_RETURN(std::string path, Path(type, ns, name, subresource));
  nlohmann::json body = object;
  Normalize(type, body);
  ASSIGN_OR_RETURN(nlohmann::json updated,
                   Do({"PUT", "update", type.plural, path, body.dump(), "application/json"}));
  Normalize(type, updated);
  return updated;
}

absl::StatusOr<nlohmann::json> RestClient::MergePatch(const ResourceType& type,
                                                      absl::string_view ns, absl::string_view name,
                                                      const nlohmann::json& patch,
                                                      absl::string_view subresource) {
  if (name.empty()) {
    return absl::InvalidArgumentError("MergePatch: empty name");
  }
  if (type.namespaced && ns.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("MergePatch ", type.plural, ": namespace required"));
  }
  ASSIGN_OR_RETURN(std::string path, Path(type, ns, name, subresource));
  ASSIGN_OR_RETURN(nlohmann::json patched, Do({"PATCH", "patch", type.plural, path, patch.dump(),
                                               "application/merge-patch+json"}));
  Normalize(type, patched);
  return patched;
}

absl::Status RestClient::Delete(const ResourceType& type, absl::string_view ns,
                                absl::string_view name, const DeleteOptions& options) {
  if (name.empty()) {
    return absl::InvalidArgumentError("Delete: empty name");
  }
  if (type.namespaced && ns.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("Delete ", type.plural, ": namespace required"));
  }
  ASSIGN_OR_RETURN(std::string path, Path(type, ns, name, ""));
  nlohmann::json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
  if (!options.precondition_uid.empty()) {
    body["preconditions"]["uid"] = options.precondition_uid;
  }
  if (!options.precondition_resource_version.empty()) {
    body["preconditions"]["resourceVersion"] = options.precondition_resource_version;
  }
  if (options.grace_period_seconds.has_value()) {
    body["gracePeriodSeconds"] = *options.grace_period_seconds;
  }
  if (!options.propagation_policy.empty()) {
    body["propagationPolicy"] = options.propagation_policy;
  }
  return Do({"DELETE", "delete", type.plural, path, body.dump(), "application/json"}).status();
}

absl::Status RestClient::DeleteCollection(const ResourceType& type, absl::string_view ns,
                                          const ListOptions& options) {
  ASSIGN_OR_RETURN(std::string path, Path(type, ns, "", ""));
  Query query;
  query.Add("labelSelector", options.label_selector);
  query.Add("fieldSelector", options.field_selector);
  return Do({"DELETE", "deletecollection", type.plural, path + query.text(), "", ""}).status();
}

}  // namespace dralens::k8s
