// metav1 value types shared by every Kubernetes object we read or write.
//
// Plain structs with value semantics. Field names follow the JSON names in snake_case. Go
// pointer fields (presence matters) are std::optional; Go "omitempty" value fields are plain
// members whose zero value is omitted on encode. Maps are std::map so output is deterministic.
// Timestamps are absl::Time and travel as RFC 3339 at second precision, as metav1.Time does.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dralens::model {

struct OwnerReference {
  std::string api_version;  // required
  std::string kind;         // required
  std::string name;         // required
  std::string uid;          // required
  std::optional<bool> controller;
  std::optional<bool> block_owner_deletion;

  bool operator==(const OwnerReference&) const = default;
};

struct ObjectMeta {
  std::string name;
  std::string generate_name;
  std::string namespace_name;  // JSON "namespace"
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  std::optional<absl::Time> creation_timestamp;
  std::optional<absl::Time> deletion_timestamp;
  std::optional<int64_t> deletion_grace_period_seconds;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::vector<OwnerReference> owner_references;
  std::vector<std::string> finalizers;

  bool operator==(const ObjectMeta&) const = default;
};

// The metadata of a list response.
struct ListMeta {
  std::string resource_version;
  std::string continue_token;  // JSON "continue"
  std::optional<int64_t> remaining_item_count;

  bool operator==(const ListMeta&) const = default;
};

// metav1.Condition.
struct Condition {
  std::string type;    // required
  std::string status;  // required: "True", "False" or "Unknown"
  int64_t observed_generation = 0;
  absl::Time last_transition_time = absl::UnixEpoch();  // required
  std::string reason;                                   // required
  std::string message;                                  // required (may be empty)

  bool operator==(const Condition&) const = default;
};

}  // namespace dralens::model
