// RestClient: KubeClient over HTTP(S): cpp-httplib for requests, HttpStream for watches.
//
// - TLS: verification is on unless the config says insecure_skip_tls_verify. A configured CA
//   (file or inline data) is the only trust anchor; otherwise the system store is used. Client
//   certificates come from files or inline PEM data.
// - Auth: bearer token (static, or a file re-read when it rotates; a 401 forces one re-read and
//   one retry) or client certificate. Tokens are never logged.
// - Retries, like client-go: 429, and 5xx with Retry-After, are retried for every verb after the
//   server's delay (capped by RetryPolicy::max_retry_after); other 5xx, transport failures,
//   timeouts and truncated bodies are retried with jittered exponential backoff only for GET and
//   LIST. POST/PUT/PATCH/DELETE are never retried blindly.
// - Connections: a small pool of keep-alive connections for ordinary calls; every watch has its
//   own connection, read by HttpStream (http_stream.h) with the same TLS trust and client
//   certificate.
//
// Thread-safe: any number of threads may call any verb concurrently.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/common/clock.h"
#include "src/k8s/client.h"
#include "src/k8s/config.h"
#include "src/k8s/request_metrics.h"

namespace httplib {
class ClientImpl;
}

namespace dralens::k8s {

struct RetryPolicy {
  // Total attempts for backoff-retried failures (safe verbs only). 1 disables those retries.
  int max_attempts = 5;
  // Total attempts when the server asks to retry (429, 5xx with Retry-After); client-go uses 10.
  int max_retry_after_attempts = 10;
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(5);
  // The longest Retry-After honoured; longer ones are clipped to it.
  absl::Duration max_retry_after = absl::Seconds(60);
  // Delay for a 429 without Retry-After.
  absl::Duration default_retry_after = absl::Seconds(1);
};

struct RestClientOptions {
  RetryPolicy retry;
  // Clock for retry sleeps; nullptr means the real clock. Not owned.
  common::Clock* clock = nullptr;
  // Request counters; nullptr disables them. Not owned; must outlive the client.
  const KubeRequestMetrics* metrics = nullptr;
  size_t max_idle_connections = 4;
  std::string user_agent = "dralens";
};

class RestClient : public KubeClient {
 public:
  // Validates the config and loads certificates (errors name the file or field).
  static absl::StatusOr<std::unique_ptr<RestClient>> FromConfig(const RestConfig& config,
                                                                RestClientOptions options = {});
  ~RestClient() override;

  // KubeClient
  absl::StatusOr<nlohmann::json> Get(const ResourceType& type, absl::string_view ns,
                                     absl::string_view name) override;
  absl::StatusOr<ListResult> List(const ResourceType& type, absl::string_view ns,
                                  const ListOptions& options) override;
  absl::Status Watch(const ResourceType& type, absl::string_view ns, const WatchOptions& options,
                     const WatchEventCallback& callback, WatchCancel* cancel) override;
  absl::StatusOr<nlohmann::json> Create(const ResourceType& type, absl::string_view ns,
                                        const nlohmann::json& object) override;
  absl::StatusOr<nlohmann::json> Update(const ResourceType& type, absl::string_view ns,
                                        const nlohmann::json& object,
                                        absl::string_view subresource) override;
  absl::StatusOr<nlohmann::json> MergePatch(const ResourceType& type, absl::string_view ns,
                                            absl::string_view name, const nlohmann::json& patch,
                                            absl::string_view subresource) override;
  absl::Status Delete(const ResourceType& type, absl::string_view ns, absl::string_view name,
                      const DeleteOptions& options) override;
  absl::Status DeleteCollection(const ResourceType& type, absl::string_view ns,
                                const ListOptions& options) override;

  // GET /version: the server's version document ({"major": "1", "minor": "34", ...}).
  absl::StatusOr<nlohmann::json> ServerVersion();

  const RestConfig& config() const { return config_; }

 private:
  struct Tls;
  struct Request;
  struct Attempt;

  RestClient(RestConfig config, RestClientOptions options);
  absl::Status Init();

  // A fresh connection object configured for this server (watches use HttpStream).
  absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> NewConnection();
  absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> Acquire();
  void Release(std::unique_ptr<httplib::ClientImpl> connection);

  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Headers();
  Attempt RoundTrip(const Request& request);
  // Runs `request` with the retry policy; returns the parsed JSON body of a 2xx answer.
  // Sends the request (with retries) and parses the answer, through `projection` when given.
  absl::StatusOr<nlohmann::json> Do(const Request& request, const Projection* projection = nullptr);

  absl::StatusOr<std::string> Path(const ResourceType& type, absl::string_view ns,
                                   absl::string_view name, absl::string_view subresource) const;
  absl::Duration Backoff(int retry);

  const RestConfig config_;
  const RestClientOptions options_;
  common::Clock& clock_;
  TokenSource tokens_;
  bool https_ = false;
  std::string host_;
  int port_ = 0;
  std::string base_path_;
  std::unique_ptr<Tls> tls_;

  absl::Mutex pool_mu_;
  std::vector<std::unique_ptr<httplib::ClientImpl>> idle_ ABSL_GUARDED_BY(pool_mu_);
};

}  // namespace dralens::k8s
