// DeviceCollector: the node's devices and what its prepared claims hold.
//
//   dralens_device_info{device,uuid,product,type,parent,profile,numa_node,pci_bus_id}  1
//   dralens_device_memory_bytes{device}
//   dralens_device_state{device,state}       1 for the current state (free, prepared,
//                                             unhealthy), 0 for the others; unhealthy wins
//   dralens_device_consumers{device}          prepared claims holding the device
//   dralens_node_prepared_claims              PrepareCompleted claims
//   dralens_node_prepared_devices{type}       distinct devices those claims hold
//
// Identity series follow the layout (created when a device appears, deleted when it goes);
// a view with the same layout only sets cached gauges. Not thread-safe: NodeCollectors calls it
// one view at a time.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/labels.h"
#include "prometheus/registry.h"
#include "src/model/node_view.h"

namespace dralens::exporter {

struct DeviceMetrics {
  prometheus::Family<prometheus::Gauge>& info;
  prometheus::Family<prometheus::Gauge>& memory_bytes;
  prometheus::Family<prometheus::Gauge>& state;
  prometheus::Family<prometheus::Gauge>& consumers;
  prometheus::Family<prometheus::Gauge>& prepared_claims_family;
  prometheus::Family<prometheus::Gauge>& prepared_devices_family;
  prometheus::Gauge& prepared_claims;
  prometheus::Gauge& prepared_gpus;
  prometheus::Gauge& prepared_migs;

  static DeviceMetrics Create(prometheus::Registry& registry);
};

class DeviceCollector {
 public:
  explicit DeviceCollector(DeviceMetrics& metrics) : metrics_(metrics) {}
  void Apply(const model::NodeView& view);

 private:
  struct Series {
    prometheus::Labels info;
    prometheus::Gauge* memory = nullptr;
    prometheus::Gauge* free = nullptr;
    prometheus::Gauge* prepared = nullptr;
    prometheus::Gauge* unhealthy = nullptr;
    prometheus::Gauge* consumers = nullptr;
  };
  void ApplyLayout(const model::NodeLayout& layout);

  DeviceMetrics& metrics_;
  std::shared_ptr<const model::NodeLayout> layout_;
  std::map<std::string, Series> series_;  // by device name
};

}  // namespace dralens::exporter
