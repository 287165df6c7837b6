#include <httplib.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "src/common/status.h"
#include "src/k8s/openssl_text.h"
#include "src/k8s/rest_client.h"
#include "src/k8s/rest_client_internal.h"

namespace dralens::k8s {
namespace {

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

}  // namespace dralens::k8s
