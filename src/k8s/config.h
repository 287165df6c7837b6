// RestConfig: where the API server is and how to authenticate to it.
//
// Loaded from a kubeconfig file (LoadKubeconfig) or from the pod's service account
// (LoadInClusterConfig). Plain data: copyable, no I/O after loading except TokenSource, which
// re-reads a token file when it changes on disk (service-account tokens rotate).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dralens::k8s {

struct RestConfig {
  // "https://host:port" or "http://host:port", optionally with a path prefix.
  std::string server;

  // Bearer token auth. `token` wins over `token_file` when both are set.
  std::string token;
  std::string token_file;

  // Client certificate auth: PEM data, or files read when the client is built.
  std::string client_certificate_file;
  std::string client_certificate_data;
  std::string client_key_file;
  std::string client_key_data;

  // Trust anchors for the server certificate: PEM data or a file. Empty: the system store.
  std::string certificate_authority_file;
  std::string certificate_authority_data;
  // TLS verification is on unless this is set explicitly.
  bool insecure_skip_tls_verify = false;

  // The namespace of the selected context (kubeconfig) or of the pod (in-cluster); may be empty.
  std::string default_namespace;

  absl::Duration connect_timeout = absl::Seconds(10);
  // Read/write timeout of ordinary requests; watches use their own (see WatchOptions).
  absl::Duration request_timeout = absl::Seconds(30);
};

struct KubeconfigOptions {
  // The context to use; empty means `current-context`.
  std::string context;
};

// Parses a kubeconfig file. Relative file references resolve against the file's directory.
// Errors name the file and the offending key.
absl::StatusOr<RestConfig> LoadKubeconfig(const std::string& path,
                                          const KubeconfigOptions& options = {});

// Parses kubeconfig YAML text. `base_dir` resolves relative paths; `origin` names the source in
// error messages.
absl::StatusOr<RestConfig> ParseKubeconfig(absl::string_view yaml, const std::string& base_dir,
                                           const std::string& origin,
                                           const KubeconfigOptions& options = {});

inline constexpr absl::string_view kServiceAccountDir =
    "/var/run/secrets/kubernetes.io/serviceaccount";

// Builds the in-cluster config from KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT and the
// service-account directory (token, ca.crt, namespace). The token is referenced by file so that
// rotations are picked up.
absl::StatusOr<RestConfig> LoadInClusterConfig(
    absl::string_view service_account_dir = kServiceAccountDir);

// TokenSource: the current bearer token of a RestConfig. With a token file, re-reads the file
// whenever its identity (inode, size, mtime) changes, so rotated tokens are used at once.
// Thread-safe. Never logs the token.
class TokenSource {
 public:
  explicit TokenSource(const RestConfig& config);

  // The token to send; empty when none is configured. Errors only when a token file is
  // configured and cannot be read.
  absl::StatusOr<std::string> Token();
  // Forces the next Token() call to re-read the file (e.g. after a 401).
  void Invalidate();
  bool configured() const { return !static_token_.empty() || !file_.empty(); }

 private:
  const std::string static_token_;
  const std::string file_;
  absl::Mutex mu_;
  std::string cached_ ABSL_GUARDED_BY(mu_);
  uint64_t inode_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t size_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t mtime_ns_ ABSL_GUARDED_BY(mu_) = -1;
  bool valid_ ABSL_GUARDED_BY(mu_) = false;
};

// Reads a whole file; NotFound / PermissionDenied etc. name the path.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace dralens::k8s
