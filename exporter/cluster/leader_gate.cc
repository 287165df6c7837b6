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

void LeaderGate::AddCollectable(std::shared_ptr<const prometheus::Collectable> collectable) {
  extra_.push_back(std::move(collectable));
}

void LeaderGate::AddTextSource(std::shared_ptr<const telemetry::TextSource> source) {
  text_.push_back(std::move(source));
}

void LeaderGate::AppendText(telemetry::TextWriter& out, telemetry::ExpositionFormat format) const {
  if (!leader_.load()) {
    return;
  }
  for (const auto& source : text_) {
    source->AppendText(out, format);
  }
}

std::vector<prometheus::MetricFamily> LeaderGate::Collect() const {
  if (!leader_.load()) {
    return {};
  }
  std::vector<prometheus::MetricFamily> families = cluster_->Collect();
  for (const auto& collectable : extra_) {
    for (prometheus::MetricFamily& family : collectable->Collect()) {
      families.push_back(std::move(family));
    }
  }
  return families;
}

}  // namespace dralens::exporter::cluster
