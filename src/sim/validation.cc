#include "src/sim/validation.h"

#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/sim/event_conversion.h"
#include "src/sim/names.h"

namespace dralens::sim {
namespace {

using nlohmann::json;

// Limits from resource.k8s.io/v1 (dra-protocol.md §4).
constexpr size_t kMaxDevices = 128;
constexpr size_t kMaxDevicesWithTaintsOrCounters = 64;  // 1.35+
constexpr size_t kMaxAttributesAndCapacities = 32;
constexpr size_t kMaxAttributeValueLength = 64;
constexpr size_t kMaxDriverNameLength = 63;
constexpr size_t kMaxPoolNameLength = 253;
constexpr size_t kMaxTaints134 = 4;
constexpr size_t kMaxTaints135 = 16;
constexpr size_t kMaxCounterSets135 = 8;
constexpr size_t kMaxCountersPerSet = 32;
constexpr size_t kMaxSharedCountersTotal134 = 32;
constexpr size_t kMaxDeviceCounters134 = 32;
constexpr size_t kMaxSliceDeviceCounters134 = 1024;
constexpr size_t kMaxConsumesCounters135 = 2;
constexpr size_t kMaxRequests = 32;
constexpr size_t kMaxSubRequests = 8;
constexpr size_t kMaxSelectors = 32;
constexpr size_t kMaxConstraints = 32;
constexpr size_t kMaxConfigs = 32;
constexpr size_t kMaxCelLength = 10 * 1024;
constexpr size_t kMaxOpaqueParameters = 10 * 1024;
constexpr size_t kMaxTolerations = 16;
constexpr size_t kMaxReservedFor = 256;
constexpr size_t kMaxAllocationResults = 32;
constexpr size_t kMaxDeviceConditions = 8;
constexpr size_t kMaxDeviceStatusData = 10 * 1024;
constexpr size_t kMaxAnnotationsBytes = 256 * 1024;

std::string Quote(const std::string& s) { return json(s).dump(); }

std::string ValueText(const json& v) {
  if (v.is_string()) {
    return Quote(v.get<std::string>());
  }
  if (v.is_number() || v.is_boolean()) {
    return v.dump();
  }
  if (v.is_null()) {
    return "null";
  }
  return v.is_array() ? "array" : "object";
}

const char* TypeName(json::value_t t) {
  switch (t) {
    case json::value_t::object:
      return "object";
    case json::value_t::array:
      return "array";
    case json::value_t::string:
      return "string";
    case json::value_t::boolean:
      return "bool";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    default:
      return "number";
  }
}

enum class JType { kObject, kArray, kString, kInt, kBool };

bool HasType(const json& v, JType t) {
  switch (t) {
    case JType::kObject:
      return v.is_object();
    case JType::kArray:
      return v.is_array();
    case JType::kString:
      return v.is_string();
    case JType::kInt:
      return v.is_number_integer();
    case JType::kBool:
      return v.is_boolean();
  }
  return false;
}

const char* JTypeName(JType t) {
  switch (t) {
    case JType::kObject:
      return "object";
    case JType::kArray:
      return "array";
    case JType::kString:
      return "string";
    case JType::kInt:
      return "integer";
    case JType::kBool:
      return "bool";
  }
  return "";
}

// Collects field errors with the real server's wording.
class Errors {
 public:
  void Required(const std::string& f, const std::string& detail = "") {
    Add(FieldError::Type::kRequired, f,
        detail.empty() ? "Required value" : "Required value: " + detail);
  }
  void Invalid(const std::string& f, const json& value, const std::string& detail) {
    Add(FieldError::Type::kInvalid, f,
        absl::StrCat("Invalid value: ", ValueText(value), ": ", detail));
  }
  void TooLong(const std::string& f, size_t max) {
    Add(FieldError::Type::kTooLong, f,
        absl::StrCat("Too long: may not be more than ", max, " bytes"));
  }
  void TooMany(const std::string& f, size_t have, size_t max) {
    Add(FieldError::Type::kTooMany, f,
        absl::StrCat("Too many: ", have, ": must have at most ", max, " items"));
  }
  void Duplicate(const std::string& f, const json& value) {
    Add(FieldError::Type::kDuplicate, f, "Duplicate value: " + ValueText(value));
  }
  void NotSupported(const std::string& f, const json& value, const std::vector<std::string>& ok) {
    std::vector<std::string> quoted;
    for (const std::string& s : ok) {
      quoted.push_back(Quote(s));
    }
    Add(FieldError::Type::kNotSupported, f,
        absl::StrCat("Unsupported value: ", ValueText(value),
                     ": supported values: ", absl::StrJoin(quoted, ", ")));
  }
  void Forbidden(const std::string& f, const std::string& detail) {
    Add(FieldError::Type::kForbidden, f, "Forbidden: " + detail);
  }
  void TypeInvalid(const std::string& f, const json& value, const std::string& detail) {
    Add(FieldError::Type::kTypeInvalid, f,
        absl::StrCat("Invalid value: ", ValueText(value), ": ", detail));
  }
  // Reports each problem of a name check as Invalid.
  void Name(const std::string& f, const std::string& value, const std::vector<std::string>& errs) {
    for (const std::string& e : errs) {
      Invalid(f, value, e);
    }
  }

  // Returns the member `key` of `obj` if present, non-null and of type `t`; reports a type error
  // (and returns nullptr) if it has another type.
  const json* Get(const json& obj, const std::string& f, const char* key, JType t) {
    if (!obj.is_object()) {
      return nullptr;
    }
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
      return nullptr;
    }
    if (!HasType(*it, t)) {
      TypeInvalid(Join(f, key), *it,
                  absl::StrCat("expected ", JTypeName(t), ", got ", TypeName(it->type())));
      return nullptr;
    }
    return &*it;
  }
  // A string member, "" when absent.
  std::string Str(const json& obj, const std::string& f, const char* key) {
    const json* v = Get(obj, f, key, JType::kString);
    return v ? v->get<std::string>() : "";
  }
  // An int member, or `def` when absent.
  int64_t Int(const json& obj, const std::string& f, const char* key, int64_t def) {
    const json* v = Get(obj, f, key, JType::kInt);
    return v ? v->get<int64_t>() : def;
  }
  bool Bool(const json& obj, const std::string& f, const char* key) {
    const json* v = Get(obj, f, key, JType::kBool);
    return v ? v->get<bool>() : false;
  }
  size_t Size(const json* v) { return v ? v->size() : 0; }

  static std::string Join(const std::string& f, const std::string& key) {
    return f.empty() ? key : f + "." + key;
  }
  static std::string Index(const std::string& f, size_t i) { return absl::StrCat(f, "[", i, "]"); }
  static std::string Key(const std::string& f, const std::string& k) {
    return absl::StrCat(f, "[", k, "]");
  }

