// Fully populated model objects shared by the codec and schema conformance tests.
#pragma once

#include <string>

#include "absl/time/time.h"
#include "src/common/quantity.h"
#include "src/model/core.h"
#include "src/model/resource.h"

namespace dralens::model::testing {

inline common::Quantity Qty(const std::string& text) {
  return common::Quantity::Parse(text).value();
}

inline absl::Time Ts(int64_t seconds) { return absl::FromUnixSeconds(seconds); }

inline ObjectMeta FullMeta(const std::string& name) {
  ObjectMeta m;
  m.name = name;
  m.generate_name = name + "-";
  m.namespace_name = "ml";
  m.uid = "8f4c1b5e-2a3d-4b6c-9e0f-1a2b3c4d5e6f";
  m.resource_version = "12345";
  m.generation = 7;
  m.creation_timestamp = Ts(1735700000);
  m.deletion_timestamp = Ts(1735790000);
  m.deletion_grace_period_seconds = 30;
  m.labels = {{"app", "train"}, {"dralens.dev/pool", "node-a"}};
  m.annotations = {{"note", "a \"quoted\" value"}};
  m.owner_references = {{"v1", "Node", "node-a", "0d9e6f7a-node", true, false}};
  m.finalizers = {"resource.kubernetes.io/delete-protection"};
  return m;
}

inline NodeSelector FullNodeSelector() {
  NodeSelector s;
  NodeSelectorTerm term;
  term.match_expressions = {{"kubernetes.io/arch", "In", {"amd64", "arm64"}},
                            {"gpu", "Exists", {}}};
  term.match_fields = {{"metadata.name", "In", {"node-a"}}};
  s.node_selector_terms = {term};
  return s;
}

inline DeviceToleration FullToleration() {
  return DeviceToleration{"dralens.dev/unhealthy", "Equal", "true", "NoExecute", 300};
}

inline ResourceSlice FullSlice() {
  ResourceSlice s;
  s.metadata = FullMeta("node-a-gpu.dralens.dev-x7k2p");
  s.metadata.namespace_name.clear();  // cluster-scoped
  s.spec.driver = "gpu.dralens.dev";
  s.spec.pool = {"node-a", 3, 2};
  s.spec.node_name = "node-a";
  s.spec.shared_counters = {
      CounterSet{"gpu-0-counters", {{"memory", {Qty("40Gi")}}, {"multiprocessors", {Qty("108")}}}}};

  SliceDevice gpu;
  gpu.name = "gpu-0";
  gpu.attributes = {
      {"type", DeviceAttribute::String("gpu")},
      {"uuid", DeviceAttribute::String("GPU-00000000-0000-0000-0000-000000000000")},
      {"index", DeviceAttribute::Int(0)},
      {"mig", DeviceAttribute::Bool(true)},
      {"cudaComputeCapability", DeviceAttribute::SemVer("8.0.0")},
      {"resource.kubernetes.io/pciBusID", DeviceAttribute::String("0000:3b:00.0")},
      {"bigint", DeviceAttribute::Int(-9223372036854775807LL - 1)},
  };
  CapacityRequestPolicy range_policy;
  range_policy.default_value = Qty("1Gi");
  range_policy.valid_range = CapacityRequestPolicyRange{Qty("1Gi"), Qty("40Gi"), Qty("1Gi")};
  CapacityRequestPolicy values_policy;
  values_policy.default_value = Qty("10");
  values_policy.valid_values = {Qty("10"), Qty("50"), Qty("100")};
  gpu.capacity = {{"memory", {Qty("40Gi"), range_policy}},
                  {"compute", {Qty("100"), values_policy}},
                  {"power", {Qty("400"), std::nullopt}}};
  gpu.consumes_counters = {DeviceCounterConsumption{
      "gpu-0-counters", {{"memory", {Qty("40Gi")}}, {"multiprocessors", {Qty("108")}}}}};
  gpu.taints = {{"dralens.dev/unhealthy", "xid-79", "NoExecute", Ts(1735711111)},
                {"dralens.dev/maintenance", "", "NoSchedule", std::nullopt}};
  gpu.binds_to_node = true;
  gpu.binding_conditions = {"dralens.dev/ready"};
  gpu.binding_failure_conditions = {"dralens.dev/failed"};
  gpu.allow_multiple_allocations = true;

  SliceDevice mig;
  mig.name = "gpu-0-mig-1g10gb-0";
  mig.attributes = {{"profile", DeviceAttribute::String("1g.10gb")}};
  mig.capacity = {{"memory", {Qty("9856Mi"), std::nullopt}}};
  s.spec.devices = {gpu, mig};
  return s;
}

// A slice using per-device node selection (the other node-selection branch).
inline ResourceSlice PerDeviceSlice() {
  ResourceSlice s;
  s.metadata.name = "network-attached";
  s.spec.driver = "gpu.dralens.dev";
  s.spec.pool = {"fabric", 1, 1};
  s.spec.per_device_node_selection = true;
  SliceDevice a;
  a.name = "a";
  a.node_selector = FullNodeSelector();
  SliceDevice b;
  b.name = "b";
  b.all_nodes = true;
  SliceDevice c;
  c.name = "c";
  c.node_name = "node-c";
  s.spec.devices = {a, b, c};
  return s;
}

inline ResourceClaim FullClaim() {
  ResourceClaim c;
  c.metadata = FullMeta("train-0");
  DeviceRequest gpu;
  gpu.name = "gpu";
  ExactDeviceRequest exact;
  exact.device_class_name = "gpu.dralens.dev";
  exact.selectors = {DeviceSelector{CelDeviceSelector{
      "device.capacity['gpu.dralens.dev'].memory.compareTo(quantity('40Gi')) >= 0"}}};
  exact.allocation_mode = "ExactCount";
  exact.count = 2;
  exact.admin_access = false;
  exact.tolerations = {FullToleration(), DeviceToleration{"", "Exists", "", "", std::nullopt}};
  exact.capacity = CapacityRequirements{{{"memory", Qty("10Gi")}}};
  gpu.exactly = exact;

  DeviceRequest small;
  small.name = "small";
  DeviceSubRequest slice;
  slice.name = "slice";
  slice.device_class_name = "mig.dralens.dev";
  slice.selectors = {DeviceSelector{
      CelDeviceSelector{"device.attributes['gpu.dralens.dev'].profile == '1g.10gb'"}}};
  slice.allocation_mode = "All";
  slice.tolerations = {FullToleration()};
  slice.capacity = CapacityRequirements{{{"memory", Qty("5Gi")}}};
  DeviceSubRequest whole;
  whole.name = "whole";
  whole.device_class_name = "gpu.dralens.dev";
  whole.count = 1;
  small.first_available = {slice, whole};
  c.spec.devices.requests = {gpu, small};

  c.spec.devices.constraints = {
      DeviceConstraint{{"gpu"}, std::string("gpu.dralens.dev/productName"), std::nullopt},
      DeviceConstraint{{"gpu", "small"}, std::nullopt, std::string("gpu.dralens.dev/uuid")}};
  nlohmann::json params = {
      {"apiVersion", "resource.dralens.dev/v1beta1"},
      {"kind", "GpuConfig"},
      {"sharing", {{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", "Long"}}}}}};
  c.spec.devices.config = {
      DeviceClaimConfiguration{{"gpu"}, OpaqueDeviceConfiguration{"gpu.dralens.dev", params}}};

  AllocationResult alloc;
  DeviceRequestAllocationResult r1;
  r1.request = "gpu";
  r1.driver = "gpu.dralens.dev";
  r1.pool = "node-a";
  r1.device = "gpu-0";
  r1.admin_access = false;
  r1.tolerations = {FullToleration()};
  r1.binding_conditions = {"dralens.dev/ready"};
  r1.binding_failure_conditions = {"dralens.dev/failed"};
  r1.share_id = "1b2c3d4e-0000-4000-8000-000000000001";
  r1.consumed_capacity = {{"memory", Qty("10Gi")}};
  DeviceRequestAllocationResult r2;
  r2.request = "small/slice";
  r2.driver = "gpu.dralens.dev";
  r2.pool = "node-a";
  r2.device = "gpu-0-mig-1g10gb-0";
  alloc.devices.results = {r1, r2};
  alloc.devices.config = {
      DeviceAllocationConfiguration{
          "FromClass", {}, OpaqueDeviceConfiguration{"gpu.dralens.dev", {{"kind", "GpuConfig"}}}},
      DeviceAllocationConfiguration{
          "FromClaim", {"gpu"}, OpaqueDeviceConfiguration{"gpu.dralens.dev", params}}};
  NodeSelector ns;
  ns.node_selector_terms = {NodeSelectorTerm{{}, {{"metadata.name", "In", {"node-a"}}}}};
  alloc.node_selector = ns;
  alloc.allocation_timestamp = Ts(1735700100);
  c.status.allocation = alloc;
  c.status.reserved_for = {{"", "pods", "train-0-pod", "pod-uid-1"},
                           {"scheduling.k8s.io", "podgroups", "group", "pg-uid"}};
  AllocatedDeviceStatus dev;
  dev.driver = "gpu.dralens.dev";
  dev.pool = "node-a";
  dev.device = "gpu-0";
  dev.share_id = "1b2c3d4e-0000-4000-8000-000000000001";
  dev.conditions = {Condition{"Ready", "True", 7, Ts(1735700200), "Prepared", "prepared"},
                    Condition{"Healthy", "Unknown", 0, Ts(1735700300), "NoData", ""}};
  dev.data = nlohmann::json{{"uuid", "GPU-0"}, {"numbers", {1, 2.5, -3}}};
  dev.network_data = NetworkDeviceData{"eth1", {"10.0.0.5/24", "fd00::5/64"}, "aa:bb:cc:dd:ee:ff"};
  c.status.devices = {dev};
  return c;
}

inline DeviceClass FullClass() {
  DeviceClass d;
  d.metadata = FullMeta("gpu.dralens.dev");
  d.metadata.namespace_name.clear();
  d.spec.selectors = {
      DeviceSelector{CelDeviceSelector{"device.driver == 'gpu.dralens.dev'"}},
      DeviceSelector{CelDeviceSelector{"device.attributes['gpu.dralens.dev'].type == 'gpu'"}}};
  d.spec.config = {DeviceClassConfiguration{OpaqueDeviceConfiguration{
      "gpu.dralens.dev", {{"apiVersion", "resource.dralens.dev/v1beta1"}, {"kind", "GpuConfig"}}}}};
  d.spec.extended_resource_name = "dralens.dev/gpu";
  return d;
}

inline Pod FullPod() {
  Pod p;
  p.metadata = FullMeta("train-0-pod");
  p.spec.node_name = "node-a";
  Container c;
  c.name = "main";
  c.image = "registry.example/train:1";
  c.resources.claims = {{"gpu", ""}, {"small", "small"}};
  p.spec.containers = {c};
  p.spec.resource_claims = {{"gpu", std::string("train-0"), std::nullopt},
                            {"small", std::nullopt, std::string("small-template")}};
  p.status.phase = "Running";
  p.status.conditions = {{"Ready", "True", "", "", Ts(1735700400)},
                         {"PodScheduled", "True", "Scheduled", "ok", std::nullopt}};
  p.status.resource_claim_statuses = {{"gpu", std::string("train-0")},
                                      {"small", std::string("train-0-pod-small-abcde")}};
  return p;
}

inline Node FullNode() {
  Node n;
  n.metadata = FullMeta("node-a");
  n.metadata.namespace_name.clear();
  n.status.node_info.boot_id = "6c1a1a0e-1111-2222-3333-444455556666";
  n.status.node_info.machine_id = "abcdef";
  return n;
}

}  // namespace dralens::model::testing
