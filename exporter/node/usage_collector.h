// UsageCollector: how busy the node's devices are, and how long each prepared claim has sat idle.
//
//   dralens_device_utilization_ratio{device}     0..1 over the last sampling round; only for
//                                                devices NVML has a figure for this round
//   dralens_device_memory_used_bytes{device}     device memory in use
//   dralens_node_claim_idle_seconds{namespace,claim,uid}
//                                                how long every device of the prepared claim
//                                                has stayed below the idle threshold; 0 while
//                                                any is busy
//
//   dralens_node_idle_gpu_seconds_total{namespace,device_class,product}
//                                                the GPU-equivalents of idle claims times the
//                                                time they idled: what rules price
//
// A claim is idle in a round when every one of its devices has a utilisation below the
// threshold, busy when any has one at or above it, and undecided otherwise (a device without a
// utilisation figure: a MIG device without GPM, the first GPM round): an undecided round neither
// starts nor ends idleness. A claim never decided has no idle series. Idleness starts at the
// first idle round, so a claim counts no idle time from before it was prepared.
//
// Not thread-safe: NodeCollectors calls it one view or round at a time.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "src/model/node_view.h"
#include "src/model/usage.h"

namespace dralens::exporter {

struct UsageMetrics {
  prometheus::Family<prometheus::Gauge>& utilization;
  prometheus::Family<prometheus::Gauge>& memory_used;
  prometheus::Family<prometheus::Gauge>& claim_idle;
  prometheus::Family<prometheus::Counter>& idle_gpu_seconds;

  static UsageMetrics Create(prometheus::Registry& registry);
};

// Below this utilisation (0..1) a device counts as idle; the node's --idle-threshold.
inline constexpr double kDefaultIdleThreshold = 0.05;

class UsageCollector {
 public:
  UsageCollector(UsageMetrics& metrics, double idle_threshold)
      : metrics_(metrics), idle_threshold_(idle_threshold) {}
  // The devices' names and the prepared claims: a claim gone takes its series with it.
  void Apply(const model::NodeView& view);
  void ApplyUsage(const model::UsageView& view);

 private:
  struct DeviceSeries {
    prometheus::Gauge* utilization = nullptr;
    prometheus::Gauge* memory_used = nullptr;
  };
  struct ClaimIdle {
    std::optional<absl::Time> idle_since;
    std::optional<absl::Time> accrued_to;  // idle GPU-seconds are counted up to here
    prometheus::Gauge* series = nullptr;
  };
  // Adds the claim's GPU-equivalents times `seconds` to its namespace's idle counters.
  void AccrueIdle(const model::PreparedClaim& claim, double seconds);
  void SetDevice(const std::string& name, const model::DeviceUsageSample& sample);
  void DropDevice(const std::string& name);

  UsageMetrics& metrics_;
  const double idle_threshold_;
  std::shared_ptr<const model::NodeLayout> layout_;  // the one names_ was built from
  std::map<std::string, std::string> names_;         // device UUID -> device name
  std::vector<model::PreparedClaim> claims_;
  std::map<std::string, DeviceSeries> devices_;  // by device name
  std::map<std::string, ClaimIdle> idle_;        // by claim UID
  // (namespace, class, product) -> counter; they stay when the claims go.
  std::map<std::vector<std::string>, prometheus::Counter*> idle_gpu_seconds_;
};

}  // namespace dralens::exporter
