#include <map>
#include <set>

#include "absl/strings/str_split.h"
#include "src/sim/names.h"
#include "src/sim/validation_internal.h"

namespace dralens::sim::validation {

namespace {

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

}  // namespace

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

}  // namespace dralens::sim::validation
