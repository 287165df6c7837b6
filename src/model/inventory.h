// The GPU inventory of one node: plain value types and an immutable snapshot.
//
// A DeviceSource (NVML or simulated) produces an Inventory; the slice builder, the MIG manager
// and the node collectors read it. An Inventory never changes after construction, so it can be
// shared between threads freely (copies share one immutable body).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/model/mig_profile.h"

namespace dralens::model {

enum class MigMode { kDisabled = 0, kEnabled = 1 };
absl::string_view ToString(MigMode mode);

// One physical GPU.
struct GpuInfo {
  uint32_t minor = 0;        // /dev/nvidia<minor>; DRA device name gpu-<minor>
  uint32_t index = 0;        // NVML index (not stable across reboots)
  std::string uuid;          // GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
  std::string product_name;  // "NVIDIA H100 80GB HBM3"
  std::string brand;         // "Nvidia", "Tesla", ... (go-nvlib strings)
  std::string architecture;  // "Hopper", "Ampere", ...
  int cuda_compute_major = 0;
  int cuda_compute_minor = 0;
  uint64_t memory_bytes = 0;  // nvmlMemory_t.total; 0 when not reported
  std::string pci_bus_id;     // "0000:3b:00.0" (lower case, 4-digit domain); may be empty
  std::string pcie_root;      // "pci0000:3a"; empty when unknown
  std::optional<int> numa_node;
  // The NVLink domain the GPU belongs to; empty when it has no active NVLink. GPUs with the same
  // value, on this node or another, reach each other over NVLink: an NVLink fabric's
  // "<clusterUUID>.<cliqueID>", else the UUID of the lowest-addressed GPU of its node-local
  // NVLink component (driver/discovery/nvlink_domains.h).
  std::string nvlink_domain = {};
  std::string driver_version;       // "550.163.01"
  std::string cuda_driver_version;  // "12.4"
  bool mig_capable = false;
  MigMode mig_mode_current = MigMode::kDisabled;
  MigMode mig_mode_pending = MigMode::kDisabled;
  uint32_t memory_slices = 0;            // 8, or 4 on A30; 0 when not MIG capable
  std::vector<MigProfile> mig_profiles;  // GI profiles the GPU offers, by profile index

  bool mig_enabled() const { return mig_mode_current == MigMode::kEnabled; }
  // "9.0"
  std::string CudaComputeCapability() const;
  const MigProfile* FindMigProfile(absl::string_view name) const;
  const MigProfile* FindMigProfileById(uint32_t gi_profile_id) const;
  bool operator==(const GpuInfo&) const = default;
};

// One MIG device: a compute instance inside a GPU instance of a parent GPU.
struct MigDevice {
  std::string uuid;  // MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
  std::string parent_uuid;
  uint32_t parent_minor = 0;
  uint32_t parent_index = 0;
  MigProfile profile;  // the GPU-instance profile (capacities of the GI)
  uint32_t gi_id = 0;
  uint32_t ci_id = 0;
  uint32_t ci_profile_id = 0;
  uint32_t ci_slices = 0;  // == profile.gpu_slices for the default (full-GI) CI
  MigPlacement placement;  // in memory slices of the parent

  // The profile name of this device: profile.name for a full-GI CI, otherwise the go-nvlib
  // "<C>c.<G>g.<GB>gb" form built from profile.name.
  std::string ProfileName() const;
  bool operator==(const MigDevice&) const = default;
};

// What changed between two inventories, keyed by UUID. Lists are sorted.
struct InventoryDiff {
  bool driver_changed = false;  // driver or CUDA driver version
  std::vector<std::string> added_gpus;
  std::vector<std::string> removed_gpus;
  std::vector<std::string> changed_gpus;
  std::vector<std::string> added_mig_devices;
  std::vector<std::string> removed_mig_devices;
  std::vector<std::string> changed_mig_devices;

  bool empty() const;
  // One line for logs: "gpus +1 -0 ~2, mig +3 -1 ~0, driver unchanged".
  std::string Summary() const;
  bool operator==(const InventoryDiff&) const = default;
};

// An immutable snapshot of a node's GPUs and MIG devices. Cheap to copy. Thread-safe for
// concurrent reads.
class Inventory {
 public:
  // An empty inventory (no GPUs, no driver).
  Inventory();

  // Validates and builds a snapshot: UUIDs and minors unique and non-empty, every MIG device's
  // parent present (parent_minor/parent_index are filled from it) and in MIG mode, MIG
  // placements of one GPU disjoint. GPUs are ordered by minor, MIG devices by (parent minor,
  // placement start, gi, ci).
  static absl::StatusOr<Inventory> Create(std::string driver_version,
                                          std::string cuda_driver_version,
                                          std::vector<GpuInfo> gpus,
                                          std::vector<MigDevice> mig_devices);

  const std::string& driver_version() const;
  const std::string& cuda_driver_version() const;
  const std::vector<GpuInfo>& gpus() const;
  const std::vector<MigDevice>& mig_devices() const;

  // Lookups; nullptr when absent. Pointers stay valid as long as any copy of this Inventory.
  const GpuInfo* FindGpuByUuid(absl::string_view uuid) const;
  const GpuInfo* FindGpuByMinor(uint32_t minor) const;
  const MigDevice* FindMigDeviceByUuid(absl::string_view uuid) const;
  const MigDevice* FindMigDevice(absl::string_view parent_uuid, uint32_t gi_id,
                                 uint32_t ci_id) const;
  std::vector<const MigDevice*> MigDevicesOf(absl::string_view parent_uuid) const;
  // The GPU instances on a GPU, as placement input (one entry per GI, not per CI).
  std::vector<MigInstancePlacement> MigPlacementsOf(absl::string_view parent_uuid) const;
  // PlaceableCount of every profile the GPU offers given its current MIG devices; empty for
  // an unknown or non-MIG GPU.
  std::vector<MigPlaceable> PlaceableCountsOf(absl::string_view parent_uuid) const;

  bool operator==(const Inventory& other) const;

 private:
  struct Body;
  explicit Inventory(std::shared_ptr<const Body> body);
  std::shared_ptr<const Body> body_;
};

// The changes that turn `before` into `after`.
InventoryDiff Diff(const Inventory& before, const Inventory& after);

}  // namespace dralens::model
