#include "driver/usage/usage_sampler.h"

#include <algorithm>
#include <string>
#include <utility>

#include "src/common/log.h"
#include "src/telemetry/catalog.h"

namespace dralens::driver::usage {
namespace {

constexpr char kComponent[] = "usage";

}  // namespace

model::UsageView ToUsageView(absl::Time at, const std::vector<discovery::DeviceUsage>& devices) {
  model::UsageView view{.at = at, .devices = {}};
  view.devices.reserve(devices.size());
  for (const discovery::DeviceUsage& d : devices) {
    view.devices.push_back(model::DeviceUsageSample{.uuid = d.uuid,
                                                    .utilization = d.utilization,
                                                    .memory_used_bytes = d.memory_used_bytes,
                                                    .memory_total_bytes = d.memory_total_bytes,
                                                    .method = std::string(ToString(d.method))});
  }
  return view;
}

UsageSampler::UsageSampler(discovery::UsageSource& source, model::UsageSink& sink,
                           common::Clock& clock, prometheus::Registry& registry,
                           UsageSamplerOptions options)
    : source_(source),
      sink_(sink),
      clock_(clock),
      options_(options),
      ok_(telemetry::BuildCounter(registry, "dralens_usage_rounds_total").Add({{"result", "ok"}})),
      failed_(telemetry::BuildCounter(registry, "dralens_usage_rounds_total")
                  .Add({{"result", "error"}})) {}

UsageSampler::~UsageSampler() { Stop(); }

absl::Status UsageSampler::SampleOnce() {
  absl::MutexLock round(&round_mu_);
  absl::StatusOr<std::vector<discovery::DeviceUsage>> devices = source_.SampleUsage();
  if (!devices.ok()) {
    failed_.Increment();
    DLOG(kWarn, kComponent, "usage sampling failed; keeping the last figures",
         {{"error", devices.status().message()}});
    return devices.status();
  }
  sink_.ApplyUsage(ToUsageView(clock_.Now(), *devices));
  ok_.Increment();
  return absl::OkStatus();
}

void UsageSampler::Start() {
  if (thread_ != nullptr) {
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    stop_ = false;
  }
  thread_ = std::make_unique<std::thread>([this] { Loop(); });
}

void UsageSampler::Stop() {
  if (thread_ == nullptr) {
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_->join();
  thread_.reset();
}

void UsageSampler::Loop() {
  absl::Time next = clock_.Now();
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        if (stop_) {
          return;
        }
        const absl::Time now = clock_.Now();
        if (now >= next) {
          break;
        }
        mu_.AwaitWithTimeout(absl::Condition(&stop_), std::min(next - now, options_.poll_interval));
      }
    }
    SampleOnce().IgnoreError();
    next = clock_.Now() + options_.interval;
  }
}

}  // namespace dralens::driver::usage
