#include "src/k8s/client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace dralens::k8s {
namespace {

constexpr absl::string_view kHttpStatusPayload = "type.dralens.dev/k8s.http_status";
constexpr absl::string_view kRetryAfterPayload = "type.dralens.dev/k8s.retry_after_ms";

absl::StatusCode CodeForHttp(int code, absl::string_view reason) {
  switch (code) {
    case 400:
    case 415:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 405:
      return absl::StatusCode::kUnimplemented;
    case 408:
      return absl::StatusCode::kDeadlineExceeded;
    case 409:
      return reason == "AlreadyExists" ? absl::StatusCode::kAlreadyExists
                                       : absl::StatusCode::kAborted;
    case 410:
      return absl::StatusCode::kOutOfRange;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    default:
      break;
  }
  if (code >= 500 && code <= 599) {
    return absl::StatusCode::kUnavailable;
  }
  if (code >= 400 && code <= 499) {
    return absl::StatusCode::kFailedPrecondition;
  }
  return absl::StatusCode::kUnknown;
}

std::string Truncated(absl::string_view text, size_t max) {
  if (text.size() <= max) {
    return std::string(text);
  }
  return absl::StrCat(text.substr(0, max), "...");
}

}  // namespace

std::string ResourceType::ApiVersion() const {
  return group.empty() ? version : absl::StrCat(group, "/", version);
}

absl::string_view ToString(WatchEventType type) {
  switch (type) {
    case WatchEventType::kAdded:
      return "ADDED";
    case WatchEventType::kModified:
      return "MODIFIED";
    case WatchEventType::kDeleted:
      return "DELETED";
    case WatchEventType::kBookmark:
      return "BOOKMARK";
  }
  return "UNKNOWN";
}

void WatchCancel::Cancel() {
  cancelled_.store(true);
  absl::MutexLock lock(&mu_);
  if (abort_) {
    abort_();
  }
}

void WatchCancel::SetAbort(std::function<void()> abort) {
  absl::MutexLock lock(&mu_);
  abort_ = std::move(abort);
  if (abort_ && cancelled_.load()) {
    abort_();
  }
}

absl::StatusOr<std::string> ListPaged(KubeClient& client, const ResourceType& type,
                                      absl::string_view ns, ListOptions options,
                                      const PageCallback& on_page) {
  if (options.limit <= 0) {
    options.limit = 500;
  }
  options.continue_token.clear();
  bool restarted = false;
  bool first = true;
  while (true) {
    absl::StatusOr<ListResult> page = client.List(type, ns, options);
    if (!page.ok()) {
      if (IsGone(page.status()) && !options.continue_token.empty() && !restarted) {
        // The continue token expired: fall back to one unpaged list, as client-go does.
        restarted = true;
        first = true;
        options.continue_token.clear();
        options.limit = 0;
        continue;
      }
      return page.status();
    }
    on_page(page->items, first);
    first = false;
    if (page->continue_token.empty() || options.limit == 0) {
      return page->resource_version;
    }
    options.continue_token = page->continue_token;
  }
}

absl::StatusOr<ListResult> ListAll(KubeClient& client, const ResourceType& type,
                                   absl::string_view ns, ListOptions options) {
  ListResult all;
  absl::StatusOr<std::string> version = ListPaged(
      client, type, ns, std::move(options), [&all](std::vector<nlohmann::json>& items, bool first) {
        if (first) {
          all.items.clear();
        }
        for (nlohmann::json& item : items) {
          all.items.push_back(std::move(item));
        }
      });
  if (!version.ok()) {
    return version.status();
  }
  all.resource_version = *std::move(version);
  return all;
}

absl::StatusOr<nlohmann::json> UpdateWithRetry(
    KubeClient& client, const ResourceType& type, absl::string_view ns, absl::string_view name,
    const std::function<absl::Status(nlohmann::json&)>& mutate, int max_attempts,
    absl::string_view subresource) {
  absl::Status last = absl::AbortedError("UpdateWithRetry: no attempt made");
  for (int attempt = 0; attempt < std::max(1, max_attempts); ++attempt) {
    absl::StatusOr<nlohmann::json> current = client.Get(type, ns, name);
    if (!current.ok()) {
      return current.status();
    }
    nlohmann::json object = *std::move(current);
    absl::Status mutated = mutate(object);
    if (!mutated.ok()) {
      return mutated;
    }
    absl::StatusOr<nlohmann::json> updated = client.Update(type, ns, object, subresource);
    if (updated.ok() || !IsConflict(updated.status())) {
      return updated;
    }
    last = updated.status();
  }
  return last;
}

