// NodeView: what one node has and what its prepared claims hold, as the node's collectors see
// it. The driver builds it (from its inventory, its claim ledger and device health) and hands
// it to a NodeViewSink (exporter/node); neither side includes the other.
//
// The device layout changes rarely (discovery, a MIG instance created or destroyed) and is
// shared between views; a sink compares the layout pointer to know whether identities changed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "src/model/device_type.h"

namespace dralens::model {

// One device of the node, named as its ResourceSlice publishes it.
struct NodeDevice {
  std::string name;  // "gpu-0", "gpu-0-mig-1g10gb-19-0"
  std::string uuid;  // GPU-... or MIG-...
  std::string product;
  DeviceType type = DeviceType::kGpu;
  std::string parent;   // MIG: the parent GPU's device name
  std::string profile;  // MIG: e.g. "1g.10gb"
  std::optional<int> numa_node;
  std::string pci_bus_id;
  uint64_t memory_bytes = 0;

  bool operator==(const NodeDevice&) const = default;
};

// How many more instances of a MIG profile fit on a GPU in MIG mode.
struct MigPlaceableCount {
  std::string parent;  // the GPU's device name
  std::string profile;
  uint32_t count = 0;

  bool operator==(const MigPlaceableCount&) const = default;
};

struct NodeLayout {
  std::vector<NodeDevice> devices;
  std::vector<MigPlaceableCount> placeable;  // GPUs in MIG mode only

  bool operator==(const NodeLayout&) const = default;
};

// One device a prepared claim holds.
struct ClaimDevice {
  std::string device;  // the name in the pool
  std::string pool;
  DeviceType type = DeviceType::kGpu;
  std::string uuid;  // the device's own UUID (MIG-... for MIG devices)
  // The keys dcgm-exporter labels the device's series with: the GPU's UUID (the parent's for a
  // MIG device) and, for a MIG device, its GPU instance id.
  std::string gpu_uuid;
  std::optional<uint32_t> gpu_instance_id;
  // What the claim holds, for pricing: the DeviceClass of its request ("" when unknown), the
  // GPU's product, and the fraction of the physical GPU the claim holds (1 for a GPU; a MIG
  // instance's memory slices over its GPU's; a consumable share's memory over the GPU's),
  // counted as the cluster role counts GPU-equivalents.
  std::string device_class = {};
  std::string product = {};
  double gpus = 0;

  bool operator==(const ClaimDevice&) const = default;
};

// A claim this node has prepared (PrepareCompleted).
struct PreparedClaim {
  std::string uid;
  std::string namespace_name;
  std::string name;
  std::vector<ClaimDevice> devices;

  bool operator==(const PreparedClaim&) const = default;
};

struct NodeView {
  std::string driver;
  std::string pool;
  std::shared_ptr<const NodeLayout> layout;
  std::vector<PreparedClaim> claims;  // by UID
  std::set<std::string> unhealthy;    // device names
};

// Receives every new view, one call at a time, newest last. Implementations update their series
// in place (scrapes only read them).
class NodeViewSink {
 public:
  virtual ~NodeViewSink() = default;
  virtual void Apply(const NodeView& view) = 0;
};

}  // namespace dralens::model
