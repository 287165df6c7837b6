#include "src/k8s/config.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "yaml-cpp/yaml.h"

namespace dralens::k8s {
namespace {

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) {
    return ".";
  }
  if (slash == 0) {
    return "/";
  }
  return path.substr(0, slash);
}

std::string ResolvePath(const std::string& base_dir, const std::string& path) {
  if (path.empty() || path[0] == '/') {
    return path;
  }
  if (base_dir.empty()) {
    return path;
  }
  return absl::StrCat(base_dir, "/", path);
}

// Finds the entry `name` in a kubeconfig list such as `clusters`, returning its inner map
// (e.g. the `cluster:` value).
absl::StatusOr<YAML::Node> FindNamed(const YAML::Node& root, const std::string& list_key,
                                     const std::string& inner_key, const std::string& name,
                                     const std::string& origin) {
  const YAML::Node list = root[list_key];
  if (list && !list.IsSequence()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": key '", list_key, "' must be a list"));
  }
  if (list) {
    for (const YAML::Node& entry : list) {
      if (!entry.IsMap()) {
        return absl::InvalidArgumentError(
            absl::StrCat(origin, ": entries of '", list_key, "' must be maps"));
      }
      const YAML::Node entry_name = entry["name"];
      if (entry_name && entry_name.IsScalar() && entry_name.Scalar() == name) {
        const YAML::Node inner = entry[inner_key];
        if (!inner || inner.IsNull()) {
          return YAML::Node(YAML::NodeType::Map);
        }
        if (!inner.IsMap()) {
          return absl::InvalidArgumentError(absl::StrCat(origin, ": ", list_key, "[name=", name,
                                                         "].", inner_key, " must be a map"));
        }
        return inner;
      }
    }
  }
  return absl::NotFoundError(
      absl::StrCat(origin, ": no entry named '", name, "' in '", list_key, "'"));
}

// Reads an optional scalar string field.
absl::StatusOr<std::string> ScalarField(const YAML::Node& map, const std::string& key,
                                        const std::string& where) {
  const YAML::Node node = map[key];
  if (!node || node.IsNull()) {
    return std::string();
  }
  if (!node.IsScalar()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".", key, " must be a string"));
  }
  return node.Scalar();
}

absl::StatusOr<bool> BoolField(const YAML::Node& map, const std::string& key,
                               const std::string& where) {
  ASSIGN_OR_RETURN(std::string text, ScalarField(map, key, where));
  if (text.empty()) {
    return false;
  }
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "true") {
    return true;
  }
  if (lower == "false") {
    return false;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, ".", key, " must be true or false, got '", text, "'"));
}

absl::StatusOr<std::string> Base64Field(const YAML::Node& map, const std::string& key,
                                        const std::string& where) {
  ASSIGN_OR_RETURN(std::string encoded, ScalarField(map, key, where));
  if (encoded.empty()) {
    return std::string();
  }
  // Tolerate line breaks inside the value, as kubectl does.
  std::string compact;
  compact.reserve(encoded.size());
  for (char c : encoded) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(c))) {
      compact.push_back(c);
    }
  }
  std::string decoded;
  if (!absl::Base64Unescape(compact, &decoded) || decoded.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".", key, " is not valid base64"));
  }
  return decoded;
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return common::ErrnoStatus(errno, "open", path);
  }
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) {
    return common::ErrnoStatus(errno, "read", path);
  }
  return out.str();
}

