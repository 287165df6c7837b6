// SliceBuilder: names, attributes and capacities per the NVIDIA conventions, static MIG without
// double counting, deterministic output, limits and splitting, dynamic MIG layouts.
#include "driver/slices/slice_builder.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/model/codec.h"
#include "tests/driver/slices/slices_test_util.h"

namespace dralens::driver::slices {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace testing;  // NOLINT(build/namespaces): the helpers of this test folder

SliceBuilder Builder(SliceBuilderOptions options = {}) {
  return SliceBuilder({kNode, kNodeUid, kDriver}, options);
}

std::vector<model::ResourceSlice> BuildOk(const model::Inventory& inventory,
                                          SliceBuilderOptions options = {}) {
  absl::StatusOr<std::vector<model::ResourceSlice>> slices = Builder(options).Build(inventory);
  EXPECT_TRUE(slices.ok()) << slices.status();
  return slices.ok() ? *slices : std::vector<model::ResourceSlice>{};
}

int64_t CapacityValue(const model::SliceDevice& device, const std::string& name) {
  auto it = device.capacity.find(name);
  return it == device.capacity.end() ? -1 : it->second.value.Value();
}

TEST(SliceBuilderTest, DgxH100PublishesEightFullGpus) {
  const model::Inventory inventory = SimulatedInventory("dgx-h100");
  const std::vector<model::ResourceSlice> slices = BuildOk(inventory, {.pool_generation = 7});
  ASSERT_EQ(slices.size(), 1u);
  const model::ResourceSlice& slice = slices[0];

  EXPECT_EQ(slice.metadata.name, "");
  EXPECT_EQ(slice.metadata.generate_name, "node-a-gpu.dralens.dev-");
  EXPECT_EQ(slice.metadata.labels.at(kManagedByLabel), kManagedByValue);
  ASSERT_EQ(slice.metadata.owner_references.size(), 1u);
  const model::OwnerReference& owner = slice.metadata.owner_references[0];
  EXPECT_EQ(owner.api_version, "v1");
  EXPECT_EQ(owner.kind, "Node");
  EXPECT_EQ(owner.name, kNode);
  EXPECT_EQ(owner.uid, kNodeUid);
  EXPECT_EQ(owner.controller, true);

  EXPECT_EQ(slice.spec.driver, kDriver);
  EXPECT_EQ(slice.spec.node_name, std::optional<std::string>(kNode));
  EXPECT_EQ(slice.spec.pool.name, kNode);
  EXPECT_EQ(slice.spec.pool.generation, 7);
  EXPECT_EQ(slice.spec.pool.resource_slice_count, 1);
  EXPECT_TRUE(slice.spec.shared_counters.empty());

  EXPECT_THAT(DeviceNames(slices),
              ElementsAre("gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7"));
  for (const model::GpuInfo& gpu : inventory.gpus()) {
    SCOPED_TRACE(gpu.minor);
    const model::SliceDevice* d = FindDevice(slices, absl::StrCat("gpu-", gpu.minor));
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(StringAttr(*d, "type"), "gpu");
    EXPECT_EQ(StringAttr(*d, "uuid"), gpu.uuid);
    EXPECT_EQ(StringAttr(*d, "productName"), "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(StringAttr(*d, "brand"), gpu.brand);
    EXPECT_EQ(StringAttr(*d, "architecture"), "Hopper");
    EXPECT_EQ(VersionAttr(*d, "cudaComputeCapability"), "9.0.0");
    EXPECT_EQ(VersionAttr(*d, "driverVersion"), "550.163.1");
    EXPECT_EQ(VersionAttr(*d, "cudaDriverVersion"), "12.4.0");
    EXPECT_EQ(StringAttr(*d, kPciBusIdAttribute), gpu.pci_bus_id);
    EXPECT_FALSE(gpu.pci_bus_id.empty());
    EXPECT_EQ(StringAttr(*d, kPcieRootAttribute), gpu.pcie_root);
    ASSERT_TRUE(gpu.numa_node.has_value());
    ASSERT_TRUE(d->attributes.contains(kNumaNodeAttribute));
    EXPECT_EQ(*d->attributes.at(kNumaNodeAttribute).AsInt(), *gpu.numa_node);
    ASSERT_TRUE(d->capacity.contains("memory"));
    EXPECT_EQ(d->capacity.at("memory").value.Value(), int64_t(gpu.memory_bytes));
    EXPECT_EQ(d->capacity.at("memory").value.format(), common::Quantity::Format::kBinarySI);
    EXPECT_EQ(d->capacity.size(), 1u);
    EXPECT_TRUE(d->consumes_counters.empty());
  }
}

TEST(SliceBuilderTest, A100PublishesAmpereAttributes) {
  const model::Inventory inventory = SimulatedInventory("a100-40gb");
  const std::vector<model::ResourceSlice> slices = BuildOk(inventory);
  ASSERT_EQ(slices.size(), 1u);
  ASSERT_EQ(slices[0].spec.devices.size(), 8u);
  const model::SliceDevice* d = FindDevice(slices, "gpu-3");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(StringAttr(*d, "productName"), "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(StringAttr(*d, "architecture"), "Ampere");
  EXPECT_EQ(VersionAttr(*d, "cudaComputeCapability"), "8.0.0");
  EXPECT_EQ(CapacityValue(*d, "memory"), int64_t(inventory.gpus()[3].memory_bytes));
  EXPECT_EQ(d->capacity.at("memory").value.String(), "40Gi");
}

TEST(SliceBuilderTest, MixedPublishesStaticMigWithoutDoubleCounting) {
  const model::Inventory inventory = SimulatedInventory("mixed");
  const std::vector<model::ResourceSlice> slices = BuildOk(inventory);
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_THAT(DeviceNames(slices),
              ElementsAre("gpu-0-mig-3g40gb-9-0", "gpu-0-mig-2g20gb-14-4", "gpu-0-mig-1g10gb-19-6",
                          "gpu-1-mig-1g10gb-19-0", "gpu-1-mig-1g10gb-19-1", "gpu-1-mig-1g10gb-19-2",
                          "gpu-1-mig-1g10gb-19-3", "gpu-1-mig-1g10gb-19-4", "gpu-1-mig-1g10gb-19-5",
                          "gpu-1-mig-1g10gb-19-6", "gpu-3-mig-1g20gb-15-0", "gpu-3-mig-1g20gb-15-2",
                          "gpu-4", "gpu-5", "gpu-6", "gpu-7"));

  // Every GPU in MIG mode is absent as a full GPU; GPU 2 (MIG mode, no devices) publishes nothing.
  for (const model::GpuInfo& gpu : inventory.gpus()) {
    EXPECT_EQ(FindDevice(slices, absl::StrCat("gpu-", gpu.minor)) == nullptr, gpu.mig_enabled())
        << gpu.minor;
  }
  // Every UUID (GPU or MIG) appears once; each MIG device's memory slices are disjoint per GPU.
  std::set<std::string> uuids;
  std::set<std::string> parent_slices;
  for (const model::SliceDevice& d : slices[0].spec.devices) {
    EXPECT_TRUE(uuids.insert(StringAttr(d, "uuid")).second) << d.name;
    if (StringAttr(d, "type") != "mig") {
      continue;
    }
    for (const auto& [name, capacity] : d.capacity) {
      if (absl::StartsWith(name, "memorySlice")) {
        EXPECT_TRUE(parent_slices.insert(StringAttr(d, "parentUUID") + "/" + name).second)
            << d.name << " " << name;
      }
    }
  }

  const model::GpuInfo& gpu0 = inventory.gpus()[0];
  const model::MigDevice* mig = inventory.MigDevicesOf(gpu0.uuid)[0];
  const model::SliceDevice* d = FindDevice(slices, "gpu-0-mig-3g40gb-9-0");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(StringAttr(*d, "type"), "mig");
  EXPECT_EQ(StringAttr(*d, "uuid"), mig->uuid);
  EXPECT_TRUE(absl::StartsWith(mig->uuid, "MIG-"));
  EXPECT_EQ(StringAttr(*d, "parentUUID"), gpu0.uuid);
  EXPECT_EQ(StringAttr(*d, "profile"), "3g.40gb");
  EXPECT_EQ(StringAttr(*d, "productName"), gpu0.product_name);
  EXPECT_EQ(StringAttr(*d, "architecture"), "Hopper");
  EXPECT_EQ(VersionAttr(*d, "cudaComputeCapability"), "9.0.0");
  EXPECT_EQ(VersionAttr(*d, "driverVersion"), "550.163.1");
  EXPECT_EQ(StringAttr(*d, kPciBusIdAttribute), gpu0.pci_bus_id);
  EXPECT_EQ(*d->attributes.at(kNumaNodeAttribute).AsInt(), *gpu0.numa_node);
  EXPECT_EQ(CapacityValue(*d, "multiprocessors"), mig->profile.multiprocessors);
  EXPECT_EQ(CapacityValue(*d, "copyEngines"), mig->profile.copy_engines);
  EXPECT_EQ(CapacityValue(*d, "decoders"), mig->profile.decoders);
  EXPECT_EQ(CapacityValue(*d, "encoders"), mig->profile.encoders);
  EXPECT_EQ(CapacityValue(*d, "jpegEngines"), mig->profile.jpegs);
  EXPECT_EQ(CapacityValue(*d, "ofaEngines"), mig->profile.ofas);
  EXPECT_EQ(CapacityValue(*d, "memory"), int64_t(mig->profile.memory_bytes()));
  EXPECT_GT(mig->profile.multiprocessors, 0u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(CapacityValue(*d, absl::StrCat("memorySlice", i)), i < 4 ? 1 : -1) << i;
  }
  EXPECT_EQ(d->attributes.size() + d->capacity.size(), 13u + 7u + 4u);
  EXPECT_FALSE(d->attributes.contains("index"));
}

TEST(SliceBuilderTest, OutputIsDeterministic) {
  for (const char* profile : {"dgx-h100", "a100-40gb", "mixed"}) {
    SCOPED_TRACE(profile);
    const auto a = BuildOk(SimulatedInventory(profile));
    const auto b = BuildOk(SimulatedInventory(profile));
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(a, b);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(model::EncodeText(a[i]), model::EncodeText(b[i]));
    }
  }
}

TEST(SliceBuilderTest, EmptyInventoryHasNoSlices) {
  EXPECT_TRUE(BuildOk(model::Inventory()).empty());
}

TEST(SliceBuilderTest, NoNodeUidLeavesOwnerReferenceOut) {
  auto slices = SliceBuilder({kNode, "", kDriver}, {}).Build(SimulatedInventory("dgx-h100"));
  ASSERT_TRUE(slices.ok()) << slices.status();
  EXPECT_TRUE((*slices)[0].metadata.owner_references.empty());
}

TEST(SliceBuilderTest, SplitsAt128Devices) {
  const std::vector<model::ResourceSlice> slices =
      BuildOk(BigInventory(300), {.pool_generation = 4});
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[0].spec.devices.size(), 128u);
  EXPECT_EQ(slices[1].spec.devices.size(), 128u);
  EXPECT_EQ(slices[2].spec.devices.size(), 44u);
  for (const model::ResourceSlice& s : slices) {
    EXPECT_EQ(s.spec.pool.resource_slice_count, 3);
    EXPECT_EQ(s.spec.pool.generation, 4);
    EXPECT_EQ(s.spec.pool.name, kNode);
  }
  const std::vector<std::string> names = DeviceNames(slices);
  ASSERT_EQ(names.size(), 300u);
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(names[i], absl::StrCat("gpu-", i));
  }
  EXPECT_EQ(BuildOk(BigInventory(128)).size(), 1u);
  EXPECT_EQ(BuildOk(BigInventory(129)).size(), 2u);
}