  FieldErrors Take() { return std::move(errs_); }

 private:
  void Add(FieldError::Type t, const std::string& f, std::string msg) {
    errs_.push_back(FieldError{t, f, std::move(msg)});
  }
  FieldErrors errs_;
};

// ---------- metadata ----------

void ValidateMetadata(Errors& e, const json& obj, const ValidationOptions& opts) {
  const std::string f = "metadata";
  const json* md = e.Get(obj, "", "metadata", JType::kObject);
  if (md == nullptr) {
    e.Required(f);
    return;
  }
  std::string name = e.Str(*md, f, "name");
  std::string generate_name = e.Str(*md, f, "generateName");
  if (name.empty()) {
    e.Required(f + ".name", "name or generateName is required");
  } else {
    e.Name(f + ".name", name,
           opts.name_is_dns_label ? CheckDnsLabel(name) : CheckDnsSubdomain(name));
  }
  if (!generate_name.empty()) {
    e.Name(f + ".generateName", generate_name,
           CheckNamePrefix(generate_name, opts.name_is_dns_label));
  }
  std::string ns = e.Str(*md, f, "namespace");
  if (opts.namespaced) {
    if (ns.empty()) {
      e.Required(f + ".namespace");
    } else {
      e.Name(f + ".namespace", ns, CheckDnsLabel(ns));
    }
  } else if (!ns.empty()) {
    e.Forbidden(f + ".namespace", "not allowed on this type");
  }
  if (const json* labels = e.Get(*md, f, "labels", JType::kObject)) {
    for (auto it = labels->begin(); it != labels->end(); ++it) {
      e.Name(f + ".labels", it.key(), CheckQualifiedName(it.key()));
      if (!it->is_string()) {
        e.TypeInvalid(Errors::Key(f + ".labels", it.key()), *it, "expected string");
        continue;
      }
      e.Name(f + ".labels", it->get<std::string>(), CheckLabelValue(it->get<std::string>()));
    }
  }
  if (const json* ann = e.Get(*md, f, "annotations", JType::kObject)) {
    size_t total = 0;
    for (auto it = ann->begin(); it != ann->end(); ++it) {
      std::string lower = it.key();
      for (char& c : lower) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      }
      e.Name(f + ".annotations", it.key(), CheckQualifiedName(lower));
      if (!it->is_string()) {
        e.TypeInvalid(Errors::Key(f + ".annotations", it.key()), *it, "expected string");
        continue;
      }
      total += it.key().size() + it->get<std::string>().size();
    }
    if (total > kMaxAnnotationsBytes) {
      e.TooLong(f + ".annotations", kMaxAnnotationsBytes);
    }
  }
  if (const json* fins = e.Get(*md, f, "finalizers", JType::kArray)) {
    for (size_t i = 0; i < fins->size(); ++i) {
      const json& fin = (*fins)[i];
      std::string p = Errors::Index(f + ".finalizers", i);
      if (!fin.is_string()) {
        e.TypeInvalid(p, fin, "expected string");
        continue;
      }
      std::string s = fin.get<std::string>();
      std::vector<std::string> errs = CheckQualifiedName(s);
      e.Name(p, s, errs);
      if (errs.empty() && s.find('/') == std::string::npos && s != "kubernetes" && s != "orphan" &&
          s != "foregroundDeletion") {
        e.Invalid(p, s, "name is neither a standard finalizer name nor is it fully qualified");
      }
    }
  }
  if (const json* owners = e.Get(*md, f, "ownerReferences", JType::kArray)) {
    for (size_t i = 0; i < owners->size(); ++i) {
      std::string p = Errors::Index(f + ".ownerReferences", i);
      const json& o = (*owners)[i];
      if (!o.is_object()) {
        e.TypeInvalid(p, o, "expected object");
        continue;
      }
      for (const char* k : {"apiVersion", "kind", "name", "uid"}) {
        if (e.Str(o, p, k).empty()) {
          e.Required(Errors::Join(p, k));
        }
      }
    }
  }
}

void ValidateMetadataUpdate(Errors& e, const json& obj, const json& old) {
  static const json kEmpty = json::object();
  const json& md = obj.contains("metadata") ? obj["metadata"] : kEmpty;
  const json& omd = old.contains("metadata") ? old["metadata"] : kEmpty;
  if (omd.contains("deletionTimestamp") && md.contains("finalizers") &&
      md["finalizers"].is_array()) {
    std::set<std::string> before;
    if (omd.contains("finalizers") && omd["finalizers"].is_array()) {
      for (const json& f : omd["finalizers"]) {
        before.insert(f.dump());
      }
    }
    for (const json& f : md["finalizers"]) {
      if (before.count(f.dump()) == 0) {
        e.Forbidden("metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted");
        break;
      }
    }
  }
  for (const char* k : {"name", "namespace"}) {
    json a = md.value(k, json(""));
    json b = omd.value(k, json(""));
    if (a != b) {
      e.Invalid(absl::StrCat("metadata.", k), a, "field is immutable");
    }
  }
}

// ---------- shared pieces ----------

void ValidateQuantity(Errors& e, const json& v, const std::string& f) {
  if (v.is_string()) {
    if (!IsQuantity(v.get<std::string>())) {
      e.TypeInvalid(f, v,
                    "quantities must match the regular expression "
                    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'");
    }
    return;
  }
  if (v.is_number()) {
    if (v.is_number_float() && !IsQuantity(v.dump())) {
      e.TypeInvalid(f, v, "quantities must be plain decimal numbers or strings");
    }
    return;
  }
  e.TypeInvalid(f, v, "expected a quantity string");
}

// Validates `{"value": <quantity>}` entries of a map keyed by `key_check`ed names.
void ValidateQuantityMap(Errors& e, const json& map, const std::string& f, bool dns_label_keys) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    std::string p = Errors::Key(f, it.key());
    if (dns_label_keys) {
      e.Name(p, it.key(), CheckDnsLabel(it.key()));
    }
    if (!it->is_object()) {
      e.TypeInvalid(p, *it, "expected object");
      continue;
    }
    auto v = it->find("value");
    if (v == it->end() || v->is_null()) {
      e.Required(p + ".value");
      continue;
    }
    ValidateQuantity(e, *v, p + ".value");
  }
}

