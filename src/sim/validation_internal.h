// The resource.k8s.io field rules, shared by the files that implement validation.h (private to
// src/sim/validation*.cc):
//   validation.cc         the public entry points, defaults, DeviceClass and Lease
//   validation_fields.cc  metadata, and the pieces several kinds share (quantities, names, CEL,
//                         opaque configuration, node selectors)
//   validation_slice.cc   ResourceSlice
//   validation_claim.cc   ResourceClaim spec and status
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "src/sim/validation.h"

namespace dralens::sim::validation {

using nlohmann::json;

// Limits from resource.k8s.io/v1 (dra-protocol.md §4).
inline constexpr size_t kMaxDevices = 128;
inline constexpr size_t kMaxDevicesWithTaintsOrCounters = 64;  // 1.35+
inline constexpr size_t kMaxAttributesAndCapacities = 32;
inline constexpr size_t kMaxAttributeValueLength = 64;
inline constexpr size_t kMaxDriverNameLength = 63;
inline constexpr size_t kMaxPoolNameLength = 253;
inline constexpr size_t kMaxTaints134 = 4;
inline constexpr size_t kMaxTaints135 = 16;
inline constexpr size_t kMaxCounterSets135 = 8;
inline constexpr size_t kMaxCountersPerSet = 32;
inline constexpr size_t kMaxSharedCountersTotal134 = 32;
inline constexpr size_t kMaxDeviceCounters134 = 32;
inline constexpr size_t kMaxSliceDeviceCounters134 = 1024;
inline constexpr size_t kMaxConsumesCounters135 = 2;
inline constexpr size_t kMaxRequests = 32;
inline constexpr size_t kMaxSubRequests = 8;
inline constexpr size_t kMaxSelectors = 32;
inline constexpr size_t kMaxConstraints = 32;
inline constexpr size_t kMaxConfigs = 32;
inline constexpr size_t kMaxCelLength = 10 * 1024;
inline constexpr size_t kMaxOpaqueParameters = 10 * 1024;
inline constexpr size_t kMaxTolerations = 16;
inline constexpr size_t kMaxReservedFor = 256;
inline constexpr size_t kMaxAllocationResults = 32;
inline constexpr size_t kMaxDeviceConditions = 8;
inline constexpr size_t kMaxDeviceStatusData = 10 * 1024;
inline constexpr size_t kMaxAnnotationsBytes = 256 * 1024;

std::string Quote(const std::string& s);
// A value as the real server quotes it in an error.
std::string ValueText(const json& v);
const char* TypeName(json::value_t t);

enum class JType { kObject, kArray, kString, kInt, kBool };
bool HasType(const json& v, JType t);
const char* JTypeName(JType t);

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

// ---------- validation_fields.cc ----------

void ValidateMetadata(Errors& e, const json& obj, const ValidationOptions& opts);
void ValidateMetadataUpdate(Errors& e, const json& obj, const json& old);
void ValidateQuantity(Errors& e, const json& v, const std::string& f);
// Validates the `{"value": <quantity>}` entries of a map, and its keys as DNS labels when
// `dns_label_keys`.
void ValidateQuantityMap(Errors& e, const json& map, const std::string& f, bool dns_label_keys);
// QualifiedName of a device attribute/capacity: C identifier ≤ 32 or
// <DNS subdomain ≤ 63>/<C identifier ≤ 32>. Returns the fully qualified form.
std::string ValidateAttributeName(Errors& e, const std::string& f, const std::string& name,
                                  const std::string& driver);
void ValidateFullyQualifiedName(Errors& e, const std::string& f, const std::string& name);
void ValidateCelSelectors(Errors& e, const json& parent, const std::string& f);
void ValidateOpaque(Errors& e, const json& cfg, const std::string& f);
void ValidateNodeSelector(Errors& e, const json& ns, const std::string& f);

// ---------- validation_slice.cc ----------

void ValidateResourceSliceSpec(Errors& e, const json& obj, int minor);

// ---------- validation_claim.cc ----------

void ValidateClaimSpec(Errors& e, const json& obj);
// `old`: the claim before the update, or null on create.
void ValidateClaimStatus(Errors& e, const json& obj, const json* old);

}  // namespace dralens::sim::validation
