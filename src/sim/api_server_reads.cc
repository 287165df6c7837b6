#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "src/sim/api_server_internal.h"

namespace dralens::sim {

std::optional<ApiError> ApiServer::Impl::ParseFilter(const Target& t, const httplib::Request& req,
                                                     Filter* f) {
  f->info = t.info;
  f->ns = t.info->namespaced ? t.ns : "";
  absl::StatusOr<LabelSelector> ls = LabelSelector::Parse(req.get_param_value("labelSelector"));
  if (!ls.ok()) {
    return BadRequest(std::string(ls.status().message()));
  }
  f->labels = *std::move(ls);
  absl::StatusOr<FieldSelector> fs = FieldSelector::Parse(req.get_param_value("fieldSelector"));
  if (!fs.ok()) {
    return BadRequest(std::string(fs.status().message()));
  }
  for (const FieldSelector::Term& term : fs->terms()) {
    const auto& labels = t.info->field_labels;
    if (term.field != "metadata.name" && term.field != "metadata.namespace" &&
        std::find(labels.begin(), labels.end(), term.field) == labels.end()) {
      return BadRequest(absl::StrCat("field label not supported: ", term.field));
    }
  }
  f->fields = *std::move(fs);
  return std::nullopt;
}

std::optional<ApiError> ApiServer::Impl::Get(const Target& t, const httplib::Request& req,
                                             Result* out) {
  absl::MutexLock l(&mu_);
  std::string rv_param = req.get_param_value("resourceVersion");
  uint64_t want = 0;
  if (!rv_param.empty() && rv_param != "0") {
    if (!absl::SimpleAtoi(rv_param, &want)) {
      return BadRequest(absl::StrCat("invalid resource version \"", rv_param, "\""));
    }
    if (want > rv_) {
      return TooLargeResourceVersion(want, rv_);
    }
  }
  ResourceStore& rs = stores_[t.info->plural];
  auto it = rs.objects.find(ObjectKey(*t.info, t.ns, t.name));
  if (it == rs.objects.end()) {
    return NotFound(*t.info, t.name);
  }
  *out = {200, *it->second};
  return std::nullopt;
}

std::map<std::string, ObjPtr> ApiServer::Impl::SnapshotLocked(const ResourceInfo& info,
                                                              uint64_t rv) {
  ResourceStore& rs = stores_[info.plural];
  std::map<std::string, ObjPtr> snap = rs.objects;
  for (auto it = rs.history.rbegin(); it != rs.history.rend() && it->rv > rv; ++it) {
    const json& ref = it->prev ? *it->prev : *it->obj;
    std::string key = ObjectKey(info, MetaString(ref, "namespace"), MetaString(ref, "name"));
    if (it->type == EventType::kAdded) {
      snap.erase(key);
    } else {
      snap[key] = it->prev;
    }
  }
  return snap;
}

std::optional<ApiError> ApiServer::Impl::List(const Target& t, const httplib::Request& req,
                                              Result* out) {
  Filter filter;
  if (auto err = ParseFilter(t, req, &filter)) {
    return err;
  }
  int64_t limit = 0;
  std::string limit_param = req.get_param_value("limit");
  if (!limit_param.empty() && !absl::SimpleAtoi(limit_param, &limit)) {
    return BadRequest(absl::StrCat("invalid limit \"", limit_param, "\""));
  }
  std::string rv_param = req.get_param_value("resourceVersion");
  std::string match = req.get_param_value("resourceVersionMatch");
  std::string cont = req.get_param_value("continue");
  if (!match.empty() && match != "Exact" && match != "NotOlderThan") {
    return BadRequest(absl::StrCat("resourceVersionMatch: Unsupported value: \"", match,
                                   "\": supported values: \"Exact\", \"NotOlderThan\""));
  }
  if (!match.empty() && rv_param.empty()) {
    return BadRequest("resourceVersionMatch is forbidden unless resourceVersion is provided");
  }
  if (match == "Exact" && rv_param == "0") {
    return BadRequest("resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"");
  }
  if (!cont.empty() && (!rv_param.empty() || !match.empty())) {
    return BadRequest("specifying resource version is not allowed when using continue");
  }

  absl::MutexLock l(&mu_);
  ResourceStore& rs = stores_[t.info->plural];
  uint64_t list_rv = rv_;
  std::string start_key;
  bool snapshot = false;
  if (!cont.empty()) {
    std::string decoded;
    json token;
    if (!absl::WebSafeBase64Unescape(cont, &decoded) ||
        (token = json::parse(decoded, nullptr, false)).is_discarded() || !token.is_object() ||
        token.value("v", "") != "meta.k8s.io/v1" || !token.contains("rv") ||
        !token["rv"].is_number_unsigned() || !token.contains("start") ||
        !token["start"].is_string()) {
      return BadRequest("continue key is not valid: incorrect encoded start resourceVersion");
    }
    list_rv = token["rv"].get<uint64_t>();
    start_key = token["start"].get<std::string>();
    if (list_rv < rs.compacted_rv || list_rv > rv_) {
      return Expired(
          "The provided continue parameter is too old to display a consistent list result. You "
          "can start a new list without the continue parameter, or use the continue token in "
          "this response to retrieve the remainder of the results. Continuing with the provided "
          "token results in an inconsistent list - objects that were created, modified, or "
          "deleted between the time the first chunk was returned and now may show up in the "
          "list.");
    }
    snapshot = list_rv != rv_;
  } else if (!rv_param.empty() && rv_param != "0") {
    uint64_t want = 0;
    if (!absl::SimpleAtoi(rv_param, &want)) {
      return BadRequest(absl::StrCat("invalid resource version \"", rv_param, "\""));
    }
    if (want > rv_) {
      return TooLargeResourceVersion(want, rv_);
    }
    if (match == "Exact") {
      if (want < rs.compacted_rv) {
        return Expired(
            absl::StrCat("too old resource version: ", want, " (", rs.compacted_rv, ")"));
      }
      list_rv = want;
      snapshot = want != rv_;
    }
  }
  std::map<std::string, ObjPtr> snap_storage;
  const std::map<std::string, ObjPtr>* objects = &rs.objects;
  if (snapshot) {
    snap_storage = SnapshotLocked(*t.info, list_rv);
    objects = &snap_storage;
  }
  json items = json::array();
  std::string last_key;
  bool more = false;
  int64_t remaining = 0;
  for (auto it = objects->lower_bound(start_key); it != objects->end(); ++it) {
    if (!filter.Matches(*it->second)) {
      continue;
    }
    if (limit > 0 && static_cast<int64_t>(items.size()) >= limit) {
      more = true;
      ++remaining;
      continue;
    }
    json item = *it->second;
    item.erase("kind");
    item.erase("apiVersion");
    items.push_back(std::move(item));
    last_key = it->first;
  }
  json md = {{"resourceVersion", std::to_string(list_rv)}};
  if (more) {
    json token = {{"v", "meta.k8s.io/v1"}, {"rv", list_rv}, {"start", last_key + '\0'}};
    md["continue"] = absl::WebSafeBase64Escape(token.dump());
    if (!filter.HasSelectors()) {
      md["remainingItemCount"] = remaining;
    }
  }
  *out = {200, json{{"kind", t.info->ListKind()},
                    {"apiVersion", t.info->ApiVersion()},
                    {"metadata", md},
                    {"items", items}}};
  return std::nullopt;
}

}  // namespace dralens::sim