// QualifiedName of a device attribute/capacity: C identifier ≤ 32 or
// <DNS subdomain ≤ 63>/<C identifier ≤ 32>. Returns the fully qualified form.
std::string ValidateAttributeName(Errors& e, const std::string& f, const std::string& name,
                                  const std::string& driver) {
  std::vector<std::string> parts = absl::StrSplit(name, '/');
  std::string id = name;
  std::string domain = driver;
  if (parts.size() > 2) {
    e.Invalid(f, name, "a qualified name must be a C identifier with an optional domain prefix");
    return name;
  }
  if (parts.size() == 2) {
    domain = parts[0];
    id = parts[1];
    if (domain.empty()) {
      e.Required(f, "the domain must not be empty");
    } else {
      e.Name(f, domain, CheckDnsSubdomain(domain));
      if (domain.size() > kMaxDriverNameLength) {
        e.TooLong(f, kMaxDriverNameLength);
      }
    }
  }
  if (id.empty()) {
    e.Required(f, "name required");
  } else {
    e.Name(f, id, CheckCIdentifier(id));
    if (id.size() > kCIdentifierMaxLength) {
      e.TooLong(f, kCIdentifierMaxLength);
    }
  }
  return domain + "/" + id;
}

void ValidateFullyQualifiedName(Errors& e, const std::string& f, const std::string& name) {
  if (name.find('/') == std::string::npos) {
    e.Invalid(f, name, "a fully qualified name must be a domain and a name separated by a slash");
    return;
  }
  ValidateAttributeName(e, f, name, "");
}

void ValidateCelSelectors(Errors& e, const json& parent, const std::string& f) {
  const json* sels = e.Get(parent, f, "selectors", JType::kArray);
  if (sels == nullptr) {
    return;
  }
  std::string p = Errors::Join(f, "selectors");
  if (sels->size() > kMaxSelectors) {
    e.TooMany(p, sels->size(), kMaxSelectors);
  }
  for (size_t i = 0; i < sels->size(); ++i) {
    std::string sp = Errors::Index(p, i);
    const json& sel = (*sels)[i];
    if (!sel.is_object()) {
      e.TypeInvalid(sp, sel, "expected object");
      continue;
    }
    const json* cel = e.Get(sel, sp, "cel", JType::kObject);
    if (cel == nullptr) {
      e.Required(sp + ".cel");
      continue;
    }
    std::string expr = e.Str(*cel, sp + ".cel", "expression");
    if (expr.empty()) {
      e.Required(sp + ".cel.expression");
    } else if (expr.size() > kMaxCelLength) {
      e.TooLong(sp + ".cel.expression", kMaxCelLength);
    }
  }
}

void ValidateOpaque(Errors& e, const json& cfg, const std::string& f) {
  const json* opaque = e.Get(cfg, f, "opaque", JType::kObject);
  if (opaque == nullptr) {
    e.Required(f + ".opaque");
    return;
  }
  std::string p = f + ".opaque";
  std::string driver = e.Str(*opaque, p, "driver");
  if (driver.empty()) {
    e.Required(p + ".driver");
  } else {
    e.Name(p + ".driver", driver, CheckDnsSubdomain(driver));
    if (driver.size() > kMaxDriverNameLength) {
      e.TooLong(p + ".driver", kMaxDriverNameLength);
    }
  }
  auto params = opaque->find("parameters");
  if (params == opaque->end() || params->is_null()) {
    e.Required(p + ".parameters");
    return;
  }
  if (!params->is_object()) {
    e.Invalid(p + ".parameters", "<value omitted>", "parameters must be a valid JSON object");
    return;
  }
  if (params->dump().size() > kMaxOpaqueParameters) {
    e.TooLong(p + ".parameters", kMaxOpaqueParameters);
  }
}

void ValidateNodeSelector(Errors& e, const json& ns, const std::string& f) {
  const json* terms = e.Get(ns, f, "nodeSelectorTerms", JType::kArray);
  if (terms == nullptr || terms->size() != 1) {
    e.Invalid(f + ".nodeSelectorTerms", terms ? json(terms->size()) : json(0),
              "must have exactly one node selector term");
  }
}

// ---------- ResourceSlice ----------