// A MIG-capable GPU whose board offers `profiles` one-slice profiles at all 8 placements: many
// dynamic MIG devices on one GPU.
model::Inventory ManyPlacementsInventory(int profiles) {
  model::GpuInfo gpu = PlainGpu(0);
  gpu.mig_capable = true;
  gpu.memory_slices = 8;
  for (int p = 0; p < profiles; ++p) {
    model::MigProfile profile;
    profile.name = absl::StrCat("1g.", p + 1, "gb");
    profile.gi_profile_index = p;
    profile.gi_profile_id = 30 + p;
    profile.gpu_slices = 1;
    profile.memory_slices = 1;
    profile.instance_count = 8;
    profile.memory_mib = 1024;
    profile.multiprocessors = 16;
    profile.copy_engines = 1;
    for (uint32_t start = 0; start < 8; ++start) {
      profile.placements.push_back({start, 1});
    }
    gpu.mig_profiles.push_back(profile);
  }
  auto inventory = model::Inventory::Create("550.163.01", "12.4", {gpu}, {});
  EXPECT_TRUE(inventory.ok()) << inventory.status();
  return inventory.ok() ? *inventory : model::Inventory();
}

TEST(SliceBuilderTest, SplitsAt64DevicesWhenDevicesConsumeCounters) {
  // 10 profiles x 8 placements + the full GPU = 81 devices consuming counters.
  const model::Inventory inventory = ManyPlacementsInventory(10);
  const std::vector<model::ResourceSlice> slices =
      BuildOk(inventory, {.dynamic_mig = true, .api_minor = 35});
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_TRUE(slices[0].spec.devices.empty());
  ASSERT_EQ(slices[0].spec.shared_counters.size(), 1u);
  EXPECT_EQ(slices[1].spec.devices.size(), 64u);
  EXPECT_EQ(slices[2].spec.devices.size(), 17u);
  for (const model::ResourceSlice& s : slices) {
    EXPECT_EQ(s.spec.pool.resource_slice_count, 3);
  }
  // 1.34 cannot split one GPU's devices away from its counters.
  auto too_many = Builder({.dynamic_mig = true, .api_minor = 34}).Build(inventory);
  EXPECT_FALSE(too_many.ok());
}

