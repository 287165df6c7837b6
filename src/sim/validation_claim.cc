#include <set>

#include "src/sim/names.h"
#include "src/sim/validation_internal.h"

namespace dralens::sim::validation {

namespace {

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

}  // namespace

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

}  // namespace dralens::sim::validation
