// resource.k8s.io/v1 value types: ResourceSlice, ResourceClaim, DeviceClass (Kubernetes 1.34+).
//
// Field names are the JSON names in snake_case; see meta.h for the conventions (std::optional
// for Go pointers, plain members for omitempty values, std::map for maps). Quantities are
// common::Quantity and travel as canonical strings. Raw JSON (opaque parameters, device data)
// is kept as nlohmann::json. Codecs are in codec.h.
//
// The slice's device type is SliceDevice (Go: resource/v1.Device) so that it never clashes with
// the GPU inventory's types.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "src/common/quantity.h"
#include "src/model/core.h"
#include "src/model/meta.h"

namespace dralens::model {

inline constexpr char kResourceApiVersion[] = "resource.k8s.io/v1";

// ---------------------------------------------------------------------------------------------
// ResourceSlice

struct ResourcePool {
  std::string name;                  // required
  int64_t generation = 0;            // required
  int64_t resource_slice_count = 0;  // required, > 0

  bool operator==(const ResourcePool&) const = default;
};

struct Counter {
  common::Quantity value;  // required

  bool operator==(const Counter&) const = default;
};

struct CounterSet {
  std::string name;                         // required
  std::map<std::string, Counter> counters;  // required

  bool operator==(const CounterSet&) const = default;
};

// A device attribute: exactly one of int, bool, string or version (semver).
struct DeviceAttribute {
  struct Version {
    std::string value;
    bool operator==(const Version&) const = default;
  };
  std::variant<int64_t, bool, std::string, Version> value;

  static DeviceAttribute Int(int64_t v) {
    return DeviceAttribute{decltype(value)(std::in_place_type<int64_t>, v)};
  }
  static DeviceAttribute Bool(bool v) {
    return DeviceAttribute{decltype(value)(std::in_place_type<bool>, v)};
  }
  static DeviceAttribute String(std::string v) {
    return DeviceAttribute{decltype(value)(std::in_place_type<std::string>, std::move(v))};
  }
  static DeviceAttribute SemVer(std::string v) {
    return DeviceAttribute{decltype(value)(std::in_place_type<Version>, Version{std::move(v)})};
  }

  const int64_t* AsInt() const { return std::get_if<int64_t>(&value); }
  const bool* AsBool() const { return std::get_if<bool>(&value); }
  const std::string* AsString() const { return std::get_if<std::string>(&value); }
  const std::string* AsVersion() const {
    const Version* v = std::get_if<Version>(&value);
    return v == nullptr ? nullptr : &v->value;
  }

  bool operator==(const DeviceAttribute&) const = default;
};

struct CapacityRequestPolicyRange {
  common::Quantity min;  // required
  std::optional<common::Quantity> max;
  std::optional<common::Quantity> step;

  bool operator==(const CapacityRequestPolicyRange&) const = default;
};

struct CapacityRequestPolicy {
  std::optional<common::Quantity> default_value;  // JSON "default"
  std::vector<common::Quantity> valid_values;
  std::optional<CapacityRequestPolicyRange> valid_range;

  bool operator==(const CapacityRequestPolicy&) const = default;
};

struct DeviceCapacity {
  common::Quantity value;  // required
  std::optional<CapacityRequestPolicy> request_policy;

  bool operator==(const DeviceCapacity&) const = default;
};

struct DeviceCounterConsumption {
  std::string counter_set;                  // required
  std::map<std::string, Counter> counters;  // required

  bool operator==(const DeviceCounterConsumption&) const = default;
};

struct DeviceTaint {
  std::string key;  // required
  std::string value;
  std::string effect;  // required: None, NoSchedule, NoExecute
  std::optional<absl::Time> time_added;

  bool operator==(const DeviceTaint&) const = default;
};

// resource/v1.Device.
struct SliceDevice {
  std::string name;  // required
  std::map<std::string, DeviceAttribute> attributes;
  std::map<std::string, DeviceCapacity> capacity;
  std::vector<DeviceCounterConsumption> consumes_counters;
  std::optional<std::string> node_name;
  std::optional<NodeSelector> node_selector;
  std::optional<bool> all_nodes;
  std::vector<DeviceTaint> taints;
  std::optional<bool> binds_to_node;
  std::vector<std::string> binding_conditions;
  std::vector<std::string> binding_failure_conditions;
  std::optional<bool> allow_multiple_allocations;