TEST(SliceBuilderTest, UpTo64CounterDevicesFitOneCombinedSlice) {
  // 7 profiles x 8 placements + the full GPU = 57 devices: one 1.34 slice with its counters.
  const model::Inventory inventory = ManyPlacementsInventory(7);
  const auto slices = BuildOk(inventory, {.dynamic_mig = true, .api_minor = 34});
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0].spec.devices.size(), 57u);
  EXPECT_EQ(slices[0].spec.shared_counters.size(), 1u);
}

TEST(SliceBuilderTest, DynamicMigCombinedOn134) {
  const model::Inventory inventory = SimulatedInventory("dgx-h100");
  const auto slices = BuildOk(inventory, {.dynamic_mig = true, .api_minor = 34});
  ASSERT_EQ(slices.size(), 8u);
  for (size_t i = 0; i < slices.size(); ++i) {
    SCOPED_TRACE(i);
    const model::ResourceSlice& s = slices[i];
    EXPECT_EQ(s.spec.pool.resource_slice_count, 8);
    ASSERT_EQ(s.spec.shared_counters.size(), 1u);
    const model::CounterSet& set = s.spec.shared_counters[0];
    EXPECT_EQ(set.name, absl::StrCat("gpu-", i, "-counter-set"));
    EXPECT_EQ(set.counters.size(), 7u + 8u);
    EXPECT_EQ(set.counters.at("memory-slice-7").value.Value(), 1);
    ASSERT_GT(s.spec.devices.size(), 1u);
    EXPECT_LE(s.spec.devices.size(), kMaxDevicesPerSliceWithCounters);
    const model::SliceDevice& full = s.spec.devices[0];
    EXPECT_EQ(full.name, absl::StrCat("gpu-", i));
    EXPECT_EQ(StringAttr(full, "type"), "gpu");
    ASSERT_EQ(full.consumes_counters.size(), 1u);
    EXPECT_EQ(full.consumes_counters[0].counter_set, set.name);
    EXPECT_EQ(full.consumes_counters[0].counters, set.counters);
    EXPECT_EQ(CapacityValue(full, "multiprocessors"),
              set.counters.at("multiprocessors").value.Value());
    for (size_t j = 1; j < s.spec.devices.size(); ++j) {
      const model::SliceDevice& d = s.spec.devices[j];
      EXPECT_EQ(StringAttr(d, "type"), "mig") << d.name;
      EXPECT_FALSE(d.attributes.contains("uuid")) << d.name;
      EXPECT_EQ(StringAttr(d, "parentUUID"), inventory.gpus()[i].uuid);
      ASSERT_EQ(d.consumes_counters.size(), 1u);
      for (const auto& [name, counter] : d.consumes_counters[0].counters) {
        ASSERT_TRUE(set.counters.contains(name)) << d.name << " " << name;
        EXPECT_LE(counter.value, set.counters.at(name).value) << d.name << " " << name;
      }
    }
  }
  const model::SliceDevice* d = FindDevice(slices, "gpu-2-mig-3g40gb-9-4");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(StringAttr(*d, "profile"), "3g.40gb");
  const auto& counters = d->consumes_counters[0].counters;
  EXPECT_EQ(counters.count("memory-slice-3"), 0u);
  for (int i = 4; i < 8; ++i) {
    EXPECT_EQ(counters.at(absl::StrCat("memory-slice-", i)).value.Value(), 1);
  }
  EXPECT_NE(FindDevice(slices, "gpu-0-mig-1g10gb-19-6"), nullptr);
  EXPECT_NE(FindDevice(slices, "gpu-0-mig-7g80gb-0-0"), nullptr);
}

