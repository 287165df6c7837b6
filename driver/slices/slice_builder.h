// SliceBuilder: the pure mapping from a node's GPU inventory to the ResourceSlices of its pool.
//
// One pool per node, named after the node. Device names, attributes and capacities follow the
// NVIDIA GPU DRA driver (reference dra-protocol.md §5.2-5.3) so CEL selectors carry over by
// changing only the attribute domain:
//
//   full GPU   gpu-<minor>                                  type=gpu, uuid, productName, brand,
//              architecture, cudaComputeCapability, driverVersion, cudaDriverVersion (versions),
//              resource.kubernetes.io/{pciBusID,pcieRoot,numaNode} when known; capacity memory.
//   MIG        gpu-<parentMinor>-mig-<profile>-<giProfileId>-<placementStart>
//              type=mig, uuid, parentUUID, profile, the parent's product attributes; capacities
//              multiprocessors, copyEngines, decoders, encoders, jpegEngines, ofaEngines, memory
//              and, for static MIG, memorySlice<N>=1 for each memory slice of the placement.
//
// Static MIG (the default): a GPU in MIG mode is published only through its existing MIG
// devices, never also as a full GPU (publishing both lets the scheduler hand out the same
// silicon twice). A GPU in MIG mode without MIG devices publishes nothing. A MIG device whose
// compute instance does not span its GPU instance gets the suffix "-ci<ciId>" so that several
// CIs of one GI keep distinct names.
//
// Dynamic MIG (options.dynamic_mig): every GPU that OffersDynamicMig gets a counter set
// "gpu-<minor>-counter-set" (multiprocessors, copy-engines, decoders, encoders, jpeg-engines,
// ofa-engines, memory, memory-slice-<i>); the full GPU consumes all of it and every valid
// profile x placement is published as an abstract `mig` device (no uuid) consuming its share.
// An Ampere GPU with MIG mode off is published as a full GPU only, one in MIG mode as its
// placements only (see OffersDynamicMig / OffersFullGpu).
// Existing MIG devices are not published in this mode: they are created on prepare. Layout:
// api_minor < 35 puts each GPU's counter set and devices in one slice; 35+ publishes one
// counters-only slice plus one devices slice per GPU (counter-set names are pool-wide there).
//
// Limits (reference §4.2) are enforced, never silently repaired:
//   - at most 128 devices per slice, 64 when any device in it has taints or consumesCounters;
//     devices are split over several slices, all carrying the same generation and
//     resourceSliceCount;
//   - at most 32 attributes plus capacities per device;
//   - string and version attribute values at most 64 bytes. The NVIDIA driver copies NVML's
//     strings into attributes unchanged, so an over-long value makes the API server reject the
//     slice and the driver keeps retrying. dralens keeps that contract (no truncation, which
//     would break exact-match selectors; no dropping, which would hide the device from them)
//     but fails earlier: Build() returns InvalidArgument naming the device and attribute.
//
// Version attributes are normalised the way the NVIDIA driver's semver parsing does: "12.4"
// becomes "12.4.0" and "550.163.01" becomes "550.163.1". An unparsable version is an
// InvalidArgument error.
//
// Output order is deterministic: GPUs by minor, MIG devices by (placement start, GI, CI),
// dynamic placements by (profile index, placement start).
//
// Thread-safety: SliceBuilder is immutable after construction; Build() may run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/model/inventory.h"
#include "src/model/resource.h"

