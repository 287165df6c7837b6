#include "exporter/node/node_collectors.h"

namespace dralens::exporter {

NodeCollectors::NodeCollectors(prometheus::Registry& registry, NodeCollectorsOptions options)
    : device_metrics_(DeviceMetrics::Create(registry)),
      mig_metrics_(MigLayoutMetrics::Create(registry)),
      claim_info_metrics_(ClaimInfoMetrics::Create(registry)),
      usage_metrics_(UsageMetrics::Create(registry)),
      devices_(device_metrics_),
      mig_(mig_metrics_),
      claim_info_(claim_info_metrics_),
      usage_(usage_metrics_, options.idle_threshold) {}

void NodeCollectors::Apply(const model::NodeView& view) {
  absl::MutexLock lock(&mu_);
  devices_.Apply(view);
  mig_.Apply(view);
  claim_info_.Apply(view);
  usage_.Apply(view);
}

void NodeCollectors::ApplyUsage(const model::UsageView& view) {
  absl::MutexLock lock(&mu_);
  usage_.ApplyUsage(view);
}

}  // namespace dralens::exporter
