// Write-time validation and defaulting of the objects the embedded API server stores, following
// the kube-apiserver rules for resource.k8s.io/v1 (see shared/reference/dra-protocol.md §4) and
// the metadata rules every object shares.
//
// Pure functions over raw JSON; thread-compatible. The API server maps errors of type
// kTypeInvalid to 400 BadRequest (the real server fails to decode such bodies) and all other
// errors to 422 Invalid with one cause per error.
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace dralens::sim {

struct FieldError {
  enum class Type {
    kRequired,
    kInvalid,
    kTooLong,
    kTooMany,
    kDuplicate,
    kNotSupported,
    kForbidden,
    kTypeInvalid,
  };
  Type type = Type::kInvalid;
  std::string field;    // e.g. "spec.devices[0].attributes[uuid].string"
  std::string message;  // e.g. "Too long: may not be more than 64 bytes"

  // The metav1.StatusCause reason, e.g. "FieldValueTooLong".
  std::string Reason() const;
  // "<field>: <message>", as in the Status message of a 422.
  std::string ToString() const;
};
using FieldErrors = std::vector<FieldError>;

// The object kinds with dedicated rules.
enum class ObjectKind {
  kResourceSlice,
  kDeviceClass,
  kResourceClaim,
  kPod,
  kNode,
  kLease,
  kEventV1,  // events.k8s.io/v1 Event (src/sim/event_conversion.h)
  kOther
};

struct ValidationOptions {
  // The Kubernetes minor version being emulated: 35 and later apply the 1.35 ResourceSlice rules.
  int minor = 34;
  bool namespaced = true;
  // Namespaces use DNS labels for names; everything else here uses DNS subdomains.
  bool name_is_dns_label = false;
};

// Validates metadata plus the kind's spec on create. `obj` is the object after defaulting.
FieldErrors ValidateCreate(ObjectKind kind, const nlohmann::json& obj,
                           const ValidationOptions& options);
// Validates a write of the main resource: everything ValidateCreate checks plus immutability
// against `old` (the stored object).
FieldErrors ValidateUpdate(ObjectKind kind, const nlohmann::json& obj, const nlohmann::json& old,
                           const ValidationOptions& options);
// Validates a write of the status subresource (`obj` already carries the old spec/metadata).
FieldErrors ValidateStatusUpdate(ObjectKind kind, const nlohmann::json& obj,
                                 const nlohmann::json& old, const ValidationOptions& options);

// Applies the server-side defaults of the real API server that clients observe: claim request
// allocationMode/count, toleration operators, and device taint timeAdded. Never fails; wrongly
// typed fields are left for validation to report.
void ApplyDefaults(ObjectKind kind, nlohmann::json& obj, absl::Time now);

// RFC 3339 with second precision in UTC, as Kubernetes writes metav1.Time.
std::string FormatK8sTime(absl::Time t);

}  // namespace dralens::sim