  bool operator==(const SliceDevice&) const = default;
};

struct ResourceSliceSpec {
  std::string driver;  // required
  ResourcePool pool;   // required
  // Exactly one of the next four is set (checked by the API server, not by the codec).
  std::optional<std::string> node_name;
  std::optional<NodeSelector> node_selector;
  std::optional<bool> all_nodes;
  std::optional<bool> per_device_node_selection;
  std::vector<SliceDevice> devices;
  std::vector<CounterSet> shared_counters;

  bool operator==(const ResourceSliceSpec&) const = default;
};

struct ResourceSlice {
  ObjectMeta metadata;
  ResourceSliceSpec spec;

  bool operator==(const ResourceSlice&) const = default;
};

// ---------------------------------------------------------------------------------------------
// Shared by claims and classes

struct CelDeviceSelector {
  std::string expression;  // required

  bool operator==(const CelDeviceSelector&) const = default;
};

struct DeviceSelector {
  std::optional<CelDeviceSelector> cel;

  bool operator==(const DeviceSelector&) const = default;
};

struct OpaqueDeviceConfiguration {
  std::string driver;                                    // required
  nlohmann::json parameters = nlohmann::json::object();  // required, raw JSON

  bool operator==(const OpaqueDeviceConfiguration&) const = default;
};

struct DeviceToleration {
  std::string key;
  std::string op;  // JSON "operator": Exists or Equal (default Equal)
  std::string value;
  std::string effect;
  std::optional<int64_t> toleration_seconds;

  bool operator==(const DeviceToleration&) const = default;
};

struct CapacityRequirements {
  std::map<std::string, common::Quantity> requests;

  bool operator==(const CapacityRequirements&) const = default;
};

// ---------------------------------------------------------------------------------------------
// ResourceClaim spec

struct ExactDeviceRequest {
  std::string device_class_name;  // required
  std::vector<DeviceSelector> selectors;
  std::string allocation_mode;  // ExactCount (default) or All
  int64_t count = 0;            // 0 means unset (the API server defaults it to 1)
  std::optional<bool> admin_access;
  std::vector<DeviceToleration> tolerations;
  std::optional<CapacityRequirements> capacity;

  bool operator==(const ExactDeviceRequest&) const = default;
};

struct DeviceSubRequest {
  std::string name;               // required
  std::string device_class_name;  // required
  std::vector<DeviceSelector> selectors;
  std::string allocation_mode;
  int64_t count = 0;
  std::vector<DeviceToleration> tolerations;
  std::optional<CapacityRequirements> capacity;

  bool operator==(const DeviceSubRequest&) const = default;
};

// Exactly one of `exactly` and `first_available` is set; the codec enforces it.
struct DeviceRequest {
  std::string name;  // required
  std::optional<ExactDeviceRequest> exactly;
  std::vector<DeviceSubRequest> first_available;

  bool operator==(const DeviceRequest&) const = default;
};

struct DeviceConstraint {
  std::vector<std::string> requests;
  std::optional<std::string> match_attribute;
  std::optional<std::string> distinct_attribute;

  bool operator==(const DeviceConstraint&) const = default;
};

struct DeviceClaimConfiguration {
  std::vector<std::string> requests;
  std::optional<OpaqueDeviceConfiguration> opaque;

  bool operator==(const DeviceClaimConfiguration&) const = default;
};

struct DeviceClaim {
  std::vector<DeviceRequest> requests;
  std::vector<DeviceConstraint> constraints;
  std::vector<DeviceClaimConfiguration> config;

  bool operator==(const DeviceClaim&) const = default;
};

struct ResourceClaimSpec {
  DeviceClaim devices;

