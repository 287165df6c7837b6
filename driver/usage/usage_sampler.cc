#include "driver/usage/usage_sampler.h"

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
      ok_(telemetry::BuildCounter(registry, "dralens_usage_rounds_total").Add({{"result", "ok"}})),
      failed_(telemetry::BuildCounter(registry, "dralens_usage_rounds_total")
                  .Add({{"result", "error"}})),
      loop_(clock, options.interval, options.poll_interval,
            [this] { SampleOnce().IgnoreError(); }) {}

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

}  // namespace dralens::driver::usage
