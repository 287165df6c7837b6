// A small simulated node for the health tests: GPU 0 in MIG mode with three MIG devices
// (3g.40gb@0, 1g.10gb@4, 1g.10gb@5), GPUs 1 and 2 full.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "driver/discovery/simulated/simulated_device_source.h"
#include "driver/slices/slice_builder.h"
#include "src/model/inventory.h"

namespace dralens::driver::health::testing {

inline discovery::SimulatedProfile SmallProfile(const std::string& name = "health-small") {
  discovery::SimulatedProfile profile;
  profile.name = name;
  discovery::SimulatedGpuSpec mig;
  mig.board = "h100-80gb";
  mig.mig_enabled = true;
  mig.mig_devices = {{"3g.40gb", 0}, {"1g.10gb", 4}, {"1g.10gb", 5}};
  profile.gpus.push_back(mig);
  discovery::SimulatedGpuSpec full;
  full.board = "h100-80gb";
  profile.gpus.push_back(full);
  profile.gpus.push_back(full);
  return profile;
}

inline std::unique_ptr<discovery::SimulatedDeviceSource> MakeSource(
    const std::string& node = "node-a", const std::string& profile = "health-small") {
  auto source = discovery::SimulatedDeviceSource::Create(SmallProfile(profile), node);
  EXPECT_TRUE(source.ok()) << source.status();
  return source.ok() ? std::move(source).value() : nullptr;
}

inline model::Inventory Discover(discovery::DeviceSource& source) {
  auto inventory = source.Discover();
  EXPECT_TRUE(inventory.ok()) << inventory.status();
  return inventory.ok() ? *inventory : model::Inventory();
}

}  // namespace dralens::driver::health::testing
