#include "exporter/cluster/leader_gate.h"

#include <utility>

#include "src/telemetry/catalog.h"

namespace dralens::exporter::cluster {

LeaderGate::LeaderGate(std::shared_ptr<prometheus::Registry> cluster, prometheus::Registry& process)
    : cluster_(std::move(cluster)),
      leader_gauge_(telemetry::BuildGauge(process, "dralens_cluster_leader").Add({})) {
  leader_gauge_.Set(0);
}

void LeaderGate::SetLeader(bool leader) {
  leader_.store(leader);
  leader_gauge_.Set(leader ? 1 : 0);
}

std::vector<prometheus::MetricFamily> LeaderGate::Collect() const {
  if (!leader_.load()) {
    return {};
  }
  return cluster_->Collect();
}

}  // namespace dralens::exporter::cluster