void ValidateDevice(Errors& e, const json& dev, const std::string& f, const std::string& driver,
                    bool per_device_nodes, const std::map<std::string, std::set<std::string>>& sets,
                    int minor, size_t& slice_counters) {
  std::string name = e.Str(dev, f, "name");
  if (name.empty()) {
    e.Required(f + ".name");
  } else {
    e.Name(f + ".name", name, CheckDnsLabel(name));
  }
  const json* attrs = e.Get(dev, f, "attributes", JType::kObject);
  const json* caps = e.Get(dev, f, "capacity", JType::kObject);
  size_t combined = e.Size(attrs) + e.Size(caps);
  if (combined > kMaxAttributesAndCapacities) {
    e.Invalid(f, static_cast<int64_t>(combined),
              absl::StrCat("the total number of attributes and capacities must not exceed ",
                           kMaxAttributesAndCapacities));
  }
  if (attrs != nullptr) {
    std::set<std::string> seen;
    for (auto it = attrs->begin(); it != attrs->end(); ++it) {
      std::string p = Errors::Key(f + ".attributes", it.key());
      std::string fq = ValidateAttributeName(e, p, it.key(), driver);
      if (!seen.insert(fq).second) {
        e.Duplicate(p, it.key());
      }
      if (!it->is_object()) {
        e.TypeInvalid(p, *it, "expected object");
        continue;
      }
      int set = 0;
      if (e.Get(*it, p, "int", JType::kInt)) {
        ++set;
      }
      if (e.Get(*it, p, "bool", JType::kBool)) {
        ++set;
      }
      if (const json* s = e.Get(*it, p, "string", JType::kString)) {
        ++set;
        if (s->get<std::string>().size() > kMaxAttributeValueLength) {
          e.TooLong(p + ".string", kMaxAttributeValueLength);
        }
      }
      if (const json* v = e.Get(*it, p, "version", JType::kString)) {
        ++set;
        std::string ver = v->get<std::string>();
        if (ver.size() > kMaxAttributeValueLength) {
          e.TooLong(p + ".version", kMaxAttributeValueLength);
        } else if (!IsSemver(ver)) {
          e.Invalid(p + ".version", ver, "must be a string compatible with semver.org spec 2.0.0");
        }
      }
      if (set == 0) {
        e.Required(p, "exactly one value must be specified");
      } else if (set > 1) {
        e.Invalid(p, *it, "exactly one value must be specified");
      }
    }
  }
  if (caps != nullptr) {
    std::set<std::string> seen;
    for (auto it = caps->begin(); it != caps->end(); ++it) {
      std::string p = Errors::Key(f + ".capacity", it.key());
      std::string fq = ValidateAttributeName(e, p, it.key(), driver);
      if (!seen.insert(fq).second) {
        e.Duplicate(p, it.key());
      }
    }
    json copy = json::object();
    for (auto it = caps->begin(); it != caps->end(); ++it) {
      copy[it.key()] = *it;
    }
    ValidateQuantityMap(e, copy, f + ".capacity", false);
  }
  if (const json* consumes = e.Get(dev, f, "consumesCounters", JType::kArray)) {
    std::string p = f + ".consumesCounters";
    if (minor >= 35 && consumes->size() > kMaxConsumesCounters135) {
      e.TooMany(p, consumes->size(), kMaxConsumesCounters135);
    }
    std::set<std::string> seen;
    size_t device_counters = 0;
    for (size_t i = 0; i < consumes->size(); ++i) {
      std::string cp = Errors::Index(p, i);
      const json& c = (*consumes)[i];
      if (!c.is_object()) {
        e.TypeInvalid(cp, c, "expected object");
        continue;
      }
      std::string set = e.Str(c, cp, "counterSet");
      if (set.empty()) {
        e.Required(cp + ".counterSet");
      } else {
        e.Name(cp + ".counterSet", set, CheckDnsLabel(set));
        if (!seen.insert(set).second) {
          e.Duplicate(cp + ".counterSet", set);
        }
      }
      const json* counters = e.Get(c, cp, "counters", JType::kObject);
      if (counters == nullptr || counters->empty()) {
        e.Required(cp + ".counters");
        continue;
      }
      ValidateQuantityMap(e, *counters, cp + ".counters", true);
      device_counters += counters->size();
      if (minor >= 35 && counters->size() > kMaxCountersPerSet) {
        e.TooMany(cp + ".counters", counters->size(), kMaxCountersPerSet);
      }
      if (minor < 35 && !set.empty()) {
        // 1.34: counters live in the same slice, so references are checked here.
        auto s = sets.find(set);
        if (s == sets.end()) {
          e.Invalid(cp + ".counterSet", set,
                    "must reference a counterSet defined in the ResourceSlice sharedCounters");
        } else {
          for (auto it = counters->begin(); it != counters->end(); ++it) {
            if (s->second.count(it.key()) == 0) {
              e.Invalid(Errors::Key(cp + ".counters", it.key()), it.key(),
                        "must reference a counter defined in the ResourceSlice sharedCounters");
            }
          }
        }
      }
    }
    if (minor < 35 && device_counters > kMaxDeviceCounters134) {
      e.TooMany(p, device_counters, kMaxDeviceCounters134);
    }
    slice_counters += device_counters;
  }
  int node_fields = 0;
  std::string node_name = e.Str(dev, f, "nodeName");
  if (!node_name.empty()) {
    ++node_fields;
    e.Name(f + ".nodeName", node_name, CheckDnsSubdomain(node_name));
  }
  if (const json* ns = e.Get(dev, f, "nodeSelector", JType::kObject)) {
    ++node_fields;
    ValidateNodeSelector(e, *ns, f + ".nodeSelector");
  }
  if (e.Bool(dev, f, "allNodes")) {
    ++node_fields;
  }
  if (per_device_nodes && node_fields != 1) {
    e.Invalid(f, json(node_fields),
              "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when "
              "`perDeviceNodeSelection` is set to true in the ResourceSlice spec");
  } else if (!per_device_nodes && node_fields != 0) {
    e.Forbidden(f,
                "`nodeName`, `nodeSelector` and `allNodes` can only be set if "
                "`perDeviceNodeSelection` is set to true in the ResourceSlice spec");
  }
  if (const json* taints = e.Get(dev, f, "taints", JType::kArray)) {
    std::string p = f + ".taints";
    size_t max = minor >= 35 ? kMaxTaints135 : kMaxTaints134;
    if (taints->size() > max) {
      e.TooMany(p, taints->size(), max);
    }
    for (size_t i = 0; i < taints->size(); ++i) {
      std::string tp = Errors::Index(p, i);
      const json& t = (*taints)[i];
      if (!t.is_object()) {
        e.TypeInvalid(tp, t, "expected object");
        continue;
      }
      std::string key = e.Str(t, tp, "key");
      if (key.empty()) {
        e.Required(tp + ".key");
      } else {
        e.Name(tp + ".key", key, CheckQualifiedName(key));
      }
      std::string value = e.Str(t, tp, "value");
      e.Name(tp + ".value", value, CheckLabelValue(value));
      std::string effect = e.Str(t, tp, "effect");
      if (effect.empty()) {
        e.Required(tp + ".effect");
      } else if (effect != "None" && effect != "NoSchedule" && effect != "NoExecute") {
        e.NotSupported(tp + ".effect", effect, {"NoExecute", "NoSchedule", "None"});
      }
    }
  }
  for (const char* k : {"bindingConditions", "bindingFailureConditions"}) {
    if (const json* conds = e.Get(dev, f, k, JType::kArray)) {
      if (conds->size() > 4) {
        e.TooMany(Errors::Join(f, k), conds->size(), 4);
      }
    }
  }
}

