#include "tests/testing/fake_kube_client.h"

#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace dralens::testing {
namespace {

using nlohmann::json;

const std::set<std::string>& WithStatus() {
  static const auto* plurals =
      new std::set<std::string>{"resourceclaims", "pods", "nodes", "namespaces"};
  return *plurals;
}

absl::Status Error(int code, const std::string& reason, const std::string& message) {
  json body = {{"kind", "Status"},   {"apiVersion", "v1"}, {"status", "Failure"},
               {"message", message}, {"reason", reason},   {"code", code}};
  return k8s::StatusFromHttp(code, body.dump(), "", "");
}

absl::Status NotFound(const k8s::ResourceType& type, absl::string_view name) {
  return Error(404, "NotFound",
               absl::StrCat(type.plural, ".", type.group, " \"", name, "\" not found"));
}

std::string MetaString(const json& obj, const char* key) {
  auto md = obj.find("metadata");
  if (md == obj.end() || !md->is_object()) {
    return "";
  }
  auto it = md->find(key);
  return it != md->end() && it->is_string() ? it->get<std::string>() : "";
}

json MergePatchJson(const json& target, const json& patch) {
  if (!patch.is_object()) {
    return patch;
  }
  json result = target.is_object() ? target : json::object();
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    if (it->is_null()) {
      result.erase(it.key());
    } else {
      result[it.key()] = MergePatchJson(result.contains(it.key()) ? result[it.key()] : json(), *it);
    }
  }
  return result;
}

