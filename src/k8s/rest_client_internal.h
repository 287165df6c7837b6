// The REST client's insides, shared by the files that implement it (private to
// src/k8s/rest_client*.cc; the public face is rest_client.h):
//   rest_client.cc             requests, retries and the verbs
//   rest_client_connection.cc  the server URL, the TLS material and the connection pool
//   rest_client_watch.cc       watch streams
#pragma once

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "src/k8s/projection.h"
#include "src/k8s/rest_client.h"

namespace dralens::k8s {
namespace rest {

// Percent-encodes everything but RFC 3986 unreserved characters.
std::string Escape(absl::string_view text);

// A URL's query string, built a parameter at a time: "?k=v&k2=v2", each part percent-encoded.
// A parameter with an empty value is left out, as the API server reads it as absent anyway.
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

// A response body or watch line, through `projection` when given; discarded when malformed.
nlohmann::json ParseBody(absl::string_view text, const Projection* projection);
// Fills in kind/apiVersion, which list items omit, so cached objects look the same whether
// they came from a list or a watch.
void Normalize(const ResourceType& type, nlohmann::json& object);

}  // namespace rest

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

}  // namespace dralens::k8s