void ValidateResourceSliceSpec(Errors& e, const json& obj, int minor) {
  const json* spec = e.Get(obj, "", "spec", JType::kObject);
  if (spec == nullptr) {
    e.Required("spec");
    return;
  }
  const std::string f = "spec";
  std::string driver = e.Str(*spec, f, "driver");
  if (driver.empty()) {
    e.Required("spec.driver");
  } else {
    e.Name("spec.driver", driver, CheckDnsSubdomain(driver));
    if (driver.size() > kMaxDriverNameLength) {
      e.TooLong("spec.driver", kMaxDriverNameLength);
    }
  }
  const json* pool = e.Get(*spec, f, "pool", JType::kObject);
  if (pool == nullptr) {
    e.Required("spec.pool");
  } else {
    std::string name = e.Str(*pool, "spec.pool", "name");
    if (name.empty()) {
      e.Required("spec.pool.name");
    } else {
      if (name.size() > kMaxPoolNameLength) {
        e.TooLong("spec.pool.name", kMaxPoolNameLength);
      }
      for (absl::string_view part : absl::StrSplit(name, '/')) {
        std::vector<std::string> errs = CheckDnsSubdomain(part);
        if (!errs.empty()) {
          e.Invalid(
              "spec.pool.name", name,
              "each part of a pool name separated by '/' must be a DNS subdomain: " + errs.back());
          break;
        }
      }
    }
    if (e.Int(*pool, "spec.pool", "generation", 0) < 0) {
      e.Invalid("spec.pool.generation", (*pool)["generation"],
                "must be greater than or equal to 0");
    }
    int64_t count = e.Int(*pool, "spec.pool", "resourceSliceCount", 0);
    if (count <= 0) {
      e.Invalid("spec.pool.resourceSliceCount", json(count), "must be greater than zero");
    }
  }
  std::vector<std::string> node_fields;
  std::string node_name = e.Str(*spec, f, "nodeName");
  if (!node_name.empty()) {
    node_fields.push_back("`nodeName`");
    e.Name("spec.nodeName", node_name, CheckDnsSubdomain(node_name));
  }
  if (const json* ns = e.Get(*spec, f, "nodeSelector", JType::kObject)) {
    node_fields.push_back("`nodeSelector`");
    ValidateNodeSelector(e, *ns, "spec.nodeSelector");
  }
  if (e.Bool(*spec, f, "allNodes")) {
    node_fields.push_back("`allNodes`");
  }
  bool per_device = e.Bool(*spec, f, "perDeviceNodeSelection");
  if (per_device) {
    node_fields.push_back("`perDeviceNodeSelection`");
  }
  constexpr char kExactlyOne[] =
      "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is "
      "required";
  if (node_fields.empty()) {
    e.Required("spec", kExactlyOne);
  } else if (node_fields.size() > 1) {
    e.Invalid("spec", absl::StrCat("{", absl::StrJoin(node_fields, ", "), "}"),
              absl::StrCat(kExactlyOne, ", but multiple fields are set"));
  }

  // Shared counters.
  std::map<std::string, std::set<std::string>> sets;
  const json* shared = e.Get(*spec, f, "sharedCounters", JType::kArray);
  if (shared != nullptr) {
    const std::string p = "spec.sharedCounters";
    if (minor >= 35 && shared->size() > kMaxCounterSets135) {
      e.TooMany(p, shared->size(), kMaxCounterSets135);
    }
    size_t total = 0;
    for (size_t i = 0; i < shared->size(); ++i) {
      std::string sp = Errors::Index(p, i);
      const json& s = (*shared)[i];
      if (!s.is_object()) {
        e.TypeInvalid(sp, s, "expected object");
        continue;
      }
      std::string name = e.Str(s, sp, "name");
      if (name.empty()) {
        e.Required(sp + ".name");
      } else {
        e.Name(sp + ".name", name, CheckDnsLabel(name));
        if (sets.count(name) != 0) {
          e.Duplicate(sp + ".name", name);
        }
      }
      std::set<std::string>& counter_names = sets[name];
      const json* counters = e.Get(s, sp, "counters", JType::kObject);
      if (counters == nullptr || counters->empty()) {
        e.Required(sp + ".counters");
        continue;
      }
      ValidateQuantityMap(e, *counters, sp + ".counters", true);
      for (auto it = counters->begin(); it != counters->end(); ++it) {
        counter_names.insert(it.key());
      }
      total += counters->size();
      if (minor >= 35 && counters->size() > kMaxCountersPerSet) {
        e.TooMany(sp + ".counters", counters->size(), kMaxCountersPerSet);
      }
    }
    if (minor < 35 && total > kMaxSharedCountersTotal134) {
      e.TooMany(p, total, kMaxSharedCountersTotal134);
    }
  }

  const json* devices = e.Get(*spec, f, "devices", JType::kArray);
  if (devices == nullptr) {
    return;
  }
  if (minor >= 35 && !devices->empty() && shared != nullptr && !shared->empty()) {
    e.Invalid("spec", "{`devices`, `sharedCounters`}",
              "only one of `devices` and `sharedCounters` may be set");
  }
  size_t max = kMaxDevices;
  if (minor >= 35) {
    for (const json& d : *devices) {
      if (d.is_object() &&
          ((d.contains("taints") && !d["taints"].empty() && d["taints"].is_array()) ||
           (d.contains("consumesCounters") && d["consumesCounters"].is_array() &&
            !d["consumesCounters"].empty()))) {
        max = kMaxDevicesWithTaintsOrCounters;
        break;
      }
    }
  }
  if (devices->size() > max) {
    e.TooMany("spec.devices", devices->size(), max);
  }
  std::set<std::string> names;
  size_t slice_counters = 0;
  for (size_t i = 0; i < devices->size(); ++i) {
    std::string dp = Errors::Index("spec.devices", i);
    const json& d = (*devices)[i];
    if (!d.is_object()) {
      e.TypeInvalid(dp, d, "expected object");
      continue;
    }
    ValidateDevice(e, d, dp, driver, per_device, sets, minor, slice_counters);
    if (d.contains("name") && d["name"].is_string() &&
        !names.insert(d["name"].get<std::string>()).second) {
      e.Duplicate(dp + ".name", d["name"]);
    }
  }
  if (minor < 35 && slice_counters > kMaxSliceDeviceCounters134) {
    e.TooMany("spec.devices", slice_counters, kMaxSliceDeviceCounters134);
  }
}

// ---------- ResourceClaim ----------

void ValidateTolerations(Errors& e, const json& req, const std::string& f) {
  const json* tols = e.Get(req, f, "tolerations", JType::kArray);
  if (tols == nullptr) {
    return;
  }
  std::string p = f + ".tolerations";
  if (tols->size() > kMaxTolerations) {
    e.TooMany(p, tols->size(), kMaxTolerations);
  }
  for (size_t i = 0; i < tols->size(); ++i) {
    std::string tp = Errors::Index(p, i);
    const json& t = (*tols)[i];
    if (!t.is_object()) {
      e.TypeInvalid(tp, t, "expected object");
      continue;
    }
    std::string key = e.Str(t, tp, "key");
    if (!key.empty()) {
      e.Name(tp + ".key", key, CheckQualifiedName(key));
    }
    std::string op = e.Str(t, tp, "operator");
    if (op != "Exists" && op != "Equal") {
      e.NotSupported(tp + ".operator", op, {"Equal", "Exists"});
    }
    std::string effect = e.Str(t, tp, "effect");
    if (!effect.empty() && effect != "None" && effect != "NoSchedule" && effect != "NoExecute") {
      e.NotSupported(tp + ".effect", effect, {"NoExecute", "NoSchedule", "None"});
    }
  }
}

