#include <optional>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/k8s/http_stream.h"
#include "src/k8s/rest_client.h"
#include "src/k8s/rest_client_internal.h"

namespace dralens::k8s {
namespace {

using rest::Normalize;
using rest::ParseBody;
using rest::Query;

// A single watch event larger than this is treated as a malformed stream.
constexpr size_t kMaxWatchLine = 64 << 20;
constexpr size_t kMaxErrorBody = 64 << 10;

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

}  // namespace

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

}  // namespace dralens::k8s
