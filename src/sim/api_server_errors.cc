#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/sim/api_server_internal.h"

namespace dralens::sim::apiserver {

json StatusJson(const ApiError& e) {
  json s = {{"kind", "Status"},    {"apiVersion", "v1"},   {"metadata", json::object()},
            {"status", "Failure"}, {"message", e.message}, {"reason", e.reason},
            {"code", e.code}};
  if (!e.details.is_null()) {
    s["details"] = e.details;
  }
  return s;
}

json Details(const ResourceInfo& info, const std::string& name, bool kind_not_resource) {
  json d = json::object();
  if (!name.empty()) {
    d["name"] = name;
  }
  if (!info.group.empty()) {
    d["group"] = info.group;
  }
  d["kind"] = kind_not_resource ? info.kind : info.plural;
  return d;
}

ApiError NotFound(const ResourceInfo& info, const std::string& name) {
  return {404, "NotFound", absl::StrCat(info.QualifiedResource(), " \"", name, "\" not found"),
          Details(info, name)};
}
ApiError AlreadyExists(const ResourceInfo& info, const std::string& name) {
  return {409, "AlreadyExists",
          absl::StrCat(info.QualifiedResource(), " \"", name, "\" already exists"),
          Details(info, name)};
}
ApiError Conflict(const ResourceInfo& info, const std::string& name, const std::string& why) {
  return {409, "Conflict",
          absl::StrCat("Operation cannot be fulfilled on ", info.QualifiedResource(), " \"", name,
                       "\": ", why),
          Details(info, name)};
}
ApiError BadRequest(const std::string& message) { return {400, "BadRequest", message, nullptr}; }
ApiError Expired(const std::string& message) { return {410, "Expired", message, nullptr}; }
ApiError TooLargeResourceVersion(uint64_t want, uint64_t have) {
  json details = {{"causes", json::array({{{"reason", "ResourceVersionTooLarge"},
                                           {"message", "Too large resource version"}}})},
                  {"retryAfterSeconds", 1}};
  return {504, "Timeout",
          absl::StrCat("Timeout: Too large resource version: ", want, ", current: ", have),
          details};
}
ApiError GenericNotFound() {
  return {404, "NotFound", "the server could not find the requested resource", json::object()};
}

ApiError InvalidError(const ResourceInfo& info, const std::string& name, const FieldErrors& errs) {
  bool type_errors = false;
  std::vector<std::string> parts;
  json causes = json::array();
  for (const FieldError& fe : errs) {
    type_errors = type_errors || fe.type == FieldError::Type::kTypeInvalid;
    parts.push_back(fe.ToString());
    causes.push_back({{"reason", fe.Reason()}, {"message", fe.message}, {"field", fe.field}});
  }
  std::string joined =
      parts.size() == 1 ? parts[0] : absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
  json details = Details(info, name, /*kind_not_resource=*/true);
  details["causes"] = causes;
  if (type_errors) {
    // The real server cannot even decode such a body: 400, naming the kind it expected.
    return {400, "BadRequest",
            absl::StrCat(info.kind, " in version \"", info.version, "\" cannot be handled as a ",
                         info.kind, ": ", joined),
            details};
  }
  return {422, "Invalid",
          absl::StrCat(info.QualifiedKind(), " \"", name, "\" is invalid: ", joined), details};
}

std::string ReasonForCode(int code) {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return code >= 500 ? "InternalError" : "BadRequest";
  }
}

}  // namespace dralens::sim::apiserver