// The fields ExactDeviceRequest and DeviceSubRequest share.
void ValidateExactRequest(Errors& e, const json& req, const std::string& f) {
  std::string cls = e.Str(req, f, "deviceClassName");
  if (cls.empty()) {
    e.Required(f + ".deviceClassName");
  } else {
    e.Name(f + ".deviceClassName", cls, CheckDnsSubdomain(cls));
  }
  ValidateCelSelectors(e, req, f);
  std::string mode = e.Str(req, f, "allocationMode");
  int64_t count = e.Int(req, f, "count", 0);
  if (mode == "ExactCount") {
    if (count <= 0) {
      e.Invalid(f + ".count", json(count), "must be greater than zero");
    }
  } else if (mode == "All") {
    if (count != 0) {
      e.Invalid(f + ".count", json(count), "must not be specified when allocationMode is 'All'");
    }
  } else {
    e.NotSupported(f + ".allocationMode", mode, {"All", "ExactCount"});
  }
  e.Bool(req, f, "adminAccess");
  ValidateTolerations(e, req, f);
  if (const json* cap = e.Get(req, f, "capacity", JType::kObject)) {
    if (const json* reqs = e.Get(*cap, f + ".capacity", "requests", JType::kObject)) {
      for (auto it = reqs->begin(); it != reqs->end(); ++it) {
        std::string p = Errors::Key(f + ".capacity.requests", it.key());
        ValidateAttributeName(e, p, it.key(), "");
        ValidateQuantity(e, *it, p);
      }
    }
  }
}

// Request references in constraints/config: "<request>" or "<request>/<subrequest>".
void ValidateRequestRefs(Errors& e, const json& item, const std::string& f,
                         const std::set<std::string>& valid) {
  const json* reqs = e.Get(item, f, "requests", JType::kArray);
  if (reqs == nullptr) {
    return;
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < reqs->size(); ++i) {
    std::string p = Errors::Index(f + ".requests", i);
    const json& r = (*reqs)[i];
    if (!r.is_string()) {
      e.TypeInvalid(p, r, "expected string");
      continue;
    }
    std::string s = r.get<std::string>();
    if (valid.count(s) == 0) {
      e.Invalid(p, s,
                "must be the name of a request in the claim or the name of a request and a "
                "subrequest separated by '/'");
    }
    if (!seen.insert(s).second) {
      e.Duplicate(p, s);
    }
  }
}

void ValidateClaimSpec(Errors& e, const json& obj) {
  const json* spec = e.Get(obj, "", "spec", JType::kObject);
  if (spec == nullptr) {
    return;  // an empty spec asks for nothing, as the real server allows
  }
  const json* devices = e.Get(*spec, "spec", "devices", JType::kObject);
  if (devices == nullptr) {
    return;
  }
  const std::string f = "spec.devices";
  std::set<std::string> valid_refs;
  if (const json* reqs = e.Get(*devices, f, "requests", JType::kArray)) {
    const std::string p = f + ".requests";
    if (reqs->size() > kMaxRequests) {
      e.TooMany(p, reqs->size(), kMaxRequests);
    }
    std::set<std::string> names;
    for (size_t i = 0; i < reqs->size(); ++i) {
      std::string rp = Errors::Index(p, i);
      const json& r = (*reqs)[i];
      if (!r.is_object()) {
        e.TypeInvalid(rp, r, "expected object");
        continue;
      }
      std::string name = e.Str(r, rp, "name");
      if (name.empty()) {
        e.Required(rp + ".name");
      } else {
        e.Name(rp + ".name", name, CheckDnsLabel(name));
        if (!names.insert(name).second) {
          e.Duplicate(rp + ".name", name);
        }
        valid_refs.insert(name);
      }
      const json* exactly = e.Get(r, rp, "exactly", JType::kObject);
      const json* first = e.Get(r, rp, "firstAvailable", JType::kArray);
      if (exactly == nullptr && first == nullptr) {
        e.Required(rp, "exactly one of `exactly` or `firstAvailable` is required");
      } else if (exactly != nullptr && first != nullptr) {
        e.Invalid(rp, "{`exactly`, `firstAvailable`}",
                  "exactly one of `exactly` or `firstAvailable` is required, but multiple fields "
                  "are set");
      }
      if (exactly != nullptr) {
        ValidateExactRequest(e, *exactly, rp + ".exactly");
      }
      if (first != nullptr) {
        std::string fp = rp + ".firstAvailable";
        if (first->empty()) {
          e.Required(fp);
        } else if (first->size() > kMaxSubRequests) {
          e.TooMany(fp, first->size(), kMaxSubRequests);
        }
        std::set<std::string> subnames;
        for (size_t j = 0; j < first->size(); ++j) {
          std::string sp = Errors::Index(fp, j);
          const json& sub = (*first)[j];
          if (!sub.is_object()) {
            e.TypeInvalid(sp, sub, "expected object");
            continue;
          }
          std::string sub_name = e.Str(sub, sp, "name");
          if (sub_name.empty()) {
            e.Required(sp + ".name");
          } else {
            e.Name(sp + ".name", sub_name, CheckDnsLabel(sub_name));
            if (!subnames.insert(sub_name).second) {
              e.Duplicate(sp + ".name", sub_name);
            }
            valid_refs.insert(name + "/" + sub_name);
          }
          ValidateExactRequest(e, sub, sp);
        }
      }
    }
  }
  if (const json* cons = e.Get(*devices, f, "constraints", JType::kArray)) {
    const std::string p = f + ".constraints";
    if (cons->size() > kMaxConstraints) {
      e.TooMany(p, cons->size(), kMaxConstraints);
    }
    for (size_t i = 0; i < cons->size(); ++i) {
      std::string cp = Errors::Index(p, i);
      const json& c = (*cons)[i];
      if (!c.is_object()) {
        e.TypeInvalid(cp, c, "expected object");
        continue;
      }
      ValidateRequestRefs(e, c, cp, valid_refs);
      std::string match = e.Str(c, cp, "matchAttribute");
      std::string distinct = e.Str(c, cp, "distinctAttribute");
      if (match.empty() && distinct.empty()) {
        e.Required(cp + ".matchAttribute");
      } else if (!match.empty() && !distinct.empty()) {
        e.Invalid(cp, "{`matchAttribute`, `distinctAttribute`}",
                  "exactly one of `matchAttribute` or `distinctAttribute` is required");
      }
      if (!match.empty()) {
        ValidateFullyQualifiedName(e, cp + ".matchAttribute", match);
      }
      if (!distinct.empty()) {
        ValidateFullyQualifiedName(e, cp + ".distinctAttribute", distinct);
      }
    }
  }
  if (const json* cfgs = e.Get(*devices, f, "config", JType::kArray)) {
    const std::string p = f + ".config";
    if (cfgs->size() > kMaxConfigs) {
      e.TooMany(p, cfgs->size(), kMaxConfigs);
    }
    for (size_t i = 0; i < cfgs->size(); ++i) {
      std::string cp = Errors::Index(p, i);
      const json& c = (*cfgs)[i];
      if (!c.is_object()) {
        e.TypeInvalid(cp, c, "expected object");
        continue;
      }
      ValidateRequestRefs(e, c, cp, valid_refs);
      ValidateOpaque(e, c, cp);
    }
  }
}

