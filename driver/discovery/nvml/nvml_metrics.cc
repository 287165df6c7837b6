#include "driver/discovery/nvml/nvml_metrics.h"

#include "src/telemetry/catalog.h"

namespace dralens::driver::discovery {

NvmlMetrics::NvmlMetrics(prometheus::Registry* registry) {
  if (registry == nullptr) {
    own_ = std::make_shared<prometheus::Registry>();
    registry = own_.get();
  }
  auto& denied = telemetry::BuildGauge(*registry, "dralens_discovery_denied");
  denied_gpus_ = &denied.Add({{"what", "gpu"}});
  denied_mig_profiles_ = &denied.Add({{"what", "mig_profiles"}});
  denied_mig_devices_ = &denied.Add({{"what", "mig_device"}});
  unmonitored_ = &telemetry::BuildGauge(*registry, "dralens_health_unmonitored_gpus").Add({});
}

void NvmlMetrics::SetDenied(const DeniedCounts& counts) {
  denied_gpus_->Set(counts.gpus);
  denied_mig_profiles_->Set(counts.mig_profiles);
  denied_mig_devices_->Set(counts.mig_devices);
}

void NvmlMetrics::SetUnmonitored(int gpus) { unmonitored_->Set(gpus); }

}  // namespace dralens::driver::discovery