WatchStream::WatchStream(KubeClient& client, const ResourceType& type, std::string ns,
                         WatchOptions options, WatchEventCallback callback) {
  thread_ =
      std::make_unique<std::thread>([this, &client, type, ns = std::move(ns),
                                     options = std::move(options), callback = std::move(callback)] {
        absl::Status status = client.Watch(type, ns, options, callback, &cancel_);
        absl::MutexLock lock(&mu_);
        result_ = std::move(status);
        done_ = true;
      });
}

WatchStream::~WatchStream() { Stop(); }

void WatchStream::Stop() {
  if (thread_ == nullptr || !thread_->joinable()) {
    return;
  }
  // Cancel until the thread has left: a cancel that lands while the watch is still connecting
  // cannot abort its socket yet.
  while (true) {
    cancel_.Cancel();
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&done_), absl::Milliseconds(20))) {
      break;
    }
  }
  thread_->join();
}

absl::Status WatchStream::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  return result_;
}

bool IsNotFound(const absl::Status& status) { return absl::IsNotFound(status); }
bool IsAlreadyExists(const absl::Status& status) { return absl::IsAlreadyExists(status); }
bool IsConflict(const absl::Status& status) { return absl::IsAborted(status); }
bool IsGone(const absl::Status& status) { return absl::IsOutOfRange(status); }

int HttpStatusCode(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kHttpStatusPayload);
  int code = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &code)) {
    return 0;
  }
  return code;
}

std::optional<absl::Duration> RetryAfter(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kRetryAfterPayload);
  int64_t ms = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &ms)) {
    return std::nullopt;
  }
  return absl::Milliseconds(ms);
}

absl::Status StatusFromHttp(int code, absl::string_view body, absl::string_view retry_after,
                            absl::string_view context) {
  std::string message;
  std::string reason;
  nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && parsed.value("kind", "") == "Status") {
    if (parsed.contains("message") && parsed["message"].is_string()) {
      message = parsed["message"].get<std::string>();
    }
    if (parsed.contains("reason") && parsed["reason"].is_string()) {
      reason = parsed["reason"].get<std::string>();
    }
  }
  if (message.empty()) {
    message = body.empty() ? "(no body)" : Truncated(body, 256);
  }
  absl::Status status(CodeForHttp(code, reason),
                      absl::StrCat(context, context.empty() ? "" : ": ", "HTTP ", code,
                                   reason.empty() ? "" : " ", reason, ": ", message));
  status.SetPayload(kHttpStatusPayload, absl::Cord(absl::StrCat(code)));
  int seconds = 0;
  if (!retry_after.empty() && absl::SimpleAtoi(absl::StripAsciiWhitespace(retry_after), &seconds) &&
      seconds >= 0) {
    status.SetPayload(kRetryAfterPayload, absl::Cord(absl::StrCat(int64_t{seconds} * 1000)));
  }
  return status;
}

absl::Status StatusFromApiStatus(const nlohmann::json& status, absl::string_view context) {
  int code = 500;
  if (status.is_object() && status.contains("code") && status["code"].is_number_integer()) {
    code = status["code"].get<int>();
  }
  return StatusFromHttp(code, status.is_object() ? status.dump() : "", "", context);
}

std::string ObjectKey(absl::string_view ns, absl::string_view name) {
  return ns.empty() ? std::string(name) : absl::StrCat(ns, "/", name);
}

std::string ObjectKey(const nlohmann::json& object) {
  const nlohmann::json* metadata = nullptr;
  if (object.is_object()) {
    auto it = object.find("metadata");
    if (it != object.end() && it->is_object()) {
      metadata = &*it;
    }
  }
  if (metadata == nullptr) {
    return "";
  }
  std::string ns;
  std::string name;
  auto ns_it = metadata->find("namespace");
  if (ns_it != metadata->end() && ns_it->is_string()) {
    ns = ns_it->get<std::string>();
  }
  auto name_it = metadata->find("name");
  if (name_it != metadata->end() && name_it->is_string()) {
    name = name_it->get<std::string>();
  }
  if (name.empty()) {
    return "";
  }
  return ObjectKey(ns, name);
}

}  // namespace dralens::k8s