void ValidateClaimStatus(Errors& e, const json& obj, const json* old) {
  const json* status = e.Get(obj, "", "status", JType::kObject);
  if (status == nullptr) {
    return;
  }
  const json* alloc = e.Get(*status, "status", "allocation", JType::kObject);
  std::set<std::string> allocated;  // driver/pool/device
  if (alloc != nullptr) {
    const std::string f = "status.allocation";
    if (const json* devs = e.Get(*alloc, f, "devices", JType::kObject)) {
      if (const json* results = e.Get(*devs, f + ".devices", "results", JType::kArray)) {
        std::string p = f + ".devices.results";
        if (results->size() > kMaxAllocationResults) {
          e.TooMany(p, results->size(), kMaxAllocationResults);
        }
        for (size_t i = 0; i < results->size(); ++i) {
          std::string rp = Errors::Index(p, i);
          const json& r = (*results)[i];
          if (!r.is_object()) {
            e.TypeInvalid(rp, r, "expected object");
            continue;
          }
          std::string request = e.Str(r, rp, "request");
          std::string driver = e.Str(r, rp, "driver");
          std::string pool = e.Str(r, rp, "pool");
          std::string device = e.Str(r, rp, "device");
          if (request.empty()) {
            e.Required(rp + ".request");
          }
          if (driver.empty()) {
            e.Required(rp + ".driver");
          } else {
            e.Name(rp + ".driver", driver, CheckDnsSubdomain(driver));
          }
          if (pool.empty()) {
            e.Required(rp + ".pool");
          }
          if (device.empty()) {
            e.Required(rp + ".device");
          } else {
            e.Name(rp + ".device", device, CheckDnsLabel(device));
          }
          allocated.insert(driver + "/" + pool + "/" + device);
        }
      }
      if (const json* cfgs = e.Get(*devs, f + ".devices", "config", JType::kArray)) {
        for (size_t i = 0; i < cfgs->size(); ++i) {
          std::string cp = Errors::Index(f + ".devices.config", i);
          const json& c = (*cfgs)[i];
          if (!c.is_object()) {
            e.TypeInvalid(cp, c, "expected object");
            continue;
          }
          std::string source = e.Str(c, cp, "source");
          if (source != "FromClass" && source != "FromClaim") {
            e.NotSupported(cp + ".source", source, {"FromClaim", "FromClass"});
          }
          ValidateOpaque(e, c, cp);
        }
      }
    }
    if (const json* ns = e.Get(*alloc, f, "nodeSelector", JType::kObject)) {
      e.Get(*ns, f + ".nodeSelector", "nodeSelectorTerms", JType::kArray);
    }
  }
  const json* reserved = e.Get(*status, "status", "reservedFor", JType::kArray);
  if (reserved != nullptr && !reserved->empty()) {
    const std::string p = "status.reservedFor";
    if (reserved->size() > kMaxReservedFor) {
      e.TooMany(p, reserved->size(), kMaxReservedFor);
    }
    if (alloc == nullptr) {
      e.Forbidden(p, "may not be specified when `allocated` is not set");
    }
    std::set<std::string> uids;
    for (size_t i = 0; i < reserved->size(); ++i) {
      std::string rp = Errors::Index(p, i);
      const json& r = (*reserved)[i];
      if (!r.is_object()) {
        e.TypeInvalid(rp, r, "expected object");
        continue;
      }
      if (e.Str(r, rp, "resource").empty()) {
        e.Required(rp + ".resource");
      }
      if (e.Str(r, rp, "name").empty()) {
        e.Required(rp + ".name");
      }
      std::string uid = e.Str(r, rp, "uid");
      if (uid.empty()) {
        e.Required(rp + ".uid");
      } else if (!uids.insert(uid).second) {
        e.Duplicate(rp + ".uid", uid);
      }
    }
  }
  if (const json* devs = e.Get(*status, "status", "devices", JType::kArray)) {
    for (size_t i = 0; i < devs->size(); ++i) {
      std::string dp = Errors::Index("status.devices", i);
      const json& d = (*devs)[i];
      if (!d.is_object()) {
        e.TypeInvalid(dp, d, "expected object");
        continue;
      }
      std::string key =
          e.Str(d, dp, "driver") + "/" + e.Str(d, dp, "pool") + "/" + e.Str(d, dp, "device");
      if (allocated.count(key) == 0) {
        e.Invalid(dp, key, "must be an allocated device in the claim");
      }
      if (const json* conds = e.Get(d, dp, "conditions", JType::kArray)) {
        if (conds->size() > kMaxDeviceConditions) {
          e.TooMany(dp + ".conditions", conds->size(), kMaxDeviceConditions);
        }
      }
      auto data = d.find("data");
      if (data != d.end() && !data->is_null() && data->dump().size() > kMaxDeviceStatusData) {
        e.TooLong(dp + ".data", kMaxDeviceStatusData);
      }
    }
  }
  if (old != nullptr) {
    const json& old_status = old->contains("status") ? (*old)["status"] : json::object();
    auto old_alloc = old_status.find("allocation");
    bool had_alloc = old_alloc != old_status.end() && !old_alloc->is_null();
    if (had_alloc && alloc != nullptr && *alloc != *old_alloc) {
      e.Invalid("status.allocation", "<value omitted>", "field is immutable");
    }
    if (had_alloc && alloc == nullptr && reserved != nullptr && !reserved->empty()) {
      e.Forbidden("status.allocation", "deallocation of a reserved resource is not allowed");
    }
  }
}

// ---------- DeviceClass / Lease ----------

void ValidateDeviceClassSpec(Errors& e, const json& obj) {
  const json* spec = e.Get(obj, "", "spec", JType::kObject);
  if (spec == nullptr) {
    return;
  }
  ValidateCelSelectors(e, *spec, "spec");
  if (const json* cfgs = e.Get(*spec, "spec", "config", JType::kArray)) {
    if (cfgs->size() > kMaxConfigs) {
      e.TooMany("spec.config", cfgs->size(), kMaxConfigs);
    }
    for (size_t i = 0; i < cfgs->size(); ++i) {
      std::string cp = Errors::Index("spec.config", i);
      const json& c = (*cfgs)[i];
      if (!c.is_object()) {
        e.TypeInvalid(cp, c, "expected object");
        continue;
      }
      ValidateOpaque(e, c, cp);
    }
  }
  std::string ext = e.Str(*spec, "spec", "extendedResourceName");
  if (!ext.empty()) {
    e.Name("spec.extendedResourceName", ext, CheckQualifiedName(ext));
  }
}