  bool operator==(const ResourceClaimSpec&) const = default;
};

// ---------------------------------------------------------------------------------------------
// ResourceClaim status

struct DeviceRequestAllocationResult {
  std::string request;  // required; "<request>/<subrequest>" for firstAvailable
  std::string driver;   // required
  std::string pool;     // required
  std::string device;   // required
  std::optional<bool> admin_access;
  std::vector<DeviceToleration> tolerations;
  std::vector<std::string> binding_conditions;
  std::vector<std::string> binding_failure_conditions;
  std::optional<std::string> share_id;
  std::map<std::string, common::Quantity> consumed_capacity;

  bool operator==(const DeviceRequestAllocationResult&) const = default;
};

struct DeviceAllocationConfiguration {
  std::string source;  // required: FromClass or FromClaim
  std::vector<std::string> requests;
  std::optional<OpaqueDeviceConfiguration> opaque;

  bool operator==(const DeviceAllocationConfiguration&) const = default;
};

struct DeviceAllocationResult {
  std::vector<DeviceRequestAllocationResult> results;
  std::vector<DeviceAllocationConfiguration> config;

  bool operator==(const DeviceAllocationResult&) const = default;
};

struct AllocationResult {
  DeviceAllocationResult devices;
  std::optional<NodeSelector> node_selector;
  std::optional<absl::Time> allocation_timestamp;

  bool operator==(const AllocationResult&) const = default;
};

struct ResourceClaimConsumerReference {
  std::string api_group;
  std::string resource;  // required, "pods" for pods
  std::string name;      // required
  std::string uid;       // required

  bool operator==(const ResourceClaimConsumerReference&) const = default;
};

struct NetworkDeviceData {
  std::string interface_name;
  std::vector<std::string> ips;
  std::string hardware_address;

  bool operator==(const NetworkDeviceData&) const = default;
};

struct AllocatedDeviceStatus {
  std::string driver;  // required
  std::string pool;    // required
  std::string device;  // required
  std::optional<std::string> share_id;
  std::vector<Condition> conditions;
  std::optional<nlohmann::json> data;  // raw JSON
  std::optional<NetworkDeviceData> network_data;

  bool operator==(const AllocatedDeviceStatus&) const = default;
};

struct ResourceClaimStatus {
  std::optional<AllocationResult> allocation;
  std::vector<ResourceClaimConsumerReference> reserved_for;
  std::vector<AllocatedDeviceStatus> devices;

  bool operator==(const ResourceClaimStatus&) const = default;
};

struct ResourceClaim {
  ObjectMeta metadata;
  ResourceClaimSpec spec;
  ResourceClaimStatus status;  // omitted on encode when empty

  bool operator==(const ResourceClaim&) const = default;
};

// ---------------------------------------------------------------------------------------------
// DeviceClass and ResourceClaimTemplate

struct DeviceClassConfiguration {
  std::optional<OpaqueDeviceConfiguration> opaque;

  bool operator==(const DeviceClassConfiguration&) const = default;
};

struct DeviceClassSpec {
  std::vector<DeviceSelector> selectors;
  std::vector<DeviceClassConfiguration> config;
  std::optional<std::string> extended_resource_name;

  bool operator==(const DeviceClassSpec&) const = default;
};

struct DeviceClass {
  ObjectMeta metadata;
  DeviceClassSpec spec;

  bool operator==(const DeviceClass&) const = default;
};

struct ResourceClaimTemplateSpec {
  ObjectMeta metadata;
  ResourceClaimSpec spec;

  bool operator==(const ResourceClaimTemplateSpec&) const = default;
};

struct ResourceClaimTemplate {
  ObjectMeta metadata;
  ResourceClaimTemplateSpec spec;

  bool operator==(const ResourceClaimTemplate&) const = default;
};

// A list response (GET on a collection).
template <typename T>
struct ObjectList {
  ListMeta metadata;
  std::vector<T> items;

  bool operator==(const ObjectList&) const = default;
};

using ResourceSliceList = ObjectList<ResourceSlice>;
using ResourceClaimList = ObjectList<ResourceClaim>;
using DeviceClassList = ObjectList<DeviceClass>;
using PodList = ObjectList<Pod>;
using NodeList = ObjectList<Node>;

}  // namespace dralens::model
