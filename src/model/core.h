// core/v1 value types: the NodeSelector used by ResourceSlices and allocations, and the parts of
// Pod and Node that dralens reads or writes. See meta.h for the conventions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "src/model/meta.h"

namespace dralens::model {

struct NodeSelectorRequirement {
  std::string key;
  std::string op;  // JSON "operator": In, NotIn, Exists, DoesNotExist, Gt, Lt
  std::vector<std::string> values;

  bool operator==(const NodeSelectorRequirement&) const = default;
};

struct NodeSelectorTerm {
  std::vector<NodeSelectorRequirement> match_expressions;
  std::vector<NodeSelectorRequirement> match_fields;

  bool operator==(const NodeSelectorTerm&) const = default;
};

struct NodeSelector {
  std::vector<NodeSelectorTerm> node_selector_terms;  // required

  bool operator==(const NodeSelector&) const = default;
};

// pod.spec.resourceClaims[]: exactly one of the two sources is set.
struct PodResourceClaim {
  std::string name;
  std::optional<std::string> resource_claim_name;
  std::optional<std::string> resource_claim_template_name;

  bool operator==(const PodResourceClaim&) const = default;
};

// container.resources.claims[].
struct ContainerResourceClaim {
  std::string name;
  std::string request;

  bool operator==(const ContainerResourceClaim&) const = default;
};

struct ContainerResources {
  std::vector<ContainerResourceClaim> claims;

  bool operator==(const ContainerResources&) const = default;
};

struct Container {
  std::string name;
  std::string image;
  ContainerResources resources;

  bool operator==(const Container&) const = default;
};

struct PodSpec {
  std::string node_name;
  std::vector<Container> containers;
  std::vector<PodResourceClaim> resource_claims;

  bool operator==(const PodSpec&) const = default;
};

struct PodResourceClaimStatus {
  std::string name;
  std::optional<std::string> resource_claim_name;

  bool operator==(const PodResourceClaimStatus&) const = default;
};

struct PodCondition {
  std::string type;
  std::string status;
  std::string reason;
  std::string message;
  std::optional<absl::Time> last_transition_time;

  bool operator==(const PodCondition&) const = default;
};

struct PodStatus {
  std::string phase;  // Pending, Running, Succeeded, Failed, Unknown
  std::vector<PodCondition> conditions;
  std::vector<PodResourceClaimStatus> resource_claim_statuses;

  bool operator==(const PodStatus&) const = default;
};

// core/v1 Pod ("v1", "Pod").
struct Pod {
  ObjectMeta metadata;
  PodSpec spec;
  PodStatus status;

  bool operator==(const Pod&) const = default;
};

struct NodeSystemInfo {
  std::string machine_id;
  std::string boot_id;

  bool operator==(const NodeSystemInfo&) const = default;
};

struct NodeStatus {
  NodeSystemInfo node_info;

  bool operator==(const NodeStatus&) const = default;
};

// core/v1 Node ("v1", "Node").
struct Node {
  ObjectMeta metadata;
  NodeStatus status;

  bool operator==(const Node&) const = default;
};

}  // namespace dralens::model