void ValidateLeaseSpec(Errors& e, const json& obj) {
  const json* spec = e.Get(obj, "", "spec", JType::kObject);
  if (spec == nullptr) {
    return;
  }
  e.Str(*spec, "spec", "holderIdentity");
  if (const json* d = e.Get(*spec, "spec", "leaseDurationSeconds", JType::kInt)) {
    if (d->get<int64_t>() <= 0) {
      e.Invalid("spec.leaseDurationSeconds", *d, "must be greater than 0");
    }
  }
  if (const json* t = e.Get(*spec, "spec", "leaseTransitions", JType::kInt)) {
    if (t->get<int64_t>() < 0) {
      e.Invalid("spec.leaseTransitions", *t, "must be greater than or equal to 0");
    }
  }
  e.Get(*spec, "spec", "acquireTime", JType::kString);
  e.Get(*spec, "spec", "renewTime", JType::kString);
}

void ValidateKind(Errors& e, ObjectKind kind, const json& obj, const ValidationOptions& opts) {
  switch (kind) {
    case ObjectKind::kResourceSlice:
      ValidateResourceSliceSpec(e, obj, opts.minor);
      break;
    case ObjectKind::kDeviceClass:
      ValidateDeviceClassSpec(e, obj);
      break;
    case ObjectKind::kResourceClaim:
      ValidateClaimSpec(e, obj);
      ValidateClaimStatus(e, obj, nullptr);
      break;
    case ObjectKind::kLease:
      ValidateLeaseSpec(e, obj);
      break;
    case ObjectKind::kPod:
    case ObjectKind::kNode:
    case ObjectKind::kEventV1:  // EventV1Problems, below: it also needs the old object
    case ObjectKind::kOther:
      break;
  }
}

void DefaultExactRequest(json& req) {
  if (!req.is_object()) {
    return;
  }
  if (!req.contains("allocationMode") || req["allocationMode"].is_null() ||
      req["allocationMode"] == "") {
    req["allocationMode"] = "ExactCount";
  }
  if (req["allocationMode"] == "ExactCount" && (!req.contains("count") || req["count"].is_null())) {
    req["count"] = 1;
  }
  if (req.contains("tolerations") && req["tolerations"].is_array()) {
    for (json& t : req["tolerations"]) {
      if (t.is_object() && (!t.contains("operator") || t["operator"] == "")) {
        t["operator"] = "Equal";
      }
    }
  }
}

}  // namespace

std::string FieldError::Reason() const {
  switch (type) {
    case Type::kRequired:
      return "FieldValueRequired";
    case Type::kInvalid:
      return "FieldValueInvalid";
    case Type::kTooLong:
      return "FieldValueTooLong";
    case Type::kTooMany:
      return "FieldValueTooMany";
    case Type::kDuplicate:
      return "FieldValueDuplicate";
    case Type::kNotSupported:
      return "FieldValueNotSupported";
    case Type::kForbidden:
      return "FieldValueForbidden";
    case Type::kTypeInvalid:
      return "FieldValueTypeInvalid";
  }
  return "FieldValueInvalid";
}

std::string FieldError::ToString() const { return field + ": " + message; }

FieldErrors ValidateCreate(ObjectKind kind, const json& obj, const ValidationOptions& options) {
  Errors e;
  ValidateMetadata(e, obj, options);
  ValidateKind(e, kind, obj, options);
  FieldErrors out = e.Take();
  if (kind == ObjectKind::kEventV1) {
    for (FieldError& f : EventV1Problems(obj, nullptr)) {
      out.push_back(std::move(f));
    }
  }
  return out;
}

FieldErrors ValidateUpdate(ObjectKind kind, const json& obj, const json& old,
                           const ValidationOptions& options) {
  Errors e;
  ValidateMetadata(e, obj, options);
  ValidateMetadataUpdate(e, obj, old);
  ValidateKind(e, kind, obj, options);
  if (kind == ObjectKind::kResourceSlice) {
    json driver = obj.contains("spec") && obj["spec"].is_object()
                      ? obj["spec"].value("driver", json(""))
                      : json("");
    json old_driver = old.contains("spec") && old["spec"].is_object()
                          ? old["spec"].value("driver", json(""))
                          : json("");
    if (driver != old_driver) {
      e.Invalid("spec.driver", driver, "field is immutable");
    }
  }
  if (kind == ObjectKind::kResourceClaim) {
    json spec = obj.contains("spec") ? obj["spec"] : json();
    json old_spec = old.contains("spec") ? old["spec"] : json();
    if (spec != old_spec) {
      e.Invalid("spec", "<value omitted>", "field is immutable");
    }
  }
  FieldErrors out = e.Take();
  if (kind == ObjectKind::kEventV1) {
    for (FieldError& f : EventV1Problems(obj, &old)) {
      out.push_back(std::move(f));
    }
  }
  return out;
}

FieldErrors ValidateStatusUpdate(ObjectKind kind, const json& obj, const json& old,
                                 const ValidationOptions& options) {
  Errors e;
  ValidateMetadata(e, obj, options);
  if (kind == ObjectKind::kResourceClaim) {
    ValidateClaimStatus(e, obj, &old);
  }
  return e.Take();
}

void ApplyDefaults(ObjectKind kind, json& obj, absl::Time now) {
  if (!obj.contains("spec") || !obj["spec"].is_object()) {
    return;
  }
  json& spec = obj["spec"];
  if (kind == ObjectKind::kResourceClaim) {
    if (!spec.contains("devices") || !spec["devices"].is_object() ||
        !spec["devices"].contains("requests") || !spec["devices"]["requests"].is_array()) {
      return;
    }
    for (json& req : spec["devices"]["requests"]) {
      if (!req.is_object()) {
        continue;
      }
      if (req.contains("exactly")) {
        DefaultExactRequest(req["exactly"]);
      }
      if (req.contains("firstAvailable") && req["firstAvailable"].is_array()) {
        for (json& sub : req["firstAvailable"]) {
          DefaultExactRequest(sub);
        }
      }
    }
  } else if (kind == ObjectKind::kResourceSlice) {
    if (!spec.contains("devices") || !spec["devices"].is_array()) {
      return;
    }
    for (json& dev : spec["devices"]) {
      if (!dev.is_object() || !dev.contains("taints") || !dev["taints"].is_array()) {
        continue;
      }
      for (json& taint : dev["taints"]) {
        if (taint.is_object() && (!taint.contains("timeAdded") || taint["timeAdded"].is_null())) {
          taint["timeAdded"] = FormatK8sTime(now);
        }
      }
    }
  }
}

std::string FormatK8sTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

}  // namespace dralens::sim
