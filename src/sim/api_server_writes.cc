#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/sim/api_server_internal.h"

namespace dralens::sim {

std::optional<ApiError> ApiServer::Impl::ParseBody(const ResourceInfo& info,
                                                   const std::string& body, json* out) {
  json obj = json::parse(body, nullptr, false);
  if (obj.is_discarded()) {
    return BadRequest(absl::StrCat(info.kind, " in version \"", info.version,
                                   "\" cannot be handled as a ", info.kind,
                                   ": invalid JSON in request body"));
  }
  if (!obj.is_object()) {
    return BadRequest(absl::StrCat(info.kind, " in version \"", info.version,
                                   "\" cannot be handled as a ", info.kind,
                                   ": the request body must be a JSON object"));
  }
  // Missing kind/apiVersion default to the endpoint's, like the real decoder; wrong ones fail.
  if (!obj.contains("apiVersion") || obj["apiVersion"] == "") {
    obj["apiVersion"] = info.ApiVersion();
  }
  if (!obj.contains("kind") || obj["kind"] == "") {
    obj["kind"] = info.kind;
  }
  if (obj["apiVersion"] != info.ApiVersion()) {
    return BadRequest(absl::StrCat("the API version in the data (", obj["apiVersion"].dump(),
                                   ") does not match the expected API version (", info.ApiVersion(),
                                   ")"));
  }
  if (obj["kind"] != info.kind) {
    return BadRequest(absl::StrCat("the kind in the data (", obj["kind"].dump(),
                                   ") does not match the expected kind (", info.kind, ")"));
  }
  if (!obj.contains("metadata") || obj["metadata"].is_null()) {
    obj["metadata"] = json::object();
  }
  if (!obj["metadata"].is_object()) {
    return BadRequest(absl::StrCat(info.kind, " in version \"", info.version,
                                   "\" cannot be handled as a ", info.kind,
                                   ": metadata must be an object"));
  }
  for (const char* k : {"name", "generateName", "namespace", "resourceVersion", "uid"}) {
    if (obj["metadata"].contains(k) && obj["metadata"][k].is_null()) {
      obj["metadata"].erase(k);
    }
    if (obj["metadata"].contains(k) && !obj["metadata"][k].is_string()) {
      return BadRequest(absl::StrCat(info.kind, " in version \"", info.version,
                                     "\" cannot be handled as a ", info.kind, ": metadata.", k,
                                     " must be a string"));
    }
  }
  if (info.to_storage != nullptr) {
    obj = info.to_storage(obj);
  }
  *out = std::move(obj);
  return std::nullopt;
}

void ApiServer::Impl::EmitLocked(const ResourceInfo& info, EventType type, ObjPtr obj,
                                 ObjPtr prev) {
  ResourceStore& rs = stores_[info.plural];
  rs.history.push_back(Event{rv_, type, std::move(obj), std::move(prev)});
  while (rs.history.size() > std::max<size_t>(1, options_.watch_history)) {
    rs.compacted_rv = rs.history.front().rv;
    rs.history.pop_front();
  }
  cv_.SignalAll();
}

namespace {

// Server-owned metadata a client may not set.
void ClearSystemMetadata(json& md) {
  for (const char* k : {"uid", "creationTimestamp", "deletionTimestamp",
                        "deletionGracePeriodSeconds", "generation", "selfLink", "managedFields"}) {
    md.erase(k);
  }
}

void CopyIfPresent(const json& from, json& to, const char* key) {
  if (from.contains(key)) {
    to[key] = from[key];
  } else {
    to.erase(key);
  }
}

}  // namespace

std::optional<ApiError> ApiServer::Impl::Create(const Target& t, const json& body, Result* out) {
  absl::MutexLock l(&mu_);
  return CreateLocked(t, body, out);
}

std::optional<ApiError> ApiServer::Impl::CreateLocked(const Target& t, const json& body,
                                                      Result* out) {
  const ResourceInfo& info = *t.info;
  json obj = body;
  json& md = obj["metadata"];
  if (info.namespaced) {
    std::string ns = md.value("namespace", "");
    if (!ns.empty() && ns != t.ns) {
      return BadRequest(
          "the namespace of the provided object does not match the namespace sent on the "
          "request");
    }
    md["namespace"] = t.ns;
  } else {
    md.erase("namespace");
  }
  ClearSystemMetadata(md);
  md.erase("resourceVersion");
  std::string generate_name = md.value("generateName", "");
  if (generate_name.size() > 58) {
    generate_name.resize(58);  // maxGeneratedNameLength = 63 - 5
  }
  bool generated = md.value("name", "").empty() && !generate_name.empty();
  absl::Time now = clock_->Now();
  ApplyDefaults(info.object_kind, obj, now);
  if (info.has_status) {
    if (info.object_kind == ObjectKind::kPod) {
      obj["status"] = {{"phase", "Pending"}};
    } else if (info.plural == "namespaces") {
      obj["status"] = {{"phase", "Active"}};
    } else if (info.object_kind == ObjectKind::kResourceClaim) {
      obj["status"] = json::object();
    }
  }

  ResourceStore& rs = stores_[info.plural];
  for (int attempt = 0; generated && attempt < kGenerateNameAttempts; ++attempt) {
    md["name"] = generate_name + RandomSuffix(gen_);
    if (rs.objects.count(ObjectKey(info, t.ns, md["name"].get<std::string>())) == 0) {
      break;
    }
  }
  std::string name = md.value("name", "");
  ValidationOptions vopts{minor_number_, info.namespaced, info.name_is_dns_label};
  FieldErrors errs = ValidateCreate(info.object_kind, obj, vopts);
  if (!errs.empty()) {
    return InvalidError(info, name, errs);
  }
  std::string key = ObjectKey(info, t.ns, name);
  if (rs.objects.count(key) != 0) {
    return AlreadyExists(info, name);
  }
  ++rv_;
  md["uid"] = NewUid(gen_);
  md["creationTimestamp"] = FormatK8sTime(now);
  md["resourceVersion"] = std::to_string(rv_);
  if (info.tracks_generation) {
    md["generation"] = 1;
  }
  auto stored = std::make_shared<const json>(std::move(obj));
  rs.objects[key] = stored;
  EmitLocked(info, EventType::kAdded, stored, nullptr);
  *out = {201, *stored};
  return std::nullopt;
}

std::optional<ApiError> ApiServer::Impl::Update(const Target& t, const json& body, Result* out) {
  std::string name = MetaString(body, "name");
  if (name != t.name) {
    return BadRequest(absl::StrCat("the name of the object (", name,
                                   ") does not match the name on the URL (", t.name, ")"));
  }
  if (t.info->namespaced) {
    std::string ns = MetaString(body, "namespace");
    if (!ns.empty() && ns != t.ns) {
      return BadRequest(
          "the namespace of the provided object does not match the namespace sent on the "
          "request");
    }
  }
  absl::MutexLock l(&mu_);
  return UpdateLocked(t, body, out);
}

std::optional<ApiError> ApiServer::Impl::UpdateLocked(const Target& t, json body, Result* out) {
  const ResourceInfo& info = *t.info;
  ResourceStore& rs = stores_[info.plural];
  std::string key = ObjectKey(info, t.ns, t.name);
  auto it = rs.objects.find(key);
  if (it == rs.objects.end()) {
    if (info.allow_create_on_update && t.subresource.empty()) {
      return CreateLocked(t, body, out);
    }
    return NotFound(info, t.name);
  }
  ObjPtr old = it->second;
  const json& old_md = (*old)["metadata"];
  std::string body_rv = MetaString(body, "resourceVersion");
  if (!body_rv.empty() && body_rv != old_md.value("resourceVersion", "")) {
    return Conflict(info, t.name,
                    "the object has been modified; please apply your changes to the latest "
                    "version and try again");
  }
  std::string body_uid = MetaString(body, "uid");
  if (!body_uid.empty() && body_uid != old_md.value("uid", "")) {
    return Conflict(info, t.name,
                    absl::StrCat("Precondition failed: UID in precondition: ", body_uid,
                                 ", UID in object meta: ", old_md.value("uid", "")));
  }
  json next;
  bool status_write = t.subresource == "status";
  if (status_write) {
    // The status subresource takes only .status; everything else stays as stored.
    next = *old;
    if (body.contains("status") && !body["status"].is_null()) {
      next["status"] = body["status"];
    } else {
      next.erase("status");
    }
    const bool devices_in_use = old->contains("status") && (*old)["status"].is_object() &&
                                (*old)["status"].contains("devices");
    if (info.plural == "resourceclaims" && !options_.resource_claim_device_status &&
        !devices_in_use && next.contains("status") && next["status"].is_object()) {
      next["status"].erase("devices");  // the gate is off: the field is not stored
    }
  } else {
    next = std::move(body);
    json& md = next["metadata"];
    if (info.namespaced) {
      md["namespace"] = t.ns;
    }
    for (const char* k : {"uid", "creationTimestamp", "deletionTimestamp",
                          "deletionGracePeriodSeconds", "generation"}) {
      CopyIfPresent(old_md, md, k);
    }
    md.erase("selfLink");
    md.erase("managedFields");
    if (md.contains("generateName") && md["generateName"] == "") {
      md.erase("generateName");
    }
    if (info.has_status) {
      // Main-resource writes cannot change status.
      CopyIfPresent(*old, next, "status");
    }
    ApplyDefaults(info.object_kind, next, clock_->Now());
  }
  next["metadata"]["resourceVersion"] = old_md.value("resourceVersion", "");
  ValidationOptions vopts{minor_number_, info.namespaced, info.name_is_dns_label};
  FieldErrors errs = status_write ? ValidateStatusUpdate(info.object_kind, next, *old, vopts)
                                  : ValidateUpdate(info.object_kind, next, *old, vopts);
  if (!errs.empty()) {
    return InvalidError(info, t.name, errs);
  }
  if (next == *old) {
    *out = {200, *old};  // a no-op write keeps its resourceVersion, like etcd3's store
    return std::nullopt;
  }
  if (info.tracks_generation && !status_write) {
    json spec = next.contains("spec") ? next["spec"] : json();
    json old_spec = old->contains("spec") ? (*old)["spec"] : json();
    if (spec != old_spec) {
      next["metadata"]["generation"] = old_md.value("generation", 0) + 1;
    }
  }
  ++rv_;
  next["metadata"]["resourceVersion"] = std::to_string(rv_);
  auto stored = std::make_shared<const json>(std::move(next));
  it->second = stored;
  EmitLocked(info, EventType::kModified, stored, old);
  *out = {200, *stored};
  // The write that removes the last finalizer of a deleting object completes the delete.
  const json& md = (*stored)["metadata"];
  bool deleting = md.contains("deletionTimestamp") && !md["deletionTimestamp"].is_null();
  bool finalizers =
      md.contains("finalizers") && md["finalizers"].is_array() && !md["finalizers"].empty();
  if (deleting && !finalizers) {
    ++rv_;
    json gone = *stored;
    gone["metadata"]["resourceVersion"] = std::to_string(rv_);
    rs.objects.erase(it);
    EmitLocked(info, EventType::kDeleted, std::make_shared<const json>(std::move(gone)), stored);
  }
  return std::nullopt;
}

std::optional<ApiError> ApiServer::Impl::Patch(const Target& t, const httplib::Request& req,
                                               Result* out) {
  json patch = json::parse(req.body, nullptr, false);
  if (patch.is_discarded()) {
    return BadRequest("error decoding patch: invalid JSON");
  }
  bool merge = MediaType(req.get_header_value("Content-Type")) == kMergePatch;
  if (merge && !patch.is_object()) {
    return BadRequest("error decoding patch: a merge patch must be a JSON object");
  }
  if (!merge && !patch.is_array()) {
    return BadRequest("error decoding patch: a JSON patch must be an array of operations");
  }
  absl::MutexLock l(&mu_);
  ResourceStore& rs = stores_[t.info->plural];
  auto it = rs.objects.find(ObjectKey(*t.info, t.ns, t.name));
  if (it == rs.objects.end()) {
    return NotFound(*t.info, t.name);
  }
  const json current = ClientView(*t.info, *it->second);
  json patched;
  if (merge) {
    patched = MergePatch(current, patch);
  } else {
    try {
      patched = current.patch(patch);
    } catch (const json::exception& e) {
      return ApiError{
          422, "Invalid",
          absl::StrCat("the server rejected our request due to an error in our request: ",
                       e.what()),
          Details(*t.info, t.name, true)};
    }
  }
  if (!patched.is_object()) {
    return BadRequest("the patched object must be a JSON object");
  }
  // A patch may carry a resourceVersion as a precondition; the stored one is checked in the
  // update path. Identity cannot change.
  if (MetaString(patched, "name") != t.name ||
      (t.info->namespaced && MetaString(patched, "namespace") != t.ns)) {
    return BadRequest("metadata.name and metadata.namespace cannot be changed by a patch");
  }
  if (patched.value("kind", json()) != t.info->kind ||
      patched.value("apiVersion", json()) != t.info->ApiVersion()) {
    return BadRequest("kind and apiVersion cannot be changed by a patch");
  }
  if (t.info->to_storage != nullptr) {
    patched = t.info->to_storage(patched);
  }
  return UpdateLocked(t, std::move(patched), out);
}

std::optional<ApiError> ApiServer::Impl::DeleteLocked(const ResourceInfo& info,
                                                      const std::string& key, const json& options,
                                                      Result* out, json* last_state) {
  ResourceStore& rs = stores_[info.plural];
  auto it = rs.objects.find(key);
  ObjPtr old = it->second;
  const json& md = (*old)["metadata"];
  std::string name = md.value("name", "");
  if (options.contains("preconditions") && options["preconditions"].is_object()) {
    const json& pre = options["preconditions"];
    if (pre.contains("uid") && pre["uid"].is_string() &&
        pre["uid"].get<std::string>() != md.value("uid", "")) {
      return Conflict(
          info, name,
          absl::StrCat("Precondition failed: UID in precondition: ", pre["uid"].get<std::string>(),
                       ", UID in object meta: ", md.value("uid", "")));
    }
    if (pre.contains("resourceVersion") && pre["resourceVersion"].is_string() &&
        pre["resourceVersion"].get<std::string>() != md.value("resourceVersion", "")) {
      return Conflict(
          info, name,
          absl::StrCat("Precondition failed: ResourceVersion in precondition: ",
                       pre["resourceVersion"].get<std::string>(),
                       ", ResourceVersion in object meta: ", md.value("resourceVersion", "")));
    }
  }
  bool finalizers =
      md.contains("finalizers") && md["finalizers"].is_array() && !md["finalizers"].empty();
  if (finalizers) {
    if (md.contains("deletionTimestamp")) {
      *out = {200, *old};  // already terminating; finalizers decide when it goes
      *last_state = *old;
      return std::nullopt;
    }
    json next = *old;
    ++rv_;
    next["metadata"]["deletionTimestamp"] = FormatK8sTime(clock_->Now());
    next["metadata"]["deletionGracePeriodSeconds"] = 0;
    if (info.tracks_generation) {
      next["metadata"]["generation"] = md.value("generation", 0) + 1;
    }
    next["metadata"]["resourceVersion"] = std::to_string(rv_);
    auto stored = std::make_shared<const json>(std::move(next));
    it->second = stored;
    EmitLocked(info, EventType::kModified, stored, old);
    *out = {200, *stored};
    *last_state = *stored;
    return std::nullopt;
  }
  ++rv_;
  json gone = *old;
  gone["metadata"]["resourceVersion"] = std::to_string(rv_);
  auto stored = std::make_shared<const json>(std::move(gone));
  rs.objects.erase(it);
  EmitLocked(info, EventType::kDeleted, stored, old);
  *last_state = *stored;
  if (info.return_deleted_object) {
    *out = {200, *stored};
  } else {
    json details = Details(info, name);
    details["uid"] = md.value("uid", "");
    *out = {200, json{{"kind", "Status"},
                      {"apiVersion", "v1"},
                      {"metadata", json::object()},
                      {"status", "Success"},
                      {"details", details}}};
  }
  return std::nullopt;
}

namespace {

std::optional<ApiError> ParseDeleteOptions(const std::string& body, json* out) {
  *out = json::object();
  if (body.empty()) {
    return std::nullopt;
  }
  json opts = json::parse(body, nullptr, false);
  if (opts.is_discarded() || !opts.is_object()) {
    return BadRequest(
        "DeleteOptions in version \"v1\" cannot be handled as a DeleteOptions: "
        "invalid JSON");
  }
  if (opts.contains("kind") && opts["kind"] != "DeleteOptions") {
    return BadRequest(absl::StrCat("the kind in the data (", opts["kind"].dump(),
                                   ") does not match the expected kind (DeleteOptions)"));
  }
  if (opts.contains("gracePeriodSeconds") && !opts["gracePeriodSeconds"].is_null() &&
      (!opts["gracePeriodSeconds"].is_number_integer() ||
       opts["gracePeriodSeconds"].get<int64_t>() < 0)) {
    return BadRequest("gracePeriodSeconds must be a non-negative integer");
  }
  if (opts.contains("propagationPolicy") && !opts["propagationPolicy"].is_null()) {
    const json& p = opts["propagationPolicy"];
    if (p != "Orphan" && p != "Background" && p != "Foreground") {
      return ApiError{422, "Invalid",
                      "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported "
                      "value: " +
                          p.dump(),
                      nullptr};
    }
  }
  *out = std::move(opts);
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ApiServer::Impl::Delete(const Target& t, const httplib::Request& req,
                                                Result* out) {
  json options;
  if (auto err = ParseDeleteOptions(req.body, &options)) {
    return err;
  }
  absl::MutexLock l(&mu_);
  ResourceStore& rs = stores_[t.info->plural];
  std::string key = ObjectKey(*t.info, t.ns, t.name);
  if (rs.objects.count(key) == 0) {
    return NotFound(*t.info, t.name);
  }
  json last_state;
  return DeleteLocked(*t.info, key, options, out, &last_state);
}

std::optional<ApiError> ApiServer::Impl::DeleteCollection(const Target& t,
                                                          const httplib::Request& req,
                                                          Result* out) {
  Filter filter;
  if (auto err = ParseFilter(t, req, &filter)) {
    return err;
  }
  json options;
  if (auto err = ParseDeleteOptions(req.body, &options)) {
    return err;
  }
  options.erase("preconditions");
  absl::MutexLock l(&mu_);
  ResourceStore& rs = stores_[t.info->plural];
  std::vector<std::string> keys;
  for (const auto& [key, obj] : rs.objects) {
    if (filter.Matches(*obj)) {
      keys.push_back(key);
    }
  }
  json items = json::array();
  for (const std::string& key : keys) {
    Result one;
    json item;
    if (!DeleteLocked(*t.info, key, options, &one, &item)) {
      item.erase("kind");
      item.erase("apiVersion");
      items.push_back(std::move(item));
    }
  }
  *out = {200, json{{"kind", t.info->ListKind()},
                    {"apiVersion", t.info->ApiVersion()},
                    {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
                    {"items", items}}};
  return std::nullopt;
}

}  // namespace dralens::sim
