// The resource types the embedded API server serves, with their discovery facts.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "src/sim/validation.h"

namespace dralens::sim {

struct ResourceInfo {
  std::string group;  // "" for the core group
  std::string version;
  std::string plural;
  std::string singular;
  std::string kind;
  bool namespaced = false;
  bool has_status = false;              // serves <plural>/status
  bool tracks_generation = false;       // metadata.generation bumps on spec changes
  bool return_deleted_object = false;   // DELETE answers with the object, not a Status
  bool allow_create_on_update = false;  // PUT on a missing object creates it
  bool name_is_dns_label = false;
  std::vector<std::string> short_names;
  std::vector<std::string> categories;
  // Field selector labels beyond metadata.name and metadata.namespace.
  std::vector<std::string> field_labels;
  ObjectKind object_kind = ObjectKind::kOther;
  // A second face of another resource's store (core/v1 Events over events.k8s.io/v1): objects
  // are kept in the other form and converted on the way in and out. Null for most resources.
  nlohmann::json (*from_storage)(const nlohmann::json&) = nullptr;
  nlohmann::json (*to_storage)(const nlohmann::json&) = nullptr;
  // `kubectl get` gets a Table with the Event columns (src/sim/tables.h).
  bool event_table = false;
  // Served only with this feature gate on (ApiServerOptions::feature_gates); "" always.
  std::string feature_gate = {};

  std::string ApiVersion() const { return group.empty() ? version : group + "/" + version; }
  std::string ListKind() const { return kind + "List"; }
  // "resourceclaims.resource.k8s.io" or "pods", as error messages name resources.
  std::string QualifiedResource() const { return group.empty() ? plural : plural + "." + group; }
  // "ResourceClaim.resource.k8s.io" or "Pod", as 422 messages name kinds.
  std::string QualifiedKind() const { return group.empty() ? kind : kind + "." + group; }
};

// Every served resource, in discovery order.
const std::vector<ResourceInfo>& AllResources();
// The resource served at `group`/`version` with `plural`, or nullptr.
const ResourceInfo* FindResource(absl::string_view group, absl::string_view version,
                                 absl::string_view plural);

}  // namespace dralens::sim
