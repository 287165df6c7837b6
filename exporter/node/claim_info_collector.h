// ClaimInfoCollector: which claim holds which device, in the label names other exporters use,
// so that their per-device series join with claims.
//
//   dralens_node_claim_info{namespace,claim,uid,device,pool,driver,
//                           dra_claim_name,dra_claim_namespace,dra_driver_name,dra_pool_name,
//                           dra_device_name,UUID,GPU_I_ID}   1
//
// One series per prepared (claim, device), created when the claim is prepared and deleted when
// it is unprepared. The dra_* labels repeat the claim's identity under dcgm-exporter's DRA label
// names; UUID (the GPU's UUID, the parent's for a MIG device) and GPU_I_ID (the MIG GPU instance
// id, empty for a full GPU) are dcgm-exporter's device labels, the key that lines up whatever
// driver name a claim uses (see the README's "Join GPU utilisation with claims").
//
//   dralens_node_claim_gpus{namespace,claim,uid,device_class,product}
//     the GPU-equivalents the prepared claim holds here, per class of its requests and product:
//     what rules price its idle time by (model::ClaimDevice::gpus)
//
// Not thread-safe: NodeCollectors calls it one view at a time.
#pragma once

#include <map>
#include <string>

#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/labels.h"
#include "prometheus/registry.h"
#include "src/model/node_view.h"

namespace dralens::exporter {

struct ClaimInfoMetrics {
  prometheus::Family<prometheus::Gauge>& info;
  prometheus::Family<prometheus::Gauge>& gpus;

  static ClaimInfoMetrics Create(prometheus::Registry& registry);
};

// The labels of one (claim, device) series. Pure.
prometheus::Labels ClaimInfoLabels(const model::NodeView& view, const model::PreparedClaim& claim,
                                   const model::ClaimDevice& device);

class ClaimInfoCollector {
 public:
  explicit ClaimInfoCollector(ClaimInfoMetrics& metrics) : metrics_(metrics) {}
  void Apply(const model::NodeView& view);

 private:
  ClaimInfoMetrics& metrics_;
  std::map<prometheus::Labels, prometheus::Gauge*> series_;
  std::map<prometheus::Labels, prometheus::Gauge*> gpus_;
};

}  // namespace dralens::exporter
