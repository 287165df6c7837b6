// The resource types the embedded API server serves, with their discovery facts.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
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