TEST(SliceBuilderTest, DynamicMigSplitOn135) {
  const auto combined =
      BuildOk(SimulatedInventory("dgx-h100"), {.dynamic_mig = true, .api_minor = 34});
  const auto split =
      BuildOk(SimulatedInventory("dgx-h100"), {.dynamic_mig = true, .api_minor = 35});
  ASSERT_EQ(split.size(), 16u);
  for (size_t i = 0; i < split.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(split[i].spec.pool.resource_slice_count, 16);
    if (i % 2 == 0) {
      EXPECT_TRUE(split[i].spec.devices.empty());
      ASSERT_EQ(split[i].spec.shared_counters.size(), 1u);
      EXPECT_EQ(split[i].spec.shared_counters, combined[i / 2].spec.shared_counters);
    } else {
      EXPECT_TRUE(split[i].spec.shared_counters.empty());
      EXPECT_EQ(split[i].spec.devices, combined[i / 2].spec.devices);
    }
  }
}

TEST(SliceBuilderTest, DynamicMigLeavesNonMigCapableGpusPlain) {
  model::Inventory inventory = BigInventory(3);
  const auto slices = BuildOk(inventory, {.dynamic_mig = true, .api_minor = 35});
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_THAT(DeviceNames(slices), ElementsAre("gpu-0", "gpu-1", "gpu-2"));
  EXPECT_TRUE(slices[0].spec.shared_counters.empty());
}

