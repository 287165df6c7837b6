// GangTracker: pending gangs, where the API server serves scheduling.k8s.io/v1alpha1 Workloads
// (Kubernetes 1.35 with the GenericWorkload feature gate and that API version enabled; the
// later versions of this alpha API are not read).
//
// A gang is one pod group of a Workload whose policy is `gang` (minCount), or one replica of it
// (pods' spec.workloadRef.podGroupReplicaKey). Pods join it through spec.workloadRef. A gang is
// pending while fewer than minCount of its pods are scheduled (spec.nodeName set); with the
// GangScheduling gate, kube-scheduler binds a gang's pods only once minCount of them fit, so
// their claims wait together.
//
// The claims of a gang's pods are evaluated together (Analyzer::ShortTogether): the gang needs
// minCount - scheduled more pods; the unscheduled pods whose claims lack least alone are taken,
// and their claims placed together, each request on free devices no other request of theirs
// took. So a gang whose claims each could be served alone but not all at once is short, which
// no single claim's reason shows.
//
// Series (none while there is no pending gang, and none at all where the API is absent):
//   dralens_cluster_pending_gangs{namespace}: namespaces with a pending gang only;
//   dralens_cluster_pending_gang_age_seconds{namespace, workload, pod_group, replica}: since its
//     first pod was created;
//   dralens_cluster_pending_gang_short_devices{...}: devices its claims lack together (for
//     whole-GPU classes, GPUs).
// Refresh() (the cluster role's tick) recomputes them; the event methods only record objects.
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "exporter/cluster/analyzer.h"
#include "nlohmann/json.hpp"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/k8s/informer.h"
#include "src/telemetry/text_family.h"

namespace dralens::exporter::cluster {

class GangTracker {
 public:
  // `analyzer` and `registry` must outlive the tracker. `clock` null: the real clock.
  GangTracker(Analyzer& analyzer, prometheus::Registry& registry, common::Clock* clock = nullptr);

  // Raw objects from the informers.
  void UpsertWorkload(const nlohmann::json& workload) ABSL_LOCKS_EXCLUDED(mu_);
  void DeleteWorkload(const std::string& ns, const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  // Pods without spec.workloadRef are ignored (and forgotten if they had one).
  void UpsertPod(const nlohmann::json& pod) ABSL_LOCKS_EXCLUDED(mu_);
  void DeletePod(const std::string& ns, const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);

  // Recomputes every gang and its series.
  void Refresh() ABSL_LOCKS_EXCLUDED(mu_);
  // The pending gangs as of the last Refresh(), in key order.
  std::vector<GangView> Gangs() const ABSL_LOCKS_EXCLUDED(mu_);
  // The pending gang a claim of one of its unscheduled pods belongs to, as of the last
  // Refresh().
  std::optional<GangView> GangOfClaim(const std::string& ns, const std::string& claim) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // The per-gang families, rendered as text beside the registry.
  std::shared_ptr<const telemetry::TextFamilies> TextSeries() const { return text_series_; }

  // Informer handlers for workloads, and for pods (to be chained with the analyzer's).
  k8s::InformerHandlers WorkloadHandlers();
  k8s::InformerHandlers PodHandlers();

 private:
  struct PodInfo {
    std::string gang;  // key of its gang
    absl::Time created;
    bool scheduled = false;
    std::vector<std::string> claims;
  };
  struct Series {
    prometheus::Gauge* age = nullptr;
    prometheus::Gauge* short_devices = nullptr;
  };

  Analyzer& analyzer_;
  common::Clock& clock_;
  prometheus::Family<prometheus::Gauge>& pending_gangs_;
  const std::shared_ptr<telemetry::TextFamilies> text_series_;
  telemetry::TextFamily<prometheus::Gauge>& age_;
  telemetry::TextFamily<prometheus::Gauge>& short_;

  mutable absl::Mutex mu_;
  // "ns/workload" -> pod group -> minCount (0: not a gang).
  std::map<std::string, std::map<std::string, int64_t>> workloads_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, PodInfo> pods_ ABSL_GUARDED_BY(mu_);    // "ns/pod"
  std::map<std::string, GangView> gangs_ ABSL_GUARDED_BY(mu_);  // as of the last Refresh
  std::map<std::string, Series> series_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Gauge*> per_namespace_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dralens::exporter::cluster
