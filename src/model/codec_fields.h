// The fields of each Kubernetes type the codec reads and writes, in wire order: one list per
// struct, shared by the decoder and the encoder (private to src/model/codec.cc).
//
// Fields(object, visit) calls visit(json_key, member[, Emit]) for each field of `object`.
#pragma once

#include <type_traits>

#include "src/model/codec.h"

namespace dralens::model::fields {

// Whether an encoder writes a field whose value is empty (Go's omitempty, extended to structs
// that equal their default). Required fields use kAlways.
enum class Emit { kOmitEmpty, kAlways };

template <typename T>
struct HasFields : std::false_type {};

#define DRALENS_FIELDS(Type)                            \
  template <>                                           \
  struct HasFields<Type> : std::true_type {};           \
  template <typename T, typename V>                     \
  requires std::is_same_v<std::remove_const_t<T>, Type> \
  void Fields(T& o, V&& v)

constexpr Emit kAlways = Emit::kAlways;

DRALENS_FIELDS(OwnerReference) {
  v("apiVersion", o.api_version, kAlways);
  v("kind", o.kind, kAlways);
  v("name", o.name, kAlways);
  v("uid", o.uid, kAlways);
  v("controller", o.controller);
  v("blockOwnerDeletion", o.block_owner_deletion);
}

DRALENS_FIELDS(ObjectMeta) {
  v("name", o.name);
  v("generateName", o.generate_name);
  v("namespace", o.namespace_name);
  v("uid", o.uid);
  v("resourceVersion", o.resource_version);
  v("generation", o.generation);
  v("creationTimestamp", o.creation_timestamp);
  v("deletionTimestamp", o.deletion_timestamp);
  v("deletionGracePeriodSeconds", o.deletion_grace_period_seconds);
  v("labels", o.labels);
  v("annotations", o.annotations);
  v("ownerReferences", o.owner_references);
  v("finalizers", o.finalizers);
}

DRALENS_FIELDS(ListMeta) {
  v("resourceVersion", o.resource_version);
  v("continue", o.continue_token);
  v("remainingItemCount", o.remaining_item_count);
}

DRALENS_FIELDS(Condition) {
  v("type", o.type, kAlways);
  v("status", o.status, kAlways);
  v("observedGeneration", o.observed_generation);
  v("lastTransitionTime", o.last_transition_time, kAlways);
  v("reason", o.reason, kAlways);
  v("message", o.message, kAlways);
}

// core/v1

DRALENS_FIELDS(NodeSelectorRequirement) {
  v("key", o.key, kAlways);
  v("operator", o.op, kAlways);
  v("values", o.values);
}

DRALENS_FIELDS(NodeSelectorTerm) {
  v("matchExpressions", o.match_expressions);
  v("matchFields", o.match_fields);
}

DRALENS_FIELDS(NodeSelector) { v("nodeSelectorTerms", o.node_selector_terms, kAlways); }

DRALENS_FIELDS(PodResourceClaim) {
  v("name", o.name, kAlways);
  v("resourceClaimName", o.resource_claim_name);
  v("resourceClaimTemplateName", o.resource_claim_template_name);
}

DRALENS_FIELDS(ContainerResourceClaim) {
  v("name", o.name, kAlways);
  v("request", o.request);
}

DRALENS_FIELDS(ContainerResources) { v("claims", o.claims); }

DRALENS_FIELDS(Container) {
  v("name", o.name, kAlways);
  v("image", o.image);
  v("resources", o.resources);
}

DRALENS_FIELDS(PodSpec) {
  v("nodeName", o.node_name);
  v("containers", o.containers, kAlways);
  v("resourceClaims", o.resource_claims);
}

DRALENS_FIELDS(PodResourceClaimStatus) {
  v("name", o.name, kAlways);
  v("resourceClaimName", o.resource_claim_name);
}

DRALENS_FIELDS(PodCondition) {
  v("type", o.type, kAlways);
  v("status", o.status, kAlways);
  v("reason", o.reason);
  v("message", o.message);
  v("lastTransitionTime", o.last_transition_time);
}

DRALENS_FIELDS(PodStatus) {
  v("phase", o.phase);
  v("conditions", o.conditions);
  v("resourceClaimStatuses", o.resource_claim_statuses);
}

DRALENS_FIELDS(Pod) {
  v("metadata", o.metadata, kAlways);
  v("spec", o.spec, kAlways);
  v("status", o.status);
}

DRALENS_FIELDS(NodeSystemInfo) {
  v("machineID", o.machine_id);
  v("bootID", o.boot_id);
}

DRALENS_FIELDS(NodeStatus) { v("nodeInfo", o.node_info); }

DRALENS_FIELDS(Node) {
  v("metadata", o.metadata, kAlways);
  v("status", o.status);
}

// resource.k8s.io/v1: ResourceSlice

DRALENS_FIELDS(ResourcePool) {
  v("name", o.name, kAlways);
  v("generation", o.generation, kAlways);
  v("resourceSliceCount", o.resource_slice_count, kAlways);
}

DRALENS_FIELDS(Counter) { v("value", o.value, kAlways); }

DRALENS_FIELDS(CounterSet) {
  v("name", o.name, kAlways);
  v("counters", o.counters, kAlways);
}

DRALENS_FIELDS(CapacityRequestPolicyRange) {
  v("min", o.min, kAlways);
  v("max", o.max);
  v("step", o.step);
}

DRALENS_FIELDS(CapacityRequestPolicy) {
  v("default", o.default_value);
  v("validValues", o.valid_values);
  v("validRange", o.valid_range);
}

DRALENS_FIELDS(DeviceCapacity) {
  v("value", o.value, kAlways);
  v("requestPolicy", o.request_policy);
}

DRALENS_FIELDS(DeviceCounterConsumption) {
  v("counterSet", o.counter_set, kAlways);
  v("counters", o.counters, kAlways);
}

DRALENS_FIELDS(DeviceTaint) {
  v("key", o.key, kAlways);
  v("value", o.value);
  v("effect", o.effect, kAlways);
  v("timeAdded", o.time_added);
}

DRALENS_FIELDS(SliceDevice) {
  v("name", o.name, kAlways);
  v("attributes", o.attributes);
  v("capacity", o.capacity);
  v("consumesCounters", o.consumes_counters);
  v("nodeName", o.node_name);
  v("nodeSelector", o.node_selector);
  v("allNodes", o.all_nodes);
  v("taints", o.taints);
  v("bindsToNode", o.binds_to_node);
  v("bindingConditions", o.binding_conditions);
  v("bindingFailureConditions", o.binding_failure_conditions);
  v("allowMultipleAllocations", o.allow_multiple_allocations);
}

DRALENS_FIELDS(ResourceSliceSpec) {
  v("driver", o.driver, kAlways);
  v("pool", o.pool, kAlways);
  v("nodeName", o.node_name);
  v("nodeSelector", o.node_selector);
  v("allNodes", o.all_nodes);
  v("perDeviceNodeSelection", o.per_device_node_selection);
  v("devices", o.devices);
  v("sharedCounters", o.shared_counters);
}

DRALENS_FIELDS(ResourceSlice) {
  v("metadata", o.metadata, kAlways);
  v("spec", o.spec, kAlways);
}

// Shared by claims and classes

DRALENS_FIELDS(CelDeviceSelector) { v("expression", o.expression, kAlways); }

DRALENS_FIELDS(DeviceSelector) { v("cel", o.cel); }

DRALENS_FIELDS(OpaqueDeviceConfiguration) {
  v("driver", o.driver, kAlways);
  v("parameters", o.parameters, kAlways);
}

DRALENS_FIELDS(DeviceToleration) {
  v("key", o.key);
  v("operator", o.op);
  v("value", o.value);
  v("effect", o.effect);
  v("tolerationSeconds", o.toleration_seconds);
}

DRALENS_FIELDS(CapacityRequirements) { v("requests", o.requests); }

// ResourceClaim spec

DRALENS_FIELDS(ExactDeviceRequest) {
  v("deviceClassName", o.device_class_name, kAlways);
  v("selectors", o.selectors);
  v("allocationMode", o.allocation_mode);
  v("count", o.count);
  v("adminAccess", o.admin_access);
  v("tolerations", o.tolerations);
  v("capacity", o.capacity);
}

DRALENS_FIELDS(DeviceSubRequest) {
  v("name", o.name, kAlways);
  v("deviceClassName", o.device_class_name, kAlways);
  v("selectors", o.selectors);
  v("allocationMode", o.allocation_mode);
  v("count", o.count);
  v("tolerations", o.tolerations);
  v("capacity", o.capacity);
}

DRALENS_FIELDS(DeviceRequest) {
  v("name", o.name, kAlways);
  v("exactly", o.exactly);
  v("firstAvailable", o.first_available);
}

DRALENS_FIELDS(DeviceConstraint) {
  v("requests", o.requests);
  v("matchAttribute", o.match_attribute);
  v("distinctAttribute", o.distinct_attribute);
}

DRALENS_FIELDS(DeviceClaimConfiguration) {
  v("requests", o.requests);
  v("opaque", o.opaque);
}

DRALENS_FIELDS(DeviceClaim) {
  v("requests", o.requests);
  v("constraints", o.constraints);
  v("config", o.config);
}

DRALENS_FIELDS(ResourceClaimSpec) { v("devices", o.devices, kAlways); }

// ResourceClaim status

DRALENS_FIELDS(DeviceRequestAllocationResult) {
  v("request", o.request, kAlways);
  v("driver", o.driver, kAlways);
  v("pool", o.pool, kAlways);
  v("device", o.device, kAlways);
  v("adminAccess", o.admin_access);
  v("tolerations", o.tolerations);
  v("bindingConditions", o.binding_conditions);
  v("bindingFailureConditions", o.binding_failure_conditions);
  v("shareID", o.share_id);
  v("consumedCapacity", o.consumed_capacity);
}

DRALENS_FIELDS(DeviceAllocationConfiguration) {
  v("source", o.source, kAlways);
  v("requests", o.requests);
  v("opaque", o.opaque);
}

DRALENS_FIELDS(DeviceAllocationResult) {
  v("results", o.results);
  v("config", o.config);
}

DRALENS_FIELDS(AllocationResult) {
  v("devices", o.devices, kAlways);
  v("nodeSelector", o.node_selector);
  v("allocationTimestamp", o.allocation_timestamp);
}

DRALENS_FIELDS(ResourceClaimConsumerReference) {
  v("apiGroup", o.api_group);
  v("resource", o.resource, kAlways);
  v("name", o.name, kAlways);
  v("uid", o.uid, kAlways);
}

DRALENS_FIELDS(NetworkDeviceData) {
  v("interfaceName", o.interface_name);
  v("ips", o.ips);
  v("hardwareAddress", o.hardware_address);
}

DRALENS_FIELDS(AllocatedDeviceStatus) {
  v("driver", o.driver, kAlways);
  v("pool", o.pool, kAlways);
  v("device", o.device, kAlways);
  v("shareID", o.share_id);
  v("conditions", o.conditions);
  v("data", o.data);
  v("networkData", o.network_data);
}

DRALENS_FIELDS(ResourceClaimStatus) {
  v("allocation", o.allocation);
  v("reservedFor", o.reserved_for);
  v("devices", o.devices);
}

DRALENS_FIELDS(ResourceClaim) {
  v("metadata", o.metadata, kAlways);
  v("spec", o.spec, kAlways);
  v("status", o.status);
}

// DeviceClass and ResourceClaimTemplate

DRALENS_FIELDS(DeviceClassConfiguration) { v("opaque", o.opaque); }

DRALENS_FIELDS(DeviceClassSpec) {
  v("selectors", o.selectors);
  v("config", o.config);
  v("extendedResourceName", o.extended_resource_name);
}

DRALENS_FIELDS(DeviceClass) {
  v("metadata", o.metadata, kAlways);
  v("spec", o.spec, kAlways);
}

DRALENS_FIELDS(ResourceClaimTemplateSpec) {
  v("metadata", o.metadata);
  v("spec", o.spec, kAlways);
}

DRALENS_FIELDS(ResourceClaimTemplate) {
  v("metadata", o.metadata, kAlways);
  v("spec", o.spec, kAlways);
}

#undef DRALENS_FIELDS

template <typename T>
struct HasFields<ObjectList<T>> : std::true_type {};

template <typename L, typename V>
requires HasFields<std::remove_const_t<L>>::value && requires(L& l) { l.items; }
void Fields(L& o, V&& v) {
  v("metadata", o.metadata, kAlways);
  v("items", o.items, kAlways);
}

}  // namespace dralens::model::fields
