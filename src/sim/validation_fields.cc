#include <set>

#include "absl/strings/str_split.h"
#include "src/sim/names.h"
#include "src/sim/validation_internal.h"

namespace dralens::sim::validation {

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

// Validates the `{"value": <quantity>}` entries of a map, and its keys as DNS labels when
// `dns_label_keys`.
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

}  // namespace dralens::sim::validation
