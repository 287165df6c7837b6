// NvmlMetrics: what NVML would not let this node see or watch.
//
//   dralens_discovery_denied{what}      gauge; what = gpu | mig_profiles | mig_device: left out of
//                                       the latest discovery because NVML answered
//                                       NVML_ERROR_NO_PERMISSION (a GPU outside the container's
//                                       device cgroup, MIG calls without the MIG capability)
//   dralens_health_unmonitored_gpus     gauge: GPUs whose health events could not be registered
//                                       with the current event set
//
// Thread-safety: thread-safe (prometheus-cpp gauges are atomic).
#pragma once

#include <memory>

#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace dralens::driver::discovery {

// What one discovery left out, by kind.
struct DeniedCounts {
  int gpus = 0;
  int mig_profiles = 0;
  int mig_devices = 0;
  bool operator==(const DeniedCounts&) const = default;
};

class NvmlMetrics {
 public:
  // `registry` nullptr: the series live in a private registry nobody scrapes.
  explicit NvmlMetrics(prometheus::Registry* registry);

  void SetDenied(const DeniedCounts& counts);
  void SetUnmonitored(int gpus);

 private:
  std::shared_ptr<prometheus::Registry> own_;
  prometheus::Gauge* denied_gpus_;
  prometheus::Gauge* denied_mig_profiles_;
  prometheus::Gauge* denied_mig_devices_;
  prometheus::Gauge* unmonitored_;
};

}  // namespace dralens::driver::discovery
