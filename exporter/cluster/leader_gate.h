// LeaderGate: exports the cluster series only while this replica leads.
//
// The analyzer writes into its own registry in every replica (a standby stays warm and takes
// over with current series); the metrics server collects that registry through the gate,
// which answers nothing while the replica is not the leader. dralens_cluster_leader (in the
// process registry) says which replica leads.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "src/telemetry/exposition.h"

namespace dralens::exporter::cluster {

class LeaderGate : public prometheus::Collectable, public telemetry::TextSource {
 public:
  // `cluster` holds the dralens_cluster_* series; dralens_cluster_leader is added to
  // `process`. Both must outlive the gate. Starts as not leading.
  LeaderGate(std::shared_ptr<prometheus::Registry> cluster, prometheus::Registry& process);

  void SetLeader(bool leader);
  // Also exports `collectable` (per-object series kept outside the cluster registry) while
  // leading. Call before the gate is collected.
  void AddCollectable(std::shared_ptr<const prometheus::Collectable> collectable);
  // The same for families that render their own text.
  void AddTextSource(std::shared_ptr<const telemetry::TextSource> source);
  bool leader() const { return leader_.load(); }

  // prometheus::Collectable
  std::vector<prometheus::MetricFamily> Collect() const override;
  // telemetry::TextSource: the text sources, while leading.
  void AppendText(telemetry::TextWriter& out, telemetry::ExpositionFormat format) const override;

 private:
  std::shared_ptr<prometheus::Registry> cluster_;
  std::vector<std::shared_ptr<const prometheus::Collectable>> extra_;
  std::vector<std::shared_ptr<const telemetry::TextSource>> text_;
  prometheus::Gauge& leader_gauge_;
  std::atomic<bool> leader_{false};
};

}  // namespace dralens::exporter::cluster