namespace dralens::driver::slices {

inline constexpr size_t kMaxDevicesPerSlice = 128;
inline constexpr size_t kMaxDevicesPerSliceWithCounters = 64;
inline constexpr size_t kMaxAttributesAndCapacities = 32;
inline constexpr size_t kMaxAttributeValueLength = 64;

// Label set on every slice we publish. The publisher does not rely on it (it selects by
// spec.nodeName and spec.driver, the way the kubelet wipes slices); it tells people and tools
// who owns the object.
inline constexpr char kManagedByLabel[] = "app.kubernetes.io/managed-by";
inline constexpr char kManagedByValue[] = "dralens";

// Standard attribute names.
inline constexpr char kPciBusIdAttribute[] = "resource.kubernetes.io/pciBusID";
inline constexpr char kPcieRootAttribute[] = "resource.kubernetes.io/pcieRoot";
inline constexpr char kNumaNodeAttribute[] = "resource.kubernetes.io/numaNode";
// Ours, in the driver's domain (<driver name>/nvlinkDomain), on full GPUs with an active NVLink:
// GPUs with the same value reach each other over NVLink, on one node or, for a multi-node
// fabric's "<clusterUUID>.<cliqueID>", on several (model::GpuInfo::nvlink_domain). MIG devices
// never carry it: MIG mode has no GPU-to-GPU peer access, over NVLink or PCIe. A claim asks for
// NVLink-connected GPUs with matchAttribute: "<driver name>/nvlinkDomain".
inline constexpr char kNvlinkDomainAttribute[] = "nvlinkDomain";

// Where the slices go and who owns them.
struct SliceTarget {
  std::string node_name;    // pool name and spec.nodeName
  std::string node_uid;     // owner reference to the Node; empty leaves the reference out
  std::string driver_name;  // e.g. "gpu.dralens.dev"
};

struct SliceBuilderOptions {
  bool dynamic_mig = false;
  // The API server's minor version: 35 and later split counters from devices.
  int api_minor = 34;
  // Written into spec.pool.generation of every slice.
  int64_t pool_generation = 1;
  // Device taints by device name (device health); a device with taints goes into a slice of
  // at most 64 devices, as the API requires.
  std::map<std::string, std::vector<model::DeviceTaint>> taints = {};
  // Consumable capacity (DRAConsumableCapacity): full GPUs outside MIG are published with
  // allowMultipleAllocations and a memory request policy (default and steps of 1Gi), so that
  // several claims can each take a share of one GPU's memory.
  bool consumable_capacity = false;
};

class SliceBuilder {
 public:
  SliceBuilder(SliceTarget target, SliceBuilderOptions options);

  // The complete set of slices for `inventory`. An empty inventory yields no slices.
  // InvalidArgument for values the API would reject (see the file comment).
  absl::StatusOr<std::vector<model::ResourceSlice>> Build(const model::Inventory& inventory) const;

  const SliceTarget& target() const { return target_; }
  const SliceBuilderOptions& options() const { return options_; }

 private:
  SliceTarget target_;
  SliceBuilderOptions options_;
};

// Dynamic MIG publishes only what prepare can deliver (Ampere cannot switch MIG mode without a
// GPU reset; Hopper and later switch it at prepare time):
// Whether the GPU's profile x placement devices are published under dynamic MIG: a
// MIG-capable GPU that is in MIG mode already, or whose MIG mode switches without a reset.
bool OffersDynamicMig(const model::GpuInfo& gpu);
// Whether the full GPU is published: a GPU outside MIG mode; under dynamic MIG also a GPU in
// MIG mode whose mode prepare may switch off again (its counter set keeps the full GPU and the
// placements exclusive). An Ampere GPU in MIG mode is never offered whole.
bool OffersFullGpu(const model::GpuInfo& gpu, bool dynamic_mig);

// "gpu-<minor>".
std::string GpuDeviceName(const model::GpuInfo& gpu);
// "gpu-<parentMinor>-mig-<profile>-<giProfileId>-<placementStart>" (plus "-ci<ciId>" for a CI
// that does not span its GI).
std::string MigDeviceName(const model::MigDevice& device);
// The dynamic-MIG device for `profile` at `placement_start` on `gpu`.
std::string DynamicMigDeviceName(const model::GpuInfo& gpu, const model::MigProfile& profile,
                                 uint32_t placement_start);
// "gpu-<minor>-counter-set".
std::string CounterSetName(const model::GpuInfo& gpu);

// Lenient semver parsing as in the NVIDIA driver: an optional "v", one to three numeric
// components (missing ones are 0, leading zeros dropped), then an optional "-prerelease" and
// "+build". Returns the canonical "X.Y.Z[-pre][+build]".
absl::StatusOr<std::string> NormalizeSemVer(absl::string_view text);

}  // namespace dralens::driver::slices
