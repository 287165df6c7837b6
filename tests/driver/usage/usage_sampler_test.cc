// UsageSampler: rounds reach the sink with the clock's time, failures are counted and leave the
// sink alone, and the loop takes a round at once and then one per interval.
#include "driver/usage/usage_sampler.h"

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "tests/testing/eventually.h"

namespace dralens::driver::usage {
namespace {

using discovery::DeviceUsage;
using discovery::UsageMethod;

class ScriptedSource : public discovery::UsageSource {
 public:
  absl::StatusOr<std::vector<DeviceUsage>> SampleUsage() override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    return next_;
  }
  void Set(absl::StatusOr<std::vector<DeviceUsage>> next) {
    absl::MutexLock lock(&mu_);
    next_ = std::move(next);
  }

 private:
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  absl::StatusOr<std::vector<DeviceUsage>> next_ ABSL_GUARDED_BY(mu_) = std::vector<DeviceUsage>();
};

class RecordingSink : public model::UsageSink {
 public:
  void ApplyUsage(const model::UsageView& view) override {
    absl::MutexLock lock(&mu_);
    views_.push_back(view);
  }
  std::vector<model::UsageView> Views() {
    absl::MutexLock lock(&mu_);
    return views_;
  }

 private:
  absl::Mutex mu_;
  std::vector<model::UsageView> views_ ABSL_GUARDED_BY(mu_);
};

double Rounds(prometheus::Registry& registry, const std::string& result) {
  for (const auto& family : registry.Collect()) {
    if (family.name != "dralens_usage_rounds_total") {
      continue;
    }
    for (const auto& metric : family.metric) {
      if (metric.label.size() == 1 && metric.label[0].value == result) {
        return metric.counter.value;
      }
    }
  }
  return -1;
}

TEST(UsageSamplerTest, ARoundReachesTheSinkWithItsTimeAndMethod) {
  ScriptedSource source;
  RecordingSink sink;
  common::FakeClock clock;
  prometheus::Registry registry;
  UsageSampler sampler(source, sink, clock, registry);
  DeviceUsage gpu;
  gpu.uuid = "GPU-a";
  gpu.utilization = 0.25;
  gpu.memory_used_bytes = 7;
  gpu.memory_total_bytes = 80;
  gpu.method = UsageMethod::kDeviceUtilization;
  source.Set(std::vector<DeviceUsage>{gpu});

  ASSERT_TRUE(sampler.SampleOnce().ok());
  auto views = sink.Views();
  ASSERT_EQ(views.size(), 1u);
  EXPECT_EQ(views[0].at, clock.Now());
  ASSERT_EQ(views[0].devices.size(), 1u);
  EXPECT_EQ(views[0].devices[0], (model::DeviceUsageSample{.uuid = "GPU-a",
                                                           .utilization = 0.25,
                                                           .memory_used_bytes = 7,
                                                           .method = "device_utilization"}));
  EXPECT_EQ(Rounds(registry, "ok"), 1);
}

TEST(UsageSamplerTest, AFailedRoundIsCountedAndLeavesTheSinkAlone) {
  ScriptedSource source;
  RecordingSink sink;
  common::FakeClock clock;
  prometheus::Registry registry;
  UsageSampler sampler(source, sink, clock, registry);
  source.Set(absl::UnavailableError("nvmlDeviceGetCount_v2: NVML_ERROR_DRIVER_NOT_LOADED (9)"));
  EXPECT_EQ(sampler.SampleOnce().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(sink.Views().empty());
  EXPECT_EQ(Rounds(registry, "error"), 1);
  EXPECT_EQ(Rounds(registry, "ok"), 0);
}

TEST(UsageSamplerTest, TheLoopSamplesAtOnceAndThenEveryInterval) {
  ScriptedSource source;
  RecordingSink sink;
  common::FakeClock clock;
  prometheus::Registry registry;
  UsageSampler sampler(
      source, sink, clock, registry,
      UsageSamplerOptions{.interval = absl::Seconds(10), .poll_interval = absl::Milliseconds(5)});
  sampler.Start();
  EXPECT_TRUE(testing::Eventually([&] { return sink.Views().size() == 1; }));
  clock.Advance(absl::Seconds(9));
  EXPECT_EQ(sink.Views().size(), 1u) << "not before the interval";
  clock.Advance(absl::Seconds(1));
  EXPECT_TRUE(testing::Eventually([&] { return sink.Views().size() == 2; }));
  sampler.Stop();
  clock.Advance(absl::Seconds(60));
  EXPECT_EQ(sink.Views().size(), 2u) << "no round after Stop";
}

}  // namespace
}  // namespace dralens::driver::usage
