#include "src/k8s/rest_client.h"

#include <httplib.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/k8s/openssl_text.h"
#include "src/k8s/rest_client_internal.h"

namespace dralens::k8s {
namespace rest {

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

}  // namespace rest

namespace {

using rest::Escape;
using rest::Normalize;
using rest::ParseBody;
using rest::Query;

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

std::string DescribeHttplibError(httplib::Error error) { return httplib::to_string(error); }

bool IsSafeMethod(absl::string_view method) { return method == "GET"; }

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