TEST(SliceBuilderTest, OverLongStringIsAnErrorNamingTheAttribute) {
  model::GpuInfo gpu = PlainGpu(0);
  gpu.product_name = std::string(65, 'x');
  auto inventory = model::Inventory::Create("550.163.01", "12.4", {gpu}, {});
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  auto slices = Builder().Build(*inventory);
  ASSERT_FALSE(slices.ok());
  EXPECT_EQ(slices.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(slices.status().message(), HasSubstr("device gpu-0: attribute productName"));
  EXPECT_THAT(slices.status().message(), HasSubstr("65 bytes"));

  gpu.product_name = std::string(64, 'x');
  inventory = model::Inventory::Create("550.163.01", "12.4", {gpu}, {});
  ASSERT_TRUE(inventory.ok());
  EXPECT_TRUE(Builder().Build(*inventory).ok());
}

TEST(SliceBuilderTest, BadVersionIsAnError) {
  auto inventory = model::Inventory::Create("R550", "12.4", {PlainGpu(0)}, {});
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  auto slices = Builder().Build(*inventory);
  ASSERT_FALSE(slices.ok());
  EXPECT_THAT(slices.status().message(), HasSubstr("driverVersion"));
}

TEST(SliceBuilderTest, NormalizeSemVer) {
  EXPECT_EQ(*NormalizeSemVer("550.163.01"), "550.163.1");
  EXPECT_EQ(*NormalizeSemVer("12.4"), "12.4.0");
  EXPECT_EQ(*NormalizeSemVer("9"), "9.0.0");
  EXPECT_EQ(*NormalizeSemVer("v1.2.3"), "1.2.3");
  EXPECT_EQ(*NormalizeSemVer("1.2.3-rc.1+build.5"), "1.2.3-rc.1+build.5");
  for (const char* bad : {"", "1.2.3.4", "a.b", "1..2", "1.2-", "1.2+", "1.2-r c"}) {
    EXPECT_FALSE(NormalizeSemVer(bad).ok()) << bad;
  }
}

TEST(SliceBuilderTest, PartialComputeInstancesGetDistinctNames) {
  model::MigDevice device;
  device.parent_minor = 2;
  device.profile.name = "2g.20gb";
  device.profile.gi_profile_id = 14;
  device.profile.gpu_slices = 2;
  device.placement = {4, 2};
  device.ci_slices = 2;
  EXPECT_EQ(MigDeviceName(device), "gpu-2-mig-2g20gb-14-4");
  device.ci_slices = 1;
  device.ci_id = 1;
  EXPECT_THAT(MigDeviceName(device), ::testing::EndsWith("-14-4-ci1"));
}

TEST(SliceBuilderTest, TaintsGoOnTheNamedDevicesAndKeepTheirSlicesSmall) {
  model::DeviceTaint xid{.key = "gpu.dralens.dev/xid",
                         .value = "48",
                         .effect = "NoSchedule",
                         .time_added = absl::FromUnixSeconds(1700000000)};
  SliceBuilderOptions options;
  options.taints = {{"gpu-2", {xid}}, {"gpu-no-such-device", {xid}}};
  const auto slices = BuildOk(SimulatedInventory("dgx-h100"), options);
  ASSERT_EQ(slices.size(), 1u);
  for (const model::SliceDevice& d : slices[0].spec.devices) {
    if (d.name == "gpu-2") {
      ASSERT_EQ(d.taints.size(), 1u);
      EXPECT_EQ(d.taints[0], xid);
    } else {
      EXPECT_TRUE(d.taints.empty()) << d.name;
    }
  }
  // With a tainted device among them, 100 GPUs no longer fit one slice of 128: the slice
  // holding the tainted device stays within 64.
  options.taints = {{"gpu-0", {xid}}};
  const auto big = BuildOk(BigInventory(100), options);
  ASSERT_GE(big.size(), 2u);
  for (const model::ResourceSlice& slice : big) {
    bool tainted = false;
    for (const model::SliceDevice& d : slice.spec.devices) {
      tainted = tainted || !d.taints.empty();
    }
    if (tainted) {
      EXPECT_LE(slice.spec.devices.size(), kMaxDevicesPerSliceWithCounters);
    }
  }
}

}  // namespace
}  // namespace dralens::driver::slices
