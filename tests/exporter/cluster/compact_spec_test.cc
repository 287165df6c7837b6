#include "exporter/cluster/compact_spec.h"

#include <string>

#include "gtest/gtest.h"

namespace dralens::exporter::cluster {
namespace {

model::SliceDevice Gpu(const std::string& uuid) {
  model::SliceDevice d;
  d.name = "gpu-0";
  d.attributes["productName"] = model::DeviceAttribute::String("NVIDIA H200");
  d.attributes["uuid"] = model::DeviceAttribute::String(uuid);
  d.attributes["resource.kubernetes.io/pcieRoot"] = model::DeviceAttribute::String("pci0000:00");
  d.attributes["numaNode"] = model::DeviceAttribute::Int(1);
  d.attributes["driverVersion"] = model::DeviceAttribute::SemVer("580.159.4");
  d.capacity["memory"].value = common::Quantity::FromInt64(int64_t{143771} << 20);
  d.capacity["multiprocessors"].value = common::Quantity::FromInt64(132);
  return d;
}

TEST(CompactSpecTest, KeepsWhatSelectorsReadAndSharesNames) {
  NamePool names;
  const model::SliceDevice a = Gpu("GPU-a");
  const model::SliceDevice b = Gpu("GPU-b");
  const CompactSpec ca = CompactSpec::Of(a, names);
  const CompactSpec cb = CompactSpec::Of(b, names);
  EXPECT_EQ(names.size(), 7u);  // 5 attribute and 2 capacity names, once for both devices
  EXPECT_EQ(ca.attributes[0].first, cb.attributes[0].first);
  const SelectorMaps maps = SelectorMaps::Of(ca);
  EXPECT_EQ(maps.attributes, a.attributes);
  EXPECT_EQ(maps.capacity, a.capacity);
}

TEST(CompactSpecTest, SameComparesEveryKeptField) {
  NamePool names;
  const model::SliceDevice gpu = Gpu("GPU-a");
  const CompactSpec spec = CompactSpec::Of(gpu, names);
  EXPECT_TRUE(spec.Same(gpu));
  EXPECT_TRUE(spec.SameSelectorInput(gpu));

  model::SliceDevice tainted = gpu;
  tainted.taints.push_back({"gpu.dralens.dev/xid", "79", "NoSchedule", std::nullopt});
  EXPECT_FALSE(spec.Same(tainted));
  EXPECT_TRUE(spec.SameSelectorInput(tainted));  // taints are not what selectors read

  model::SliceDevice renamed = gpu;
  renamed.attributes["productName"] = model::DeviceAttribute::String("NVIDIA H100");
  EXPECT_FALSE(spec.SameSelectorInput(renamed));
  model::SliceDevice extra = gpu;
  extra.attributes["type"] = model::DeviceAttribute::String("gpu");
  EXPECT_FALSE(spec.SameSelectorInput(extra));
  model::SliceDevice smaller = gpu;
  smaller.capacity["memory"].value = common::Quantity::FromInt64(80);
  EXPECT_FALSE(spec.SameSelectorInput(smaller));

  model::SliceDevice shared = gpu;
  shared.allow_multiple_allocations = true;
  EXPECT_FALSE(spec.Same(shared));
  model::SliceDevice partitioned = gpu;
  partitioned.consumes_counters.push_back({"gpu-0-counter-set", {}});
  EXPECT_FALSE(spec.Same(partitioned));
}

TEST(CompactSpecTest, AttributesByUnqualifiedName) {
  NamePool names;
  const CompactSpec spec = CompactSpec::Of(Gpu("GPU-a"), names);
  EXPECT_EQ(spec.StringAttribute("pcieRoot"), "pci0000:00");  // published in a domain
  EXPECT_EQ(spec.StringAttribute("productName"), "NVIDIA H200");
  ASSERT_NE(spec.Attribute("numaNode"), nullptr);
  EXPECT_EQ(*spec.Attribute("numaNode")->AsInt(), 1);
  EXPECT_EQ(spec.StringAttribute("numaNode"), "");  // not a string
  EXPECT_EQ(spec.Attribute("Root"), nullptr);       // a suffix is not a name
  EXPECT_EQ(spec.Attribute("nvlinkDomain"), nullptr);
}

}  // namespace
}  // namespace dralens::exporter::cluster
