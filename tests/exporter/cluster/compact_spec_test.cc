#include "exporter/cluster/compact_spec.h"

#include <cstdint>
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
  const SelectorMaps maps = SelectorMaps::Of(ca);
  EXPECT_EQ(maps.attributes, a.attributes);
  EXPECT_EQ(maps.capacity, a.capacity);
  EXPECT_EQ(SelectorMaps::Of(cb).attributes, b.attributes);
  // Far less than the maps: the names are indexes, the values bytes.
  EXPECT_LT(ca.EncodedSize(), 80u);
}

TEST(CompactSpecTest, EveryValueKindRoundTrips) {
  NamePool names;
  model::SliceDevice d;
  d.attributes["negative"] = model::DeviceAttribute::Int(-7);
  d.attributes["min"] = model::DeviceAttribute::Int(INT64_MIN);
  d.attributes["max"] = model::DeviceAttribute::Int(INT64_MAX);
  d.attributes["zero"] = model::DeviceAttribute::Int(0);
  d.attributes["yes"] = model::DeviceAttribute::Bool(true);
  d.attributes["no"] = model::DeviceAttribute::Bool(false);
  d.attributes["empty"] = model::DeviceAttribute::String("");
  d.attributes["long"] = model::DeviceAttribute::String(std::string(300, 'x'));
  d.attributes["version"] = model::DeviceAttribute::SemVer("1.2.3-rc.1");
  d.capacity["milli"].value = *common::Quantity::Parse("1500m");
  d.capacity["binary"].value = *common::Quantity::Parse("80Gi");
  d.capacity["exponent"].value = *common::Quantity::Parse("12e6");
  model::CapacityRequestPolicy policy;
  policy.default_value = *common::Quantity::Parse("1Gi");
  d.capacity["shared"] = {*common::Quantity::Parse("80Gi"), policy};
  const CompactSpec spec = CompactSpec::Of(d, names);
  const SelectorMaps maps = SelectorMaps::Of(spec);
  EXPECT_EQ(maps.attributes, d.attributes);
  EXPECT_EQ(maps.capacity, d.capacity);
  EXPECT_TRUE(spec.Same(d));
  EXPECT_EQ(*spec.Attribute("min")->AsInt(), INT64_MIN);

  model::SliceDevice other_policy = d;
  other_policy.capacity["shared"].request_policy->default_value = *common::Quantity::Parse("2Gi");
  EXPECT_FALSE(spec.SameSelectorInput(other_policy));
  model::SliceDevice unknown_name = d;
  unknown_name.attributes["never-seen"] = model::DeviceAttribute::Bool(true);
  EXPECT_FALSE(spec.SameSelectorInput(unknown_name));
  EXPECT_EQ(names.Find("never-seen"), std::nullopt);  // a comparison interns nothing
  EXPECT_TRUE(CompactSpec().SameSelectorInput(model::SliceDevice{}));
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
  ASSERT_TRUE(spec.Attribute("numaNode").has_value());
  EXPECT_EQ(*spec.Attribute("numaNode")->AsInt(), 1);
  EXPECT_EQ(spec.StringAttribute("numaNode"), "");  // not a string
  EXPECT_EQ(spec.Attribute("Root"), std::nullopt);  // a suffix is not a name
  EXPECT_EQ(spec.Attribute("nvlinkDomain"), std::nullopt);
}

}  // namespace
}  // namespace dralens::exporter::cluster
