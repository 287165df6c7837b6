// NodeCollectors: the node role's collectors, in one table, fed by the driver's node views.
//
//   devices     exporter/node/device_collector.h
//   mig         exporter/node/mig_collector.h
//   claim_info  exporter/node/claim_info_collector.h
//   usage       exporter/node/usage_collector.h (also fed by the usage sampler's rounds)
//
// Each view goes to every collector in table order; a collector only updates its series, so
// one cannot fail another, and scrapes read what the last view left.
//
// Thread-safety: Apply and ApplyUsage may be called from any thread; calls are serialised.
#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "exporter/node/claim_info_collector.h"
#include "exporter/node/device_collector.h"
#include "exporter/node/mig_collector.h"
#include "exporter/node/usage_collector.h"
#include "prometheus/registry.h"
#include "src/model/node_view.h"
#include "src/model/usage.h"

namespace dralens::exporter {

struct NodeCollectorsOptions {
  double idle_threshold = kDefaultIdleThreshold;  // see UsageCollector
};

class NodeCollectors final : public model::NodeViewSink, public model::UsageSink {
 public:
  // Builds the families in `registry` (which must outlive this object).
  explicit NodeCollectors(prometheus::Registry& registry, NodeCollectorsOptions options = {});
  NodeCollectors(const NodeCollectors&) = delete;
  NodeCollectors& operator=(const NodeCollectors&) = delete;

  // model::NodeViewSink
  void Apply(const model::NodeView& view) override;
  // model::UsageSink
  void ApplyUsage(const model::UsageView& view) override;

 private:
  DeviceMetrics device_metrics_;
  MigLayoutMetrics mig_metrics_;
  ClaimInfoMetrics claim_info_metrics_;
  UsageMetrics usage_metrics_;

  absl::Mutex mu_;
  DeviceCollector devices_ ABSL_GUARDED_BY(mu_);
  MigCollector mig_ ABSL_GUARDED_BY(mu_);
  ClaimInfoCollector claim_info_ ABSL_GUARDED_BY(mu_);
  UsageCollector usage_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dralens::exporter
