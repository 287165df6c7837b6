#include "exporter/node/claim_info_collector.h"

#include "absl/strings/str_cat.h"
#include "src/telemetry/catalog.h"

namespace dralens::exporter {

ClaimInfoMetrics ClaimInfoMetrics::Create(prometheus::Registry& registry) {
  return ClaimInfoMetrics{.info = telemetry::BuildGauge(registry, "dralens_node_claim_info"),
                          .gpus = telemetry::BuildGauge(registry, "dralens_node_claim_gpus")};
}

prometheus::Labels ClaimInfoLabels(const model::NodeView& view, const model::PreparedClaim& claim,
                                   const model::ClaimDevice& device) {
  return {
      {"namespace", claim.namespace_name},
      {"claim", claim.name},
      {"uid", claim.uid},
      {"device", device.device},
      {"pool", device.pool},
      {"driver", view.driver},
      {"dra_claim_name", claim.name},
      {"dra_claim_namespace", claim.namespace_name},
      {"dra_driver_name", view.driver},
      {"dra_pool_name", device.pool},
      {"dra_device_name", device.device},
      {"UUID", device.gpu_uuid},
      {"GPU_I_ID", device.gpu_instance_id ? absl::StrCat(*device.gpu_instance_id) : std::string()}};
}

void ClaimInfoCollector::Apply(const model::NodeView& view) {
  std::map<prometheus::Labels, prometheus::Gauge*> next;
  for (const model::PreparedClaim& claim : view.claims) {
    for (const model::ClaimDevice& device : claim.devices) {
      prometheus::Labels labels = ClaimInfoLabels(view, claim, device);
      if (next.count(labels) > 0) {
        continue;  // several shares of one device: one series
      }
      auto it = series_.find(labels);
      prometheus::Gauge* gauge = nullptr;
      if (it != series_.end()) {
        gauge = it->second;
        series_.erase(it);
      } else {
        gauge = &metrics_.info.Add(labels);
        gauge->Set(1);
      }
      next.emplace(std::move(labels), gauge);
    }
  }
  for (const auto& [labels, gauge] : series_) {
    metrics_.info.Remove(gauge);  // the claim was unprepared (or lost that device)
  }
  series_ = std::move(next);

  std::map<prometheus::Labels, double> held;
  for (const model::PreparedClaim& claim : view.claims) {
    for (const model::ClaimDevice& device : claim.devices) {
      held[{{"namespace", claim.namespace_name},
            {"claim", claim.name},
            {"uid", claim.uid},
            {"device_class", device.device_class},
            {"product", device.product}}] += device.gpus;
    }
  }
  for (auto it = gpus_.begin(); it != gpus_.end();) {
    if (held.contains(it->first)) {
      ++it;
    } else {
      metrics_.gpus.Remove(it->second);
      it = gpus_.erase(it);
    }
  }
  for (const auto& [labels, value] : held) {
    prometheus::Gauge*& gauge = gpus_[labels];
    if (gauge == nullptr) {
      gauge = &metrics_.gpus.Add(labels);
    }
    gauge->Set(value);
  }
}

}  // namespace dralens::exporter
