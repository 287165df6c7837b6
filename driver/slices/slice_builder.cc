#include "driver/slices/slice_builder.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "driver/discovery/mig_control.h"
#include "src/common/quantity.h"
#include "src/common/status.h"
#include "src/model/mig_profile.h"

namespace dralens::driver::slices {
namespace {

using common::Quantity;
using model::DeviceAttribute;
using model::DeviceCapacity;
using model::GpuInfo;
using model::MigDevice;
using model::MigProfile;
using model::SliceDevice;

bool IsSemVerIdentChar(char c) { return absl::ascii_isalnum(c) || c == '-' || c == '.'; }

absl::Status CheckStringLength(absl::string_view device, absl::string_view attribute,
                               absl::string_view value) {
  if (value.size() > kMaxAttributeValueLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", device, ": attribute ", attribute, " is ", value.size(),
        " bytes long, more than the API's ", kMaxAttributeValueLength, ": \"", value, "\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceAttribute> VersionAttribute(absl::string_view device,
                                                 absl::string_view attribute,
                                                 absl::string_view text) {
  absl::StatusOr<std::string> version = NormalizeSemVer(text);
  if (!version.ok()) {
    return common::Annotate(version.status(), absl::StrCat("device ", device, ": ", attribute));
  }
  RETURN_IF_ERROR(CheckStringLength(device, attribute, *version));
  return DeviceAttribute::SemVer(*std::move(version));
}

// Adds a string attribute when `value` is non-empty (or `always`).
absl::Status AddString(SliceDevice& device, const std::string& name, const std::string& value,
                       bool always = false) {
  if (value.empty() && !always) {
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(CheckStringLength(device.name, name, value));
  device.attributes[name] = DeviceAttribute::String(value);
  return absl::OkStatus();
}

// The attributes every device of `gpu` carries (besides type/uuid), in the NVIDIA driver's
// names. `driver_version`/`cuda_driver_version` fall back to the inventory's.
absl::Status AddProductAttributes(SliceDevice& device, const GpuInfo& gpu,
                                  const model::Inventory& inventory) {
  RETURN_IF_ERROR(AddString(device, "productName", gpu.product_name, /*always=*/true));
  RETURN_IF_ERROR(AddString(device, "brand", gpu.brand));
  RETURN_IF_ERROR(AddString(device, "architecture", gpu.architecture));
  if (gpu.cuda_compute_major > 0) {
    ASSIGN_OR_RETURN(
        device.attributes["cudaComputeCapability"],
        VersionAttribute(device.name, "cudaComputeCapability", gpu.CudaComputeCapability()));
  }
  const std::string& driver_version =
      gpu.driver_version.empty() ? inventory.driver_version() : gpu.driver_version;
  if (!driver_version.empty()) {
    ASSIGN_OR_RETURN(device.attributes["driverVersion"],
                     VersionAttribute(device.name, "driverVersion", driver_version));
  }
  const std::string& cuda_version =
      gpu.cuda_driver_version.empty() ? inventory.cuda_driver_version() : gpu.cuda_driver_version;
  if (!cuda_version.empty()) {
    ASSIGN_OR_RETURN(device.attributes["cudaDriverVersion"],
                     VersionAttribute(device.name, "cudaDriverVersion", cuda_version));
  }
  RETURN_IF_ERROR(AddString(device, kPciBusIdAttribute, gpu.pci_bus_id));
  RETURN_IF_ERROR(AddString(device, kPcieRootAttribute, gpu.pcie_root));
  if (gpu.numa_node.has_value() && *gpu.numa_node >= 0) {
    device.attributes[kNumaNodeAttribute] = DeviceAttribute::Int(*gpu.numa_node);
  }
  return absl::OkStatus();
}

DeviceCapacity Count(uint64_t n) { return DeviceCapacity{Quantity::FromInt64(int64_t(n)), {}}; }
DeviceCapacity Bytes(uint64_t n) {
  return DeviceCapacity{Quantity::FromInt64(int64_t(n), Quantity::Format::kBinarySI), {}};
}

// The MIG engine capacities of a GI profile, in the NVIDIA driver's names.
void AddMigCapacities(SliceDevice& device, const MigProfile& profile) {
  device.capacity["multiprocessors"] = Count(profile.multiprocessors);
  device.capacity["copyEngines"] = Count(profile.copy_engines);
  device.capacity["decoders"] = Count(profile.decoders);
  device.capacity["encoders"] = Count(profile.encoders);
  device.capacity["jpegEngines"] = Count(profile.jpegs);
  device.capacity["ofaEngines"] = Count(profile.ofas);
  device.capacity["memory"] = Bytes(profile.memory_bytes());
}

absl::Status CheckDeviceLimits(const SliceDevice& device) {
  const size_t n = device.attributes.size() + device.capacity.size();
  if (n > kMaxAttributesAndCapacities) {
    return absl::InternalError(absl::StrCat("device ", device.name, " has ", n,
                                            " attributes and capacities, more than the API's ",
                                            kMaxAttributesAndCapacities));
  }
  return absl::OkStatus();
}

absl::StatusOr<SliceDevice> FullGpuDevice(const GpuInfo& gpu, const model::Inventory& inventory) {
  SliceDevice device;
  device.name = GpuDeviceName(gpu);
  device.attributes["type"] = DeviceAttribute::String("gpu");
  RETURN_IF_ERROR(AddString(device, "uuid", gpu.uuid, /*always=*/true));
  RETURN_IF_ERROR(AddProductAttributes(device, gpu, inventory));
  // Full GPUs only (a partitionable one too, prepared whole with MIG off): MIG devices have no
  // peer access to other GPUs.
  RETURN_IF_ERROR(AddString(device, kNvlinkDomainAttribute, gpu.nvlink_domain));
  if (gpu.memory_bytes > 0) {
    device.capacity["memory"] = Bytes(gpu.memory_bytes);
  }
  return device;
}

absl::StatusOr<SliceDevice> StaticMigDevice(const MigDevice& mig, const GpuInfo& parent,
                                            const model::Inventory& inventory) {
  SliceDevice device;
  device.name = MigDeviceName(mig);
  device.attributes["type"] = DeviceAttribute::String("mig");
  RETURN_IF_ERROR(AddString(device, "uuid", mig.uuid, /*always=*/true));
  RETURN_IF_ERROR(AddString(device, "parentUUID", mig.parent_uuid, /*always=*/true));
  RETURN_IF_ERROR(AddString(device, "profile", mig.ProfileName(), /*always=*/true));
  RETURN_IF_ERROR(AddProductAttributes(device, parent, inventory));
  AddMigCapacities(device, mig.profile);
  for (uint32_t slice = mig.placement.start; slice < mig.placement.end(); ++slice) {
    device.capacity[absl::StrCat("memorySlice", slice)] = Count(1);
  }
  return device;
}

// --- dynamic MIG ------------------------------------------------------------------------------

bool IsPartitionable(const GpuInfo& gpu) {
  return gpu.mig_capable && gpu.memory_slices > 0 && !gpu.mig_profiles.empty();
}

using CounterMap = std::map<std::string, model::Counter>;

model::Counter CounterOf(uint64_t n, Quantity::Format format = Quantity::Format::kDecimalSI) {
  return model::Counter{Quantity::FromInt64(int64_t(n), format)};
}

// What one profile consumes, without its memory slices.
CounterMap ProfileCounters(const MigProfile& p) {
  return {{"multiprocessors", CounterOf(p.multiprocessors)},
          {"copy-engines", CounterOf(p.copy_engines)},
          {"decoders", CounterOf(p.decoders)},
          {"encoders", CounterOf(p.encoders)},
          {"jpeg-engines", CounterOf(p.jpegs)},
          {"ofa-engines", CounterOf(p.ofas)},
          {"memory", CounterOf(p.memory_bytes(), Quantity::Format::kBinarySI)}};
}

// The GPU's counter set: per dimension the largest amount any profile uses (the full-GPU
// profile for all boards we know), plus one counter per memory slice.
model::CounterSet GpuCounterSet(const GpuInfo& gpu) {
  model::CounterSet set;
  set.name = CounterSetName(gpu);
  for (const MigProfile& profile : gpu.mig_profiles) {
    for (auto& [name, counter] : ProfileCounters(profile)) {
      auto [it, inserted] = set.counters.emplace(name, counter);
      if (!inserted && it->second.value < counter.value) {
        it->second = counter;
      }
    }
  }
  for (uint32_t i = 0; i < gpu.memory_slices; ++i) {
    set.counters[absl::StrCat("memory-slice-", i)] = CounterOf(1);
  }
  return set;
}

// The full GPU of a partitionable GPU: its usual attributes plus the MIG maximum capacities,
// consuming the whole counter set.
absl::StatusOr<SliceDevice> PartitionableFullGpu(const GpuInfo& gpu,
                                                 const model::CounterSet& counters,
                                                 const model::Inventory& inventory) {
  ASSIGN_OR_RETURN(SliceDevice device, FullGpuDevice(gpu, inventory));
  auto cap = [&](const char* capacity, const char* counter) {
    device.capacity[capacity] = DeviceCapacity{counters.counters.at(counter).value, {}};
  };
  cap("multiprocessors", "multiprocessors");
  cap("copyEngines", "copy-engines");
  cap("decoders", "decoders");
  cap("encoders", "encoders");
  cap("jpegEngines", "jpeg-engines");
  cap("ofaEngines", "ofa-engines");
  if (gpu.memory_bytes == 0) {
    cap("memory", "memory");
  }
  device.consumes_counters.push_back({counters.name, counters.counters});
  return device;
}

absl::StatusOr<SliceDevice> DynamicMigDevice(const GpuInfo& gpu, const MigProfile& profile,
                                             const model::MigPlacement& placement,
                                             const model::Inventory& inventory) {
  SliceDevice device;
  device.name = DynamicMigDeviceName(gpu, profile, placement.start);
  device.attributes["type"] = DeviceAttribute::String("mig");
  RETURN_IF_ERROR(AddString(device, "parentUUID", gpu.uuid, /*always=*/true));
  RETURN_IF_ERROR(AddString(device, "profile", profile.name, /*always=*/true));
  RETURN_IF_ERROR(AddProductAttributes(device, gpu, inventory));
  AddMigCapacities(device, profile);
  model::DeviceCounterConsumption consumption;
  consumption.counter_set = CounterSetName(gpu);
  consumption.counters = ProfileCounters(profile);
  for (uint32_t slice = placement.start; slice < placement.end(); ++slice) {
    consumption.counters[absl::StrCat("memory-slice-", slice)] = CounterOf(1);
  }
  device.consumes_counters.push_back(std::move(consumption));
  return device;
}

// Every device of a partitionable GPU, full GPU first (where it can be prepared), then
// profiles in index order with their placements by start.
absl::StatusOr<std::vector<SliceDevice>> PartitionableDevices(const GpuInfo& gpu,
                                                              const model::CounterSet& counters,
                                                              const model::Inventory& inventory) {
  std::vector<SliceDevice> devices;
  if (OffersFullGpu(gpu, /*dynamic_mig=*/true)) {
    ASSIGN_OR_RETURN(SliceDevice full, PartitionableFullGpu(gpu, counters, inventory));
    devices.push_back(std::move(full));
  }
  std::vector<const MigProfile*> profiles;
  for (const MigProfile& profile : gpu.mig_profiles) {
    profiles.push_back(&profile);
  }
  std::stable_sort(profiles.begin(), profiles.end(), [](const MigProfile* a, const MigProfile* b) {
    return a->gi_profile_index < b->gi_profile_index;
  });
  for (const MigProfile* profile : profiles) {
    std::vector<model::MigPlacement> placements = profile->placements;
    std::sort(placements.begin(), placements.end(),
              [](const model::MigPlacement& a, const model::MigPlacement& b) {
                return a.start < b.start;
              });
    for (const model::MigPlacement& placement : placements) {
      ASSIGN_OR_RETURN(SliceDevice device, DynamicMigDevice(gpu, *profile, placement, inventory));
      devices.push_back(std::move(device));
    }
  }
  return devices;
}

// --- slicing ------------------------------------------------------------------------------------

bool NeedsSmallSlice(const SliceDevice& device) {
  return !device.consumes_counters.empty() || !device.taints.empty();
}

// Splits `devices` in order into chunks within the per-slice device limits.
std::vector<std::vector<SliceDevice>> Chunk(std::vector<SliceDevice> devices) {
  std::vector<std::vector<SliceDevice>> chunks;
  std::vector<SliceDevice> current;
  bool small = false;
  for (SliceDevice& device : devices) {
    const bool next_small = small || NeedsSmallSlice(device);
    const size_t limit = next_small ? kMaxDevicesPerSliceWithCounters : kMaxDevicesPerSlice;
    if (current.size() >= limit) {
      chunks.push_back(std::move(current));
      current.clear();
      small = NeedsSmallSlice(device);
    } else {
      small = next_small;
    }
    current.push_back(std::move(device));
  }
  if (!current.empty()) {
    chunks.push_back(std::move(current));
  }
  return chunks;
}

}  // namespace

SliceBuilder::SliceBuilder(SliceTarget target, SliceBuilderOptions options)
    : target_(std::move(target)), options_(options) {}

absl::StatusOr<std::vector<model::ResourceSlice>> SliceBuilder::Build(
    const model::Inventory& inventory) const {
  struct Body {
    std::vector<SliceDevice> devices;
    std::vector<model::CounterSet> counters;
  };
  std::vector<Body> bodies;
  // Devices without counters, chunked at the end so they pack densely.
  std::vector<SliceDevice> plain;
  auto with_taints = [this](SliceDevice& device) {
    auto it = options_.taints.find(device.name);
    if (it != options_.taints.end()) {
      device.taints = it->second;
    }
  };

  for (const GpuInfo& gpu : inventory.gpus()) {
    if (options_.dynamic_mig && OffersDynamicMig(gpu)) {
      model::CounterSet counters = GpuCounterSet(gpu);
      ASSIGN_OR_RETURN(std::vector<SliceDevice> devices,
                       PartitionableDevices(gpu, counters, inventory));
      for (SliceDevice& device : devices) {
        with_taints(device);
        RETURN_IF_ERROR(CheckDeviceLimits(device));
      }
      if (options_.api_minor < 35) {
        // 1.34: a device may only consume counters defined in its own slice, so the GPU's
        // devices cannot be split.
        if (devices.size() > kMaxDevicesPerSliceWithCounters) {
          return absl::InternalError(absl::StrCat(
              "GPU ", gpu.uuid, ": ", devices.size(), " dynamic MIG devices exceed the ",
              kMaxDevicesPerSliceWithCounters, " devices one 1.34 slice may hold"));
        }
        bodies.push_back({std::move(devices), {std::move(counters)}});
      } else {
        // 1.35+: counters and devices may not share a slice; counter sets are pool-wide.
        bodies.push_back({{}, {std::move(counters)}});
        for (std::vector<SliceDevice>& chunk : Chunk(std::move(devices))) {
          bodies.push_back({std::move(chunk), {}});
        }
      }
      continue;
    }
    if (OffersFullGpu(gpu, options_.dynamic_mig)) {
      ASSIGN_OR_RETURN(SliceDevice device, FullGpuDevice(gpu, inventory));
      if (options_.consumable_capacity && device.capacity.count("memory") > 0) {
        const Quantity gib = Quantity::FromInt64(int64_t{1} << 30, Quantity::Format::kBinarySI);
        device.allow_multiple_allocations = true;
        device.capacity["memory"].request_policy =
            model::CapacityRequestPolicy{.default_value = gib,
                                         .valid_values = {},
                                         .valid_range = model::CapacityRequestPolicyRange{
                                             .min = gib, .max = std::nullopt, .step = gib}};
      }
      with_taints(device);
      RETURN_IF_ERROR(CheckDeviceLimits(device));
      plain.push_back(std::move(device));
      continue;
    }
    // Static MIG: only the MIG devices, never the parent as well.
    for (const MigDevice* mig : inventory.MigDevicesOf(gpu.uuid)) {
      ASSIGN_OR_RETURN(SliceDevice device, StaticMigDevice(*mig, gpu, inventory));
      with_taints(device);
      RETURN_IF_ERROR(CheckDeviceLimits(device));
      plain.push_back(std::move(device));
    }
  }
  for (std::vector<SliceDevice>& chunk : Chunk(std::move(plain))) {
    bodies.push_back({std::move(chunk), {}});
  }

  std::vector<model::ResourceSlice> slices;
  slices.reserve(bodies.size());
  for (Body& body : bodies) {
    model::ResourceSlice slice;
    slice.metadata.generate_name = absl::StrCat(target_.node_name, "-", target_.driver_name, "-");
    slice.metadata.labels[kManagedByLabel] = kManagedByValue;
    if (!target_.node_uid.empty()) {
      slice.metadata.owner_references.push_back(
          {"v1", "Node", target_.node_name, target_.node_uid, true, std::nullopt});
    }
    slice.spec.driver = target_.driver_name;
    slice.spec.node_name = target_.node_name;
    slice.spec.pool.name = target_.node_name;
    slice.spec.pool.generation = options_.pool_generation;
    slice.spec.pool.resource_slice_count = int64_t(bodies.size());
    slice.spec.devices = std::move(body.devices);
    slice.spec.shared_counters = std::move(body.counters);
    slices.push_back(std::move(slice));
  }
  return slices;
}

bool OffersDynamicMig(const GpuInfo& gpu) {
  return IsPartitionable(gpu) && (gpu.mig_enabled() || discovery::MigModeSwitchesWithoutReset(gpu));
}

bool OffersFullGpu(const GpuInfo& gpu, bool dynamic_mig) {
  if (!gpu.mig_enabled()) {
    return true;
  }
  return dynamic_mig && IsPartitionable(gpu) && discovery::MigModeSwitchesWithoutReset(gpu);
}

std::string GpuDeviceName(const GpuInfo& gpu) { return absl::StrCat("gpu-", gpu.minor); }

std::string MigDeviceName(const MigDevice& device) {
  std::string name = absl::StrCat("gpu-", device.parent_minor, "-mig-",
                                  model::MigProfileDnsName(device.ProfileName()), "-",
                                  device.profile.gi_profile_id, "-", device.placement.start);
  if (device.ci_slices != 0 && device.ci_slices < device.profile.gpu_slices) {
    absl::StrAppend(&name, "-ci", device.ci_id);
  }
  return name;
}

std::string DynamicMigDeviceName(const GpuInfo& gpu, const MigProfile& profile,
                                 uint32_t placement_start) {
  return absl::StrCat("gpu-", gpu.minor, "-mig-", model::MigProfileDnsName(profile.name), "-",
                      profile.gi_profile_id, "-", placement_start);
}

std::string CounterSetName(const GpuInfo& gpu) {
  return absl::StrCat("gpu-", gpu.minor, "-counter-set");
}

absl::StatusOr<std::string> NormalizeSemVer(absl::string_view text) {
  auto error = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("version \"", text, "\": ", why));
  };
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  if (!rest.empty() && (rest.front() == 'v' || rest.front() == 'V')) {
    rest.remove_prefix(1);
  }
  absl::string_view build;
  if (size_t plus = rest.find('+'); plus != absl::string_view::npos) {
    build = rest.substr(plus + 1);
    rest = rest.substr(0, plus);
    if (build.empty()) {
      return error("empty build metadata");
    }
  }
  absl::string_view pre;
  if (size_t dash = rest.find('-'); dash != absl::string_view::npos) {
    pre = rest.substr(dash + 1);
    rest = rest.substr(0, dash);
    if (pre.empty()) {
      return error("empty pre-release");
    }
  }
  for (absl::string_view part : {pre, build}) {
    for (char c : part) {
      if (!IsSemVerIdentChar(c)) {
        return error("invalid character in pre-release or build metadata");
      }
    }
  }
  std::vector<absl::string_view> core = absl::StrSplit(rest, '.');
  if (rest.empty() || core.size() > 3) {
    return error("expected 1 to 3 numeric components");
  }
  uint64_t numbers[3] = {0, 0, 0};
  for (size_t i = 0; i < core.size(); ++i) {
    if (core[i].empty() || !std::all_of(core[i].begin(), core[i].end(), absl::ascii_isdigit) ||
        !absl::SimpleAtoi(core[i], &numbers[i])) {
      return error(absl::StrCat("component \"", core[i], "\" is not a number"));
    }
  }
  std::string out = absl::StrCat(numbers[0], ".", numbers[1], ".", numbers[2]);
  if (!pre.empty()) {
    absl::StrAppend(&out, "-", pre);
  }
  if (!build.empty()) {
    absl::StrAppend(&out, "+", build);
  }
  return out;
}

}  // namespace dralens::driver::slices