bool MatchesLabels(const json& obj, const std::string& selector) {
  if (selector.empty()) {
    return true;
  }
  const json labels = obj.value("/metadata/labels"_json_pointer, json::object());
  for (absl::string_view term : absl::StrSplit(selector, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(term, absl::MaxSplits('=', 1));
    if (!labels.contains(kv.first) || labels[kv.first] != kv.second) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::Status FakeKubeClient::Enter(const std::string& verb, const k8s::ResourceType& type,
                                   absl::string_view subresource) {
  const std::string resource =
      subresource.empty() ? type.plural : absl::StrCat(type.plural, "/", subresource);
  ++calls_[absl::StrCat(verb, " ", resource)];
  if (!subresource.empty()) {
    ++calls_[absl::StrCat(verb, " ", type.plural)];
  }
  for (auto it = faults_.begin(); it != faults_.end(); ++it) {
    // "<plural>" matches the resource and its subresources; "<plural>/status" only the latter.
    const bool matches =
        it->verb == verb && (it->resource == resource || it->resource == type.plural);
    if (!matches) {
      continue;
    }
    absl::Status status = it->status;
    if (--it->times == 0) {
      faults_.erase(it);
    }
    return status;
  }
  return absl::OkStatus();
}

void FakeKubeClient::FailNext(const std::string& verb, const std::string& resource,
                              absl::Status status, int times) {
  absl::MutexLock lock(&mu_);
  faults_.push_back(Fault{verb, resource, std::move(status), times});
}

void FakeKubeClient::SetDropClaimDeviceStatus(bool drop) {
  absl::MutexLock lock(&mu_);
  drop_claim_device_status_ = drop;
}

int FakeKubeClient::Calls(const std::string& verb, const std::string& resource) const {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(absl::StrCat(verb, " ", resource));
  return it == calls_.end() ? 0 : it->second;
}

void FakeKubeClient::Emit(const std::string& plural, const std::string& ns,
                          k8s::WatchEventType type, const json& object) {
  events_.push_back(Event{rv_, plural, ns, type, object});
}

absl::StatusOr<json> FakeKubeClient::Get(const k8s::ResourceType& type, absl::string_view ns,
                                         absl::string_view name) {
  absl::MutexLock lock(&mu_);
  if (absl::Status fault = Enter("get", type, ""); !fault.ok()) {
    return fault;
  }
  auto it = objects_.find({type.plural, std::string(ns), std::string(name)});
  if (it == objects_.end()) {
    return NotFound(type, name);
  }
  return it->second;
}

absl::StatusOr<k8s::ListResult> FakeKubeClient::List(const k8s::ResourceType& type,
                                                     absl::string_view ns,
                                                     const k8s::ListOptions& options) {
  absl::MutexLock lock(&mu_);
  if (absl::Status fault = Enter("list", type, ""); !fault.ok()) {
    return fault;
  }
  k8s::ListResult out;
  for (const auto& [key, obj] : objects_) {
    if (std::get<0>(key) != type.plural || (!ns.empty() && std::get<1>(key) != ns)) {
      continue;
    }
    if (MatchesLabels(obj, options.label_selector)) {
      out.items.push_back(obj);
    }
  }
  out.resource_version = absl::StrCat(rv_);
  return out;
}

absl::Status FakeKubeClient::Watch(const k8s::ResourceType& type, absl::string_view ns,
                                   const k8s::WatchOptions& options,
                                   const k8s::WatchEventCallback& callback,
                                   k8s::WatchCancel* cancel) {
  size_t next = 0;
  std::vector<k8s::WatchEvent> initial;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status fault = Enter("watch", type, ""); !fault.ok()) {
      return fault;
    }
    if (options.resource_version.empty()) {
      for (const auto& [key, obj] : objects_) {
        if (std::get<0>(key) == type.plural && (ns.empty() || std::get<1>(key) == ns) &&
            MatchesLabels(obj, options.label_selector)) {
          initial.push_back({k8s::WatchEventType::kAdded, obj});
        }
      }
      next = events_.size();
    } else {
      uint64_t from = 0;
      if (!absl::SimpleAtoi(options.resource_version, &from)) {
        return Error(400, "BadRequest", "invalid resourceVersion");
      }
      if (!events_.empty() && from + 1 < events_.front().rv) {
        return Error(410, "Expired", "too old resource version");
      }
      while (next < events_.size() && events_[next].rv <= from) {
        ++next;
      }
    }
  }
  for (const k8s::WatchEvent& e : initial) {
    if (!callback(e)) {
      return absl::OkStatus();
    }
  }
  while (true) {
    std::vector<Event> batch;
    {
      absl::MutexLock lock(&mu_);
      const auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return next < events_.size() || (cancel != nullptr && cancel->cancelled());
      };
      // The timeout polls the cancel flag, which Cancel() sets without taking mu_.
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(50));
      if (cancel != nullptr && cancel->cancelled()) {
        break;
      }
      for (; next < events_.size(); ++next) {
        batch.push_back(events_[next]);
      }
    }
    bool go_on = true;
    for (const Event& e : batch) {
      if (e.plural != type.plural || (!ns.empty() && e.ns != ns) ||
          !MatchesLabels(e.object, options.label_selector)) {
        continue;
      }
      if (!callback({e.type, e.object})) {
        go_on = false;
        break;
      }
    }
    if (!go_on) {
      break;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<json> FakeKubeClient::Create(const k8s::ResourceType& type, absl::string_view ns,
                                            const json& object) {
  absl::MutexLock lock(&mu_);
  if (absl::Status fault = Enter("create", type, ""); !fault.ok()) {
    return fault;
  }
  json obj = object;
  json& md = obj["metadata"];
  std::string name = MetaString(obj, "name");
  if (name.empty()) {
    const std::string prefix = MetaString(obj, "generateName");
    if (prefix.empty()) {
      return Error(422, "Invalid", "metadata.name: Required value");
    }
    name = absl::StrCat(prefix, uids_ + 1);
    md["name"] = name;
  }
  const Key key{type.plural, std::string(ns), name};
  if (objects_.count(key) > 0) {
    return Error(409, "AlreadyExists",
                 absl::StrCat(type.plural, ".", type.group, " \"", name, "\" already exists"));
  }
  if (type.namespaced) {
    md["namespace"] = std::string(ns);
  }
  md["uid"] = absl::StrCat("00000000-0000-4000-8000-", absl::Dec(++uids_, absl::kZeroPad12));
  md["creationTimestamp"] =
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
  if (type.plural == "resourceclaims") {
    md["generation"] = 1;
  }
  if (WithStatus().count(type.plural) > 0) {
    obj.erase("status");  // status is written through its subresource only
  }
  obj["apiVersion"] = type.ApiVersion();
  obj["kind"] = type.kind;
  md["resourceVersion"] = absl::StrCat(++rv_);
  objects_[key] = obj;
  Emit(type.plural, std::string(ns), k8s::WatchEventType::kAdded, obj);
  return obj;
}

absl::StatusOr<json> FakeKubeClient::WriteLocked(const k8s::ResourceType& type,
                                                 const std::string& ns, json next,
                                                 absl::string_view subresource) {
  const std::string name = MetaString(next, "name");
  auto it = objects_.find({type.plural, ns, name});
  if (it == objects_.end()) {
    return NotFound(type, name);
  }
  const json& old = it->second;
  const std::string rv = MetaString(next, "resourceVersion");
  if (!rv.empty() && rv != MetaString(old, "resourceVersion")) {
    return Error(409, "Conflict",
                 absl::StrCat("Operation cannot be fulfilled on ", type.plural, " \"", name,
                              "\": the object has been modified; please apply your changes to "
                              "the latest version and try again"));
  }
  const std::string uid = MetaString(next, "uid");
  if (!uid.empty() && uid != MetaString(old, "uid")) {
    return Error(409, "Conflict", "Precondition failed: UID in precondition does not match");
  }
  json stored = old;
  if (subresource == "status") {
    if (next.contains("status")) {
      stored["status"] = next["status"];
    } else {
      stored.erase("status");
    }
    if (type.plural == "resourceclaims" && drop_claim_device_status_ && stored.contains("status") &&
        stored["status"].is_object()) {
      stored["status"].erase("devices");  // the field is not known to this server
    }
  } else {
    json status = old.contains("status") ? old["status"] : json();
    stored = next;
    for (const char* k : {"uid", "creationTimestamp", "generation", "namespace"}) {
      if (old["metadata"].contains(k)) {
        stored["metadata"][k] = old["metadata"][k];
      }
    }
    if (WithStatus().count(type.plural) > 0) {
      if (status.is_null()) {
        stored.erase("status");
      } else {
        stored["status"] = status;
      }
    }
    if (type.plural == "resourceclaims" &&
        stored.value("spec", json()) != old.value("spec", json())) {
      stored["metadata"]["generation"] = old["metadata"].value("generation", 1) + 1;
    }
  }
  stored["metadata"]["resourceVersion"] = MetaString(old, "resourceVersion");
  if (stored == old) {
    return old;  // a no-op write keeps its resourceVersion
  }
  stored["metadata"]["resourceVersion"] = absl::StrCat(++rv_);
  it->second = stored;
  Emit(type.plural, ns, k8s::WatchEventType::kModified, stored);
  return stored;
}

absl::StatusOr<json> FakeKubeClient::Update(const k8s::ResourceType& type, absl::string_view ns,
                                            const json& object, absl::string_view subresource) {
  absl::MutexLock lock(&mu_);
  if (absl::Status fault = Enter("update", type, subresource); !fault.ok()) {
    return fault;
  }
  return WriteLocked(type, std::string(ns), object, subresource);
}

absl::StatusOr<json> FakeKubeClient::MergePatch(const k8s::ResourceType& type, absl::string_view ns,
                                                absl::string_view name, const json& patch,
                                                absl::string_view subresource) {
  absl::MutexLock lock(&mu_);
  if (absl::Status fault = Enter("patch", type, subresource); !fault.ok()) {
    return fault;
  }
  auto it = objects_.find({type.plural, std::string(ns), std::string(name)});
  if (it == objects_.end()) {
    return NotFound(type, name);
  }
  json next = MergePatchJson(it->second, patch);
  next["metadata"]["name"] = std::string(name);
  if (!patch.contains("metadata") || !patch["metadata"].contains("resourceVersion")) {
    next["metadata"].erase("resourceVersion");  // a patch without one does not conflict
  }
  return WriteLocked(type, std::string(ns), std::move(next), subresource);
}

absl::Status FakeKubeClient::Delete(const k8s::ResourceType& type, absl::string_view ns,
                                    absl::string_view name, const k8s::DeleteOptions& options) {
  absl::MutexLock lock(&mu_);
  if (absl::Status fault = Enter("delete", type, ""); !fault.ok()) {
    return fault;
  }
  auto it = objects_.find({type.plural, std::string(ns), std::string(name)});
  if (it == objects_.end()) {
    return NotFound(type, name);
  }
  if ((!options.precondition_uid.empty() &&
       options.precondition_uid != MetaString(it->second, "uid")) ||
      (!options.precondition_resource_version.empty() &&
       options.precondition_resource_version != MetaString(it->second, "resourceVersion"))) {
    return Error(409, "Conflict", "Precondition failed");
  }
  json gone = it->second;
  objects_.erase(it);
  gone["metadata"]["resourceVersion"] = absl::StrCat(++rv_);
  Emit(type.plural, std::string(ns), k8s::WatchEventType::kDeleted, gone);
  return absl::OkStatus();
}

absl::Status FakeKubeClient::DeleteCollection(const k8s::ResourceType& type, absl::string_view ns,
                                              const k8s::ListOptions& options) {
  absl::MutexLock lock(&mu_);
  if (absl::Status fault = Enter("deletecollection", type, ""); !fault.ok()) {
    return fault;
  }
  for (auto it = objects_.begin(); it != objects_.end();) {
    if (std::get<0>(it->first) != type.plural || (!ns.empty() && std::get<1>(it->first) != ns) ||
        !MatchesLabels(it->second, options.label_selector)) {
      ++it;
      continue;
    }
    json gone = it->second;
    const std::string object_ns = std::get<1>(it->first);
    it = objects_.erase(it);
    gone["metadata"]["resourceVersion"] = absl::StrCat(++rv_);
    Emit(type.plural, object_ns, k8s::WatchEventType::kDeleted, gone);
  }
  return absl::OkStatus();
}

}  // namespace dralens::testing
