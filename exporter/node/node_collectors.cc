#include "exporter/node/node_collectors.h"

namespace dralens::exporter {

NodeCollectors::NodeCollectors(prometheus::Registry& registry)
    : device_metrics_(DeviceMetrics::Create(registry)),
      mig_metrics_(MigLayoutMetrics::Create(registry)),
      claim_info_metrics_(ClaimInfoMetrics::Create(registry)),
      devices_(device_metrics_),
      mig_(mig_metrics_),
      claim_info_(claim_info_metrics_) {}

void NodeCollectors::Apply(const model::NodeView& view) {
  absl::MutexLock lock(&mu_);
  devices_.Apply(view);
  mig_.Apply(view);
  claim_info_.Apply(view);
}

}  // namespace dralens::exporter
