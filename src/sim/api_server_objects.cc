#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "src/sim/api_server_internal.h"

namespace dralens::sim::apiserver {

std::string MediaType(const std::string& content_type) {
  std::string t(absl::StripAsciiWhitespace(content_type.substr(0, content_type.find(';'))));
  absl::AsciiStrToLower(&t);
  return t;
}

std::string MetaString(const json& obj, const char* key) {
  if (!obj.is_object() || !obj.contains("metadata") || !obj["metadata"].is_object()) {
    return "";
  }
  const json& md = obj["metadata"];
  auto it = md.find(key);
  return it != md.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string ObjectKey(const ResourceInfo& info, const std::string& ns, const std::string& name) {
  return info.namespaced ? ns + "/" + name : name;
}

std::map<std::string, std::string> Labels(const json& obj) {
  std::map<std::string, std::string> out;
  if (obj.contains("metadata") && obj["metadata"].is_object() &&
      obj["metadata"].contains("labels") && obj["metadata"]["labels"].is_object()) {
    for (auto it = obj["metadata"]["labels"].begin(); it != obj["metadata"]["labels"].end(); ++it) {
      if (it->is_string()) {
        out[it.key()] = it->get<std::string>();
      }
    }
  }
  return out;
}

// The value of a dotted field path as a field selector sees it ("" when absent).
std::string FieldValue(const json& obj, const std::string& path) {
  const json* cur = &obj;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    if (!cur->is_object()) {
      return "";
    }
    auto it = cur->find(std::string(part));
    if (it == cur->end()) {
      return "";
    }
    cur = &*it;
  }
  if (cur->is_string()) {
    return cur->get<std::string>();
  }
  if (cur->is_boolean()) {
    return cur->get<bool>() ? "true" : "false";
  }
  if (cur->is_number()) {
    return cur->dump();
  }
  return "";
}

std::string RandomSuffix(absl::BitGen& gen) {
  // The alphabet of k8s.io/apimachinery/pkg/util/rand: no vowels, no confusable digits.
  static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  std::string s;
  for (int i = 0; i < 5; ++i) {
    s.push_back(kAlphabet[absl::Uniform<size_t>(gen, 0, sizeof(kAlphabet) - 1)]);
  }
  return s;
}

std::string NewUid(absl::BitGen& gen) {
  uint64_t hi = absl::Uniform<uint64_t>(gen);
  uint64_t lo = absl::Uniform<uint64_t>(gen);
  hi = (hi & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;  // version 4
  lo = (lo & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // RFC 4122 variant
  return absl::StrFormat("%08x-%04x-%04x-%04x-%012x", hi >> 32, (hi >> 16) & 0xffff, hi & 0xffff,
                         lo >> 48, lo & 0xffffffffffffULL);
}

// RFC 7386 JSON merge patch.
json MergePatch(const json& target, const json& patch) {
  if (!patch.is_object()) {
    return patch;
  }
  json result = target.is_object() ? target : json::object();
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    if (it->is_null()) {
      result.erase(it.key());
    } else {
      result[it.key()] = MergePatch(result.contains(it.key()) ? result[it.key()] : json(), *it);
    }
  }
  return result;
}

// An object (or a list, or a Status) as the client of `info` sees it: stored objects of a
// resource with a second face are converted (src/sim/resources.h).
json ClientView(const ResourceInfo& info, const json& stored) {
  if (info.from_storage == nullptr || !stored.is_object()) {
    return stored;
  }
  const std::string kind = stored.value("kind", std::string());
  if (kind == "Status") {
    return stored;
  }
  if (kind == info.ListKind() && stored.contains("items")) {
    json list = stored;
    for (json& item : list["items"]) {
      item = info.from_storage(item);
      item.erase("kind");
      item.erase("apiVersion");
    }
    return list;
  }
  return info.from_storage(stored);
}

bool Filter::Matches(const json& stored) const {
  const json converted =
      info != nullptr && info->from_storage != nullptr ? info->from_storage(stored) : json();
  const json& obj = converted.is_null() ? stored : converted;
  if (!ns.empty() && MetaString(obj, "namespace") != ns) {
    return false;
  }
  if (!labels.Empty() && !labels.Matches(Labels(obj))) {
    return false;
  }
  if (!fields.Empty()) {
    std::map<std::string, std::string> values = {
        {"metadata.name", MetaString(obj, "name")},
        {"metadata.namespace", MetaString(obj, "namespace")}};
    for (const std::string& f : info->field_labels) {
      values[f] = FieldValue(obj, f);
    }
    if (!fields.Matches(values)) {
      return false;
    }
  }
  return true;
}

}  // namespace dralens::sim::apiserver
