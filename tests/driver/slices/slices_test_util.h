// Helpers for the slice tests: simulated inventories, synthetic big ones, and lookups.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "driver/discovery/device_source.h"
#include "gtest/gtest.h"
#include "src/model/inventory.h"
#include "src/model/resource.h"

namespace dralens::driver::slices::testing {

inline constexpr char kNode[] = "node-a";
inline constexpr char kDriver[] = "gpu.dralens.dev";
inline constexpr char kNodeUid[] = "2d1b4c3e-0000-4000-8000-000000000001";

// The inventory of a built-in simulated profile ("dgx-h100", "a100-40gb", "mixed").
inline model::Inventory SimulatedInventory(const std::string& profile,
                                           const std::string& node = kNode) {
  auto source = discovery::MakeDeviceSource("simulated", profile, node);
  EXPECT_TRUE(source.ok()) << source.status();
  if (!source.ok()) {
    return model::Inventory();
  }
  auto inventory = (*source)->Discover();
  EXPECT_TRUE(inventory.ok()) << inventory.status();
  return inventory.ok() ? *inventory : model::Inventory();
}

// A plain (non-MIG) GPU with minor `minor`.
inline model::GpuInfo PlainGpu(uint32_t minor) {
  model::GpuInfo gpu;
  gpu.minor = minor;
  gpu.index = minor;
  gpu.uuid = absl::StrFormat("GPU-%08x-0000-4000-8000-000000000000", minor);
  gpu.product_name = "NVIDIA H100 80GB HBM3";
  gpu.brand = "Nvidia";
  gpu.architecture = "Hopper";
  gpu.cuda_compute_major = 9;
  gpu.cuda_compute_minor = 0;
  gpu.memory_bytes = uint64_t{81559} << 20;
  gpu.pci_bus_id = absl::StrFormat("0000:%02x:00.0", minor % 256);
  gpu.numa_node = 0;
  return gpu;
}

// `count` plain GPUs.
inline model::Inventory BigInventory(uint32_t count) {
  std::vector<model::GpuInfo> gpus;
  for (uint32_t i = 0; i < count; ++i) {
    gpus.push_back(PlainGpu(i));
  }
  auto inventory = model::Inventory::Create("550.163.01", "12.4", std::move(gpus), {});
  EXPECT_TRUE(inventory.ok()) << inventory.status();
  return inventory.ok() ? *inventory : model::Inventory();
}

inline const model::SliceDevice* FindDevice(const std::vector<model::ResourceSlice>& slices,
                                            const std::string& name) {
  for (const model::ResourceSlice& slice : slices) {
    for (const model::SliceDevice& device : slice.spec.devices) {
      if (device.name == name) {
        return &device;
      }
    }
  }
  return nullptr;
}

inline std::vector<std::string> DeviceNames(const std::vector<model::ResourceSlice>& slices) {
  std::vector<std::string> names;
  for (const model::ResourceSlice& slice : slices) {
    for (const model::SliceDevice& device : slice.spec.devices) {
      names.push_back(device.name);
    }
  }
  return names;
}

inline std::string StringAttr(const model::SliceDevice& device, const std::string& name) {
  auto it = device.attributes.find(name);
  if (it == device.attributes.end()) {
    return "<missing>";
  }
  if (const std::string* s = it->second.AsString()) {
    return *s;
  }
  return "<not a string>";
}

inline std::string VersionAttr(const model::SliceDevice& device, const std::string& name) {
  auto it = device.attributes.find(name);
  if (it == device.attributes.end()) {
    return "<missing>";
  }
  if (const std::string* s = it->second.AsVersion()) {
    return *s;
  }
  return "<not a version>";
}

}  // namespace dralens::driver::slices::testing
