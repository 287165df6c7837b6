// The nvlinkDomain attribute: on full GPUs with NVLink, whole or partitionable; never on MIG
// devices, static or dynamic; never on GPUs without NVLink.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/slices/slice_builder.h"
#include "gtest/gtest.h"
#include "tests/driver/slices/slices_test_util.h"

namespace dralens::driver::slices {
namespace {

using namespace testing;  // NOLINT(build/namespaces): the helpers of this test folder

std::vector<model::ResourceSlice> Build(const model::Inventory& inventory,
                                        SliceBuilderOptions options = {}) {
  auto slices = SliceBuilder({kNode, kNodeUid, kDriver}, options).Build(inventory);
  EXPECT_TRUE(slices.ok()) << slices.status();
  return slices.ok() ? *slices : std::vector<model::ResourceSlice>{};
}

// Device name -> nvlinkDomain ("<missing>" without one).
std::map<std::string, std::string> Domains(const std::vector<model::ResourceSlice>& slices) {
  std::map<std::string, std::string> out;
  for (const model::ResourceSlice& slice : slices) {
    for (const model::SliceDevice& device : slice.spec.devices) {
      out[device.name] = StringAttr(device, kNvlinkDomainAttribute);
    }
  }
  return out;
}

TEST(SliceNvLinkTest, EveryGpuOfAnNvSwitchNodeCarriesTheOneDomain) {
  const model::Inventory inventory = SimulatedInventory("dgx-h100");
  const std::string domain = inventory.gpus()[0].nvlink_domain;
  ASSERT_FALSE(domain.empty());
  const auto domains = Domains(Build(inventory));
  ASSERT_EQ(domains.size(), 8u);
  for (const auto& [name, value] : domains) {
    EXPECT_EQ(value, domain) << name;
  }
}

TEST(SliceNvLinkTest, GpusWithoutNvLinkCarryNone) {
  for (const auto& [name, value] : Domains(Build(SimulatedInventory("a100-40gb")))) {
    EXPECT_EQ(value, "<missing>") << name;
  }
}

TEST(SliceNvLinkTest, StaticMigDevicesCarryNoneTheirFullNeighboursDo) {
  const model::Inventory inventory = SimulatedInventory("mixed");
  const std::string domain = inventory.gpus()[0].nvlink_domain;
  ASSERT_FALSE(domain.empty());
  int full = 0, mig = 0;
  for (const model::ResourceSlice& slice : Build(inventory)) {
    for (const model::SliceDevice& device : slice.spec.devices) {
      if (StringAttr(device, "type") == "mig") {
        ++mig;
        EXPECT_EQ(StringAttr(device, kNvlinkDomainAttribute), "<missing>") << device.name;
        // Its other topology attributes are the parent's, as the NVIDIA driver publishes them.
        EXPECT_NE(StringAttr(device, kPcieRootAttribute), "<missing>") << device.name;
      } else {
        ++full;
        EXPECT_EQ(StringAttr(device, kNvlinkDomainAttribute), domain) << device.name;
      }
    }
  }
  EXPECT_EQ(full, 4);
  EXPECT_EQ(mig, 12);
}

TEST(SliceNvLinkTest, PartitionableGpusCarryItTheirPlacementsDoNot) {
  const model::Inventory inventory = SimulatedInventory("h100x2");
  const std::string domain = inventory.gpus()[0].nvlink_domain;
  ASSERT_FALSE(domain.empty());
  for (int api_minor : {34, 35}) {
    const auto domains = Domains(Build(inventory, {.dynamic_mig = true, .api_minor = api_minor}));
    for (const model::GpuInfo& gpu : inventory.gpus()) {
      EXPECT_EQ(domains.at(absl::StrCat("gpu-", gpu.minor)), domain) << api_minor;
    }
    int placements = 0;
    for (const auto& [name, value] : domains) {
      if (name.find("-mig-") != std::string::npos) {
        ++placements;
        EXPECT_EQ(value, "<missing>") << name;
      }
    }
    EXPECT_GT(placements, 0);
  }
}

TEST(SliceNvLinkTest, AFabricDomainIsPublishedAsIs) {
  model::GpuInfo gpu = PlainGpu(0);
  gpu.nvlink_domain = "3f2a0001-abcd-4000-8000-123456789abc.4294967295";  // the longest clique
  auto inventory = model::Inventory::Create("550.163.01", "12.4", {gpu}, {});
  ASSERT_TRUE(inventory.ok());
  EXPECT_EQ(Domains(Build(*inventory)).at("gpu-0"), gpu.nvlink_domain);
}

}  // namespace
}  // namespace dralens::driver::slices
