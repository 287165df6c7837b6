// UsageSampler: samples the device source's utilisation every `interval` and hands each round to
// the node's usage collector (exporter/node/usage_collector.h), which turns it into device series
// and claim idleness.
//
//   dralens_usage_rounds_total{result}   sampling rounds by result: ok | error
//
// A failed round (NVML unreadable) is logged and counted; the collector keeps the last round's
// figures until a round succeeds, and a device missing from a successful round loses its series.
//
// Thread-safety: every method may be called from any thread; rounds are serialised.
#pragma once

#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "driver/discovery/usage_source.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/common/periodic.h"
#include "src/model/usage.h"

namespace dralens::driver::usage {

struct UsageSamplerOptions {
  absl::Duration interval = absl::Seconds(10);
  // How often the loop looks at the clock while waiting (a fake clock in tests moves at will).
  absl::Duration poll_interval = absl::Seconds(1);
};

// The sink's view of one round. Pure.
model::UsageView ToUsageView(absl::Time at, const std::vector<discovery::DeviceUsage>& devices);

class UsageSampler {
 public:
  // Not owned; all must outlive the sampler.
  UsageSampler(discovery::UsageSource& source, model::UsageSink& sink, common::Clock& clock,
               prometheus::Registry& registry, UsageSamplerOptions options = {});
  ~UsageSampler();  // Stop()
  UsageSampler(const UsageSampler&) = delete;
  UsageSampler& operator=(const UsageSampler&) = delete;

  // One round now: sample, then hand it to the sink. The source's error when it fails.
  absl::Status SampleOnce();
  // A round at once, then one every interval, on a thread of its own.
  void Start() { loop_.Start(); }
  void Stop() { loop_.Stop(); }  // idempotent; waits for a round in progress

 private:
  discovery::UsageSource& source_;
  model::UsageSink& sink_;
  common::Clock& clock_;
  prometheus::Counter& ok_;
  prometheus::Counter& failed_;

  absl::Mutex round_mu_;   // serialises rounds
  common::Periodic loop_;  // last: stopped (destroyed) first
};

}  // namespace dralens::driver::usage
