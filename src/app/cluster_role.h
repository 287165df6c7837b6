// The cluster role as a component: the analyzer (exporter/cluster) fed by informers over
// claims, slices, classes, pods and nodes, a periodic tick for ages and stranded
// device-seconds, and optional leader election. `dralens cluster` runs one; `dralens demo`
// runs one beside its simulated nodes.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/claim_events.h"
#include "exporter/cluster/gangs.h"
#include "exporter/cluster/leader_gate.h"
#include "exporter/http/metrics_server.h"
#include "nlohmann/json.hpp"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "src/app/cluster_watch.h"
#include "src/k8s/client.h"
#include "src/k8s/leader_elector.h"
#include "src/k8s/request_metrics.h"
#include "src/telemetry/tracing/tracer.h"

namespace dralens::app {

struct ClusterRoleOptions {
  double price_per_device_hour = 0;
  std::string price_file;  // empty: the flat price above
  // DeviceClasses whose multi-device claims should land close together.
  std::set<std::string> topology_sensitive_classes;
  // Leader election through a Lease; without it this replica exports at once.
  bool leader_elect = false;
  k8s::LeaderElectionOptions election;
  // How often stranded and held GPU-seconds are brought up to date between events.
  absl::Duration tick = absl::Seconds(5);
  // How long a stranded series stays at 0 before it is dropped (AnalyzerOptions).
  absl::Duration stranded_retention = absl::Minutes(15);
  // Kubernetes Events on pending claims (exporter/cluster/claim_events.h), written by the
  // leader; `instance` is their reportingInstance (this replica).
  bool claim_events = true;
  std::string instance = "dralens-cluster";
  exporter::cluster::ClaimEventOptions claim_event_options = {};
  // How often the leader looks for Events to write.
  absl::Duration claim_event_period = absl::Seconds(5);
};

class ClusterRole;

// Serves /debug/claims/<namespace>/<name> from `role` on `server` (before it starts).
void AddClaimDebugEndpoint(exporter::MetricsServer& server, ClusterRole& role);

// Whether the API server serves scheduling.k8s.io/v1alpha1 Workloads (gangs): a LIST of at most
// one object. A 404 says no at once; other errors are retried `attempts` times with a doubling
// backoff, then logged, and say no. Where it says no, the cluster role watches no Workloads and
// exports no gang series.
bool ServesWorkloads(k8s::KubeClient& client, int attempts = 4,
                     absl::Duration backoff = absl::Seconds(1));

// Handlers that call `first`, then `second` (both complete).
k8s::InformerHandlers ChainHandlers(k8s::InformerHandlers first, k8s::InformerHandlers second);

// "a, b,,c" -> {a, b, c}: a comma-separated list of DeviceClass names.
std::set<std::string> ClassList(absl::string_view value);

class ClusterRole {
 public:
  // Starts informers, the ticker and, if asked, the elector. `client`, `kube_metrics`,
  // `registry` (where the leader gate exposes the cluster series) and `tracer` must outlive
  // the role.
  static absl::StatusOr<std::unique_ptr<ClusterRole>> Start(
      ClusterRoleOptions options, k8s::KubeClient& client,
      const k8s::KubeRequestMetrics* kube_metrics, prometheus::Registry& registry,
      telemetry::Tracer& tracer);
  ~ClusterRole();  // Stop()
  ClusterRole(const ClusterRole&) = delete;
  ClusterRole& operator=(const ClusterRole&) = delete;

  // Releases the lease, stops the feeders and ends the claims' lifecycle spans. Idempotent.
  void Stop();

  // OK once every informer has synced and the analyzer has derived its findings from the LISTs:
  // from then on every scrape is complete. Deriving takes about a second at 100k claims.
  absl::Status Ready() const;
  std::string Summary() const { return watch_->Summary(); }
  // The cluster series, present only while this replica leads: add it to the metrics server.
  prometheus::Collectable* collectable() { return gate_.get(); }
  // The cluster families kept as text, behind the same gate.
  const telemetry::TextSource* text_source() { return gate_.get(); }
  // /debug/claims/<namespace>/<name>: the claim's explanation (exporter/cluster/explain.h), or
  // nullopt when the cache has no such claim.
  std::optional<nlohmann::json> ExplainJson(const std::string& ns, const std::string& name);

 private:
  ClusterRole() = default;
  // Sets dralens_cluster_stale_seconds from the informers.
  void UpdateStaleness();

  std::shared_ptr<prometheus::Registry> cluster_registry_;
  std::unique_ptr<exporter::cluster::Analyzer> analyzer_;
  std::unique_ptr<exporter::cluster::GangTracker> gangs_;  // where Workloads are served
  std::unique_ptr<exporter::cluster::LeaderGate> gate_;
  std::unique_ptr<ClusterWatch> watch_;
  std::unique_ptr<k8s::LeaderElector> elector_;
  // dralens_cluster_stale_seconds, per resource; set by the ticker.
  std::vector<std::pair<std::string, prometheus::Gauge*>> stale_;
  absl::Notification stop_ticker_;
  std::unique_ptr<std::thread> ticker_;
  std::atomic<bool> synced_{false};  // the analyzer has derived its findings
  std::unique_ptr<exporter::cluster::ClaimEventSink> event_sink_;
  std::unique_ptr<exporter::cluster::ClaimEventRecorder> event_recorder_;
  std::unique_ptr<std::thread> event_thread_;
  bool stopped_ = false;
};

}  // namespace dralens::app
