#include "src/sim/validation.h"

#include "src/sim/event_conversion.h"
#include "src/sim/names.h"
#include "src/sim/validation_internal.h"

namespace dralens::sim {
namespace {

using nlohmann::json;
using validation::Errors;
using validation::JType;
using validation::kMaxConfigs;
using validation::ValidateCelSelectors;
using validation::ValidateClaimSpec;
using validation::ValidateClaimStatus;
using validation::ValidateMetadata;
using validation::ValidateMetadataUpdate;
using validation::ValidateOpaque;
using validation::ValidateResourceSliceSpec;

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