absl::StatusOr<RestConfig> ParseKubeconfig(absl::string_view yaml, const std::string& base_dir,
                                           const std::string& origin,
                                           const KubeconfigOptions& options) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": invalid YAML: ", e.what()));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": not a kubeconfig (expected a map)"));
  }

  try {
    std::string context_name = options.context;
    if (context_name.empty()) {
      ASSIGN_OR_RETURN(context_name, ScalarField(root, "current-context", origin));
      if (context_name.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            origin, ": no context selected: 'current-context' is missing and none was given"));
      }
    }
    ASSIGN_OR_RETURN(YAML::Node context,
                     FindNamed(root, "contexts", "context", context_name, origin));
    const std::string context_where =
        absl::StrCat(origin, ": contexts[name=", context_name, "].context");
    ASSIGN_OR_RETURN(std::string cluster_name, ScalarField(context, "cluster", context_where));
    ASSIGN_OR_RETURN(std::string user_name, ScalarField(context, "user", context_where));
    if (cluster_name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(context_where, ".cluster is missing"));
    }

    RestConfig config;
    ASSIGN_OR_RETURN(config.default_namespace, ScalarField(context, "namespace", context_where));

    ASSIGN_OR_RETURN(YAML::Node cluster,
                     FindNamed(root, "clusters", "cluster", cluster_name, origin));
    const std::string cluster_where =
        absl::StrCat(origin, ": clusters[name=", cluster_name, "].cluster");
    ASSIGN_OR_RETURN(config.server, ScalarField(cluster, "server", cluster_where));
    if (config.server.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(cluster_where, ".server is missing"));
    }
    if (!absl::StartsWith(config.server, "http://") &&
        !absl::StartsWith(config.server, "https://")) {
      return absl::InvalidArgumentError(absl::StrCat(
          cluster_where, ".server must start with http:// or https://, got '", config.server, "'"));
    }
    ASSIGN_OR_RETURN(std::string ca_file,
                     ScalarField(cluster, "certificate-authority", cluster_where));
    config.certificate_authority_file = ResolvePath(base_dir, ca_file);
    ASSIGN_OR_RETURN(config.certificate_authority_data,
                     Base64Field(cluster, "certificate-authority-data", cluster_where));
    ASSIGN_OR_RETURN(config.insecure_skip_tls_verify,
                     BoolField(cluster, "insecure-skip-tls-verify", cluster_where));

    if (!user_name.empty()) {
      ASSIGN_OR_RETURN(YAML::Node user, FindNamed(root, "users", "user", user_name, origin));
      const std::string user_where = absl::StrCat(origin, ": users[name=", user_name, "].user");
      ASSIGN_OR_RETURN(config.token, ScalarField(user, "token", user_where));
      ASSIGN_OR_RETURN(std::string token_file, ScalarField(user, "tokenFile", user_where));
      config.token_file = ResolvePath(base_dir, token_file);
      ASSIGN_OR_RETURN(std::string cert_file, ScalarField(user, "client-certificate", user_where));
      config.client_certificate_file = ResolvePath(base_dir, cert_file);
      ASSIGN_OR_RETURN(config.client_certificate_data,
                       Base64Field(user, "client-certificate-data", user_where));
      ASSIGN_OR_RETURN(std::string key_file, ScalarField(user, "client-key", user_where));
      config.client_key_file = ResolvePath(base_dir, key_file);
      ASSIGN_OR_RETURN(config.client_key_data, Base64Field(user, "client-key-data", user_where));
      const bool has_cert =
          !config.client_certificate_file.empty() || !config.client_certificate_data.empty();
      const bool has_key = !config.client_key_file.empty() || !config.client_key_data.empty();
      if (has_cert != has_key) {
        return absl::InvalidArgumentError(
            absl::StrCat(user_where, ": client-certificate and client-key must be given together"));
      }
      if (user["exec"] || user["auth-provider"]) {
        return absl::UnimplementedError(
            absl::StrCat(user_where, ": exec and auth-provider credentials are not supported"));
      }
    }
    return config;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", e.what()));
  }
}

absl::StatusOr<RestConfig> LoadKubeconfig(const std::string& path,
                                          const KubeconfigOptions& options) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return common::Annotate(text.status(), "read kubeconfig");
  }
  return ParseKubeconfig(*text, DirName(path), path, options);
}

absl::StatusOr<RestConfig> LoadInClusterConfig(absl::string_view service_account_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return absl::FailedPreconditionError(
        "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be "
        "set");
  }
  const std::string dir(service_account_dir);
  RestConfig config;
  const std::string host_text(host);
  // An IPv6 service address needs brackets in a URL.
  const bool ipv6 = host_text.find(':') != std::string::npos && host_text[0] != '[';
  config.server = absl::StrCat("https://", ipv6 ? "[" : "", host_text, ipv6 ? "]" : "", ":", port);
  config.token_file = absl::StrCat(dir, "/token");
  config.certificate_authority_file = absl::StrCat(dir, "/ca.crt");
  // Fail early and clearly when the mounted files are missing.
  absl::StatusOr<std::string> token = ReadFileToString(config.token_file);
  if (!token.ok()) {
    return common::Annotate(token.status(), "in-cluster config: service-account token");
  }
  absl::StatusOr<std::string> ca = ReadFileToString(config.certificate_authority_file);
  if (!ca.ok()) {
    return common::Annotate(ca.status(), "in-cluster config: service-account CA");
  }
  absl::StatusOr<std::string> ns = ReadFileToString(absl::StrCat(dir, "/namespace"));
  if (ns.ok()) {
    config.default_namespace = std::string(absl::StripAsciiWhitespace(*ns));
  }
  return config;
}

TokenSource::TokenSource(const RestConfig& config)
    : static_token_(config.token), file_(config.token.empty() ? config.token_file : "") {}

void TokenSource::Invalidate() {
  absl::MutexLock lock(&mu_);
  valid_ = false;
}

absl::StatusOr<std::string> TokenSource::Token() {
  if (!static_token_.empty()) {
    return static_token_;
  }
  if (file_.empty()) {
    return std::string();
  }
  absl::MutexLock lock(&mu_);
  struct stat st {};
  if (::stat(file_.c_str(), &st) != 0) {
    const int err = errno;
    if (valid_) {
      // Keep using the last token while the file is briefly absent (atomic symlink swaps).
      return cached_;
    }
    return common::ErrnoStatus(err, "stat token file", file_);
  }
  const int64_t mtime_ns =
      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (valid_ && st.st_ino == inode_ && st.st_size == size_ && mtime_ns == mtime_ns_) {
    return cached_;
  }
  absl::StatusOr<std::string> text = ReadFileToString(file_);
  if (!text.ok()) {
    if (valid_) {
      return cached_;
    }
    return common::Annotate(text.status(), "read token file");
  }
  cached_ = std::string(absl::StripAsciiWhitespace(*text));
  inode_ = st.st_ino;
  size_ = st.st_size;
  mtime_ns_ = mtime_ns;
  valid_ = true;
  return cached_;
}

}  // namespace dralens::k8s
