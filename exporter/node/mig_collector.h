// MigCollector: the MIG layout of the node.
//
//   dralens_mig_devices{parent,profile,state}   MIG devices per parent GPU and profile, by
//                                               state (free, prepared)
//   dralens_mig_placeable{parent,profile}       how many more instances of the profile fit on
//                                               the GPU; only GPUs in MIG mode have series
//
// Series of (parent, profile) groups that disappear from the layout are deleted. Not
// thread-safe: NodeCollectors calls it one view at a time.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "src/model/node_view.h"

namespace dralens::exporter {

struct MigLayoutMetrics {
  prometheus::Family<prometheus::Gauge>& devices;
  prometheus::Family<prometheus::Gauge>& placeable;

  static MigLayoutMetrics Create(prometheus::Registry& registry);
};

class MigCollector {
 public:
  explicit MigCollector(MigLayoutMetrics& metrics) : metrics_(metrics) {}
  void Apply(const model::NodeView& view);

 private:
  using Group = std::pair<std::string, std::string>;  // parent, profile
  struct GroupSeries {
    prometheus::Gauge* free = nullptr;
    prometheus::Gauge* prepared = nullptr;
  };
  void ApplyLayout(const model::NodeLayout& layout);

  MigLayoutMetrics& metrics_;
  std::shared_ptr<const model::NodeLayout> layout_;
  std::map<Group, GroupSeries> groups_;
  std::map<std::string, Group> group_of_;  // MIG device name -> its group
  std::map<Group, prometheus::Gauge*> placeable_;
};

}  // namespace dralens::exporter
