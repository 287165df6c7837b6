#include "src/fit/device_fit.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/cel/cel.h"
#include "src/common/quantity.h"

namespace dralens::fit {
namespace {

using model::DeviceTaint;
using model::DeviceToleration;

constexpr char kDriver[] = "gpu.dralens.dev";

common::Quantity Q(absl::string_view text) { return *common::Quantity::Parse(text); }

// A whole H100 as the node publishes it.
model::SliceDevice Gpu() {
  model::SliceDevice d;
  d.name = "gpu-0";
  d.attributes["type"] = model::DeviceAttribute::String("gpu");
  d.attributes["productName"] = model::DeviceAttribute::String("NVIDIA H100 80GB HBM3");
  d.capacity["memory"] = model::DeviceCapacity{Q("80Gi"), std::nullopt};
  return d;
}

// The verdict of `expressions` against `device`, compiled afresh (the callers cache).
cel::Verdict Judge(const std::vector<std::string>& expressions, const model::SliceDevice& device) {
  return AllOf(expressions.size(), [&](size_t i) {
    absl::StatusOr<cel::Program> program = cel::Program::Compile(expressions[i]);
    if (!program.ok()) {
      return cel::Verdict::kUnknown;
    }
    return program->Evaluate(cel::DeviceView{kDriver, &device.attributes, &device.capacity})
        .verdict;
  });
}

constexpr char kIsGpu[] = "device.attributes['gpu.dralens.dev'].type == 'gpu'";
constexpr char kIsMig[] = "device.attributes['gpu.dralens.dev'].type == 'mig'";
constexpr char kIsH100[] =
    "device.attributes['gpu.dralens.dev'].productName.startsWith('NVIDIA H100')";
// Regular expressions are outside the CEL subset: unknown.
constexpr char kOutsideSubset[] =
    "device.attributes['gpu.dralens.dev'].productName.matches('H1.*')";

DeviceTaint Taint(const std::string& key, const std::string& value, const std::string& effect) {
  return DeviceTaint{key, value, effect, std::nullopt};
}
DeviceToleration Toleration(const std::string& key, const std::string& op, const std::string& value,
                            const std::string& effect) {
  return DeviceToleration{key, op, value, effect, std::nullopt};
}

struct MatchCase {
  std::string name;
  std::vector<std::string> class_selectors;
  std::vector<std::string> request_selectors;
  std::vector<DeviceTaint> taints;
  std::vector<DeviceToleration> tolerations;
  Match want;
};

TEST(DeviceFitTest, SelectorsTaintsAndTolerations) {
  const DeviceTaint xid = Taint("gpu.dralens.dev/xid", "48", "NoSchedule");
  const std::vector<MatchCase> cases = {
      {"class selector false", {kIsMig}, {}, {}, {}, Match::kNoMatch},
      {"class selector true", {kIsGpu}, {}, {}, {}, Match::kMatch},
      {"class selector unknown", {kOutsideSubset}, {}, {}, {}, Match::kUnknown},
      {"class unknown, request false: the request is not consulted",
       {kOutsideSubset},
       {kIsMig},
       {},
       {},
       Match::kUnknown},
      {"class false beats unknown", {kOutsideSubset, kIsMig}, {}, {}, {}, Match::kNoMatch},
      {"request selector false", {kIsGpu}, {kIsMig}, {}, {}, Match::kNoMatch},
      {"request selector true", {kIsGpu}, {kIsH100}, {}, {}, Match::kMatch},
      {"request selector unknown", {kIsGpu}, {kOutsideSubset}, {}, {}, Match::kUnknown},
      {"selector false beats taint", {kIsMig}, {}, {xid}, {}, Match::kNoMatch},
      {"taint NoSchedule blocks", {kIsGpu}, {}, {xid}, {}, Match::kTainted},
      {"taint NoExecute blocks", {kIsGpu}, {}, {Taint("k", "v", "NoExecute")}, {}, Match::kTainted},
      {"taint None is ignored", {kIsGpu}, {}, {Taint("k", "v", "None")}, {}, Match::kMatch},
      {"toleration Exists with the key",
       {kIsGpu},
       {},
       {xid},
       {Toleration("gpu.dralens.dev/xid", "Exists", "", "")},
       Match::kMatch},
      {"toleration Exists without a key tolerates everything",
       {kIsGpu},
       {},
       {xid},
       {Toleration("", "Exists", "", "")},
       Match::kMatch},
      {"toleration Exists of another key",
       {kIsGpu},
       {},
       {xid},
       {Toleration("other", "Exists", "", "")},
       Match::kTainted},
      {"toleration Equal, same value",
       {kIsGpu},
       {},
       {xid},
       {Toleration("gpu.dralens.dev/xid", "Equal", "48", "")},
       Match::kMatch},
      {"toleration Equal by default",
       {kIsGpu},
       {},
       {xid},
       {Toleration("gpu.dralens.dev/xid", "", "48", "")},
       Match::kMatch},
      {"toleration Equal, other value",
       {kIsGpu},
       {},
       {xid},
       {Toleration("gpu.dralens.dev/xid", "Equal", "79", "")},
       Match::kTainted},
      {"toleration with the taint's effect",
       {kIsGpu},
       {},
       {xid},
       {Toleration("gpu.dralens.dev/xid", "Exists", "", "NoSchedule")},
       Match::kMatch},
      {"toleration with another effect",
       {kIsGpu},
       {},
       {xid},
       {Toleration("gpu.dralens.dev/xid", "Exists", "", "NoExecute")},
       Match::kTainted},
      {"one of two taints untolerated",
       {kIsGpu},
       {},
       {xid, Taint("k", "v", "NoExecute")},
       {Toleration("gpu.dralens.dev/xid", "Exists", "", "")},
       Match::kTainted},
  };
  for (const MatchCase& c : cases) {
    SCOPED_TRACE(c.name);
    model::SliceDevice device = Gpu();
    device.taints = c.taints;
    const Match got = MatchDevice([&] { return Judge(c.class_selectors, device); },
                                  [&] { return Judge(c.request_selectors, device); }, device.taints,
                                  c.tolerations);
    EXPECT_EQ(ToString(got), ToString(c.want));
  }
}

TEST(DeviceFitTest, UntoleratedTaintNamesTheFirstBlockingOne) {
  const std::vector<DeviceTaint> taints = {Taint("a", "", "None"), Taint("b", "1", "NoSchedule"),
                                           Taint("c", "", "NoExecute")};
  const DeviceTaint* t = UntoleratedTaint(taints, {});
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->key, "b");
  t = UntoleratedTaint(taints, {Toleration("b", "Exists", "", "")});
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->key, "c");
  EXPECT_EQ(UntoleratedTaint(taints, {Toleration("", "Exists", "", "")}), nullptr);
}

