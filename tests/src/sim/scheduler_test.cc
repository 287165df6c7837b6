// The demo's scheduler stand-in: it places by device_fit's rules (tolerations included), never
// gives a device twice, and gives it back on Release.
#include "src/sim/scheduler.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/common/clock.h"
#include "src/model/codec.h"
#include "src/sim/workload.h"
#include "tests/testing/fake_kube_client.h"

namespace dralens::sim {
namespace {

using nlohmann::json;

constexpr char kDriver[] = "gpu.dralens.dev";

common::Quantity Q(absl::string_view text) { return *common::Quantity::Parse(text); }

model::SliceDevice Device(const std::string& name, const std::string& type) {
  model::SliceDevice d;
  d.name = name;
  d.attributes["type"] = model::DeviceAttribute::String(type);
  d.capacity["memory"] = model::DeviceCapacity{Q("80Gi"), std::nullopt};
  return d;
}

// One node's pool: a whole GPU tainted NoSchedule (Xid 48), an untainted one, a GPU published
// for memory shares (allowMultipleAllocations), and a MIG device on a counter set with room
// for one.
Scheduler::View NodeView() {
  Scheduler::View view;
  for (const json& c : WorkloadDeviceClasses(kDriver)) {
    absl::StatusOr<model::DeviceClass> decoded = model::Decode<model::DeviceClass>(c);
    EXPECT_TRUE(decoded.ok()) << decoded.status();
    view.classes.emplace(decoded->metadata.name, *decoded);
  }
  model::ResourceSlice slice;
  slice.spec.driver = kDriver;
  slice.spec.pool.name = "node-0";
  model::SliceDevice tainted = Device("gpu-0", "gpu");
  tainted.taints.push_back({"gpu.dralens.dev/xid", "48", "NoSchedule", std::nullopt});
  slice.spec.devices.push_back(tainted);
  slice.spec.devices.push_back(Device("gpu-1", "gpu"));
  model::SliceDevice shared = Device("gpu-2", "gpu");
  shared.allow_multiple_allocations = true;
  slice.spec.devices.push_back(shared);
  model::SliceDevice mig = Device("gpu-3-mig-1g", "mig");
  model::DeviceCounterConsumption consumes;
  consumes.counter_set = "gpu-3-counters";
  consumes.counters["memory-slices"] = model::Counter{Q("1")};
  mig.consumes_counters.push_back(consumes);
  slice.spec.devices.push_back(mig);
  view.counter_capacity["node-0/gpu-3-counters/memory-slices"] = Q("1");
  view.slices.push_back(slice);
  return view;
}

model::ExactDeviceRequest Request(const std::string& device_class) {
  model::ExactDeviceRequest r;
  r.device_class_name = device_class;
  return r;
}

std::vector<std::string> Names(const std::vector<Placement>& placements) {
  std::vector<std::string> out;
  for (const Placement& p : placements) {
    out.push_back(p.device);
  }
  return out;
}

class SchedulerTest : public ::testing::Test {
 protected:
  testing::FakeKubeClient client_;
  Scheduler scheduler_{kDriver, client_, common::RealClock()};
  const Scheduler::View view_ = NodeView();
};

TEST_F(SchedulerTest, AnUntoleratedTaintKeepsAWholeGpuOut) {
  EXPECT_EQ(Names(scheduler_.Fit(Request(kDriver), view_)), std::vector<std::string>{"gpu-1"});
}

TEST_F(SchedulerTest, ATolerationLetsTheRequestOntoTheTaintedGpu) {
  model::ExactDeviceRequest r = Request(kDriver);
  r.tolerations.push_back({"gpu.dralens.dev/xid", "Exists", "", "NoSchedule", std::nullopt});
  EXPECT_EQ(Names(scheduler_.Fit(r, view_)), (std::vector<std::string>{"gpu-0", "gpu-1"}));
  r.tolerations = {{"gpu.dralens.dev/xid", "Equal", "79", "", std::nullopt}};  // another Xid
  EXPECT_EQ(Names(scheduler_.Fit(r, view_)), std::vector<std::string>{"gpu-1"});
}

TEST_F(SchedulerTest, SharesGoOnlyToDevicesThatAllowSeveralAllocations) {
  model::ExactDeviceRequest r = Request(kDriver);
  r.capacity = model::CapacityRequirements{{{"memory", Q("10Gi")}}};
  const std::vector<Placement> fits = scheduler_.Fit(r, view_);
  ASSERT_EQ(Names(fits), std::vector<std::string>{"gpu-2"});
  EXPECT_EQ(fits[0].share.at("memory"), Q("10Gi"));
  r.capacity = model::CapacityRequirements{{{"memory", Q("81Gi")}}};  // more than it has
  EXPECT_TRUE(scheduler_.Fit(r, view_).empty());
}

TEST_F(SchedulerTest, ClassSelectorsAndCounters) {
  const std::string mig = "mig.dralens.dev";
  EXPECT_EQ(Names(scheduler_.Fit(Request(mig), view_)), std::vector<std::string>{"gpu-3-mig-1g"});
  // A counter set the pool does not publish: the scheduler refuses the device.
  Scheduler::View missing = view_;
  missing.counter_capacity.clear();
  EXPECT_TRUE(scheduler_.Fit(Request(mig), missing).empty());
}

TEST_F(SchedulerTest, AllocatesOnceAndReleases) {
  for (const char* name : {"a", "b"}) {
    json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"name", name}, {"namespace", "demo"}}},
                  {"spec",
                   {{"devices",
                     {{"requests",
                       json::array({{{"name", "gpu"},
                                     {"exactly", {{"deviceClassName", "mig.dralens.dev"}}}}})}}}}}};
    ASSERT_TRUE(client_.Create(k8s::kResourceClaims, "demo", claim).ok());
  }
  auto first = scheduler_.Allocate("demo", "a", {}, view_);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->node, "node-0");
  ASSERT_EQ((*first)->held.size(), 1u);
  absl::StatusOr<json> written = client_.Get(k8s::kResourceClaims, "demo", "a");
  ASSERT_TRUE(written.ok());
  EXPECT_EQ((*written)["status"]["allocation"]["devices"]["results"][0]["device"], "gpu-3-mig-1g");
  // Its counters are used up: the second claim stays pending until the first is released.
  auto second = scheduler_.Allocate("demo", "b", {}, view_);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->has_value());
  scheduler_.Release((*first)->held);
  second = scheduler_.Allocate("demo", "b", {}, view_);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->has_value());
}

}  // namespace
}  // namespace dralens::sim