struct CounterCase {
  std::string name;
  std::vector<CounterConsumption> consumes;
  CounterFit want;
};

TEST(DeviceFitTest, SharedCounters) {
  // Set "gpu-0-counters" has 8 memory slices and 80 (Gi) of memory, of which 5 and 50 are used.
  const std::map<std::string, std::map<std::string, double>> capacity = {
      {"gpu-0-counters", {{"memory-slices", 8}, {"memory", 80}}}};
  const std::map<std::string, std::map<std::string, double>> used = {
      {"gpu-0-counters", {{"memory-slices", 5}, {"memory", 50}}}};
  auto left = [&](const std::string& set, const std::string& counter) -> std::optional<double> {
    auto c = capacity.find(set);
    if (c == capacity.end()) {
      return std::nullopt;
    }
    auto cap = c->second.find(counter);
    auto u = used.at(set).find(counter);
    return (cap == c->second.end() ? 0 : cap->second) - (u == used.at(set).end() ? 0 : u->second);
  };
  const std::vector<CounterCase> cases = {
      {"no counters", {}, CounterFit::kFits},
      {"counters fit",
       {{"gpu-0-counters", {{"memory-slices", 2}, {"memory", 20}}}},
       CounterFit::kFits},
      {"counters fit exactly",
       {{"gpu-0-counters", {{"memory-slices", 3}, {"memory", 30}}}},
       CounterFit::kFits},
      {"counters exceed",
       {{"gpu-0-counters", {{"memory-slices", 4}, {"memory", 20}}}},
       CounterFit::kExceeds},
      {"a counter the set lacks", {{"gpu-0-counters", {{"engines", 1}}}}, CounterFit::kExceeds},
      {"missing set", {{"gpu-9-counters", {{"memory-slices", 1}}}}, CounterFit::kMissingSet},
      {"missing set and a set exceeded",
       {{"gpu-9-counters", {{"memory-slices", 1}}}, {"gpu-0-counters", {{"memory", 40}}}},
       CounterFit::kExceeds},
  };
  for (const CounterCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(static_cast<int>(FitCounters(c.consumes, left)), static_cast<int>(c.want));
  }
}

TEST(DeviceFitTest, ConsumptionOfReadsThePublishedCounters) {
  model::SliceDevice d = Gpu();
  model::DeviceCounterConsumption c;
  c.counter_set = "gpu-0-counters";
  c.counters["memory"] = model::Counter{Q("10Gi")};
  d.consumes_counters.push_back(c);
  const std::vector<CounterConsumption> got = ConsumptionOf(d);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, "gpu-0-counters");
  EXPECT_DOUBLE_EQ(got[0].second.at("memory"), 10.0 * (1 << 30));
}

struct CapacityCase {
  std::string name;
  bool multi;                                         // allowMultipleAllocations
  std::map<std::string, common::Quantity> requested;  // empty: the whole device
  std::map<std::string, common::Quantity> used;
  bool want;
};

TEST(DeviceFitTest, ConsumableCapacity) {
  const std::vector<CapacityCase> cases = {
      {"share fits", true, {{"memory", Q("10Gi")}}, {{"memory", Q("60Gi")}}, true},
      {"share fits exactly", true, {{"memory", Q("20Gi")}}, {{"memory", Q("60Gi")}}, true},
      {"share exceeds", true, {{"memory", Q("30Gi")}}, {{"memory", Q("60Gi")}}, false},
      {"share of a capacity the device lacks", true, {{"cores", Q("1")}}, {}, false},
      {"share on a device without allowMultipleAllocations",
       false,
       {{"memory", Q("10Gi")}},
       {},
       false},
      {"whole device on a device with allowMultipleAllocations", true, {}, {}, false},
      {"whole device on a device without", false, {}, {}, true},
  };
  for (const CapacityCase& c : cases) {
    SCOPED_TRACE(c.name);
    model::SliceDevice device = Gpu();
    if (c.multi) {
      device.allow_multiple_allocations = true;
    }
    const bool share = !c.requested.empty();
    EXPECT_EQ(SharingFits(share, device) && CapacityFits(device, c.requested, c.used), c.want);
  }
}

}  // namespace
}  // namespace dralens::fit
