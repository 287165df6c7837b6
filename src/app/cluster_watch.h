// ClusterWatch: the cluster role's informers over claims, slices, classes, pods and nodes, and
// Workloads where the API server serves them (gangs).
//
// Ready once every informer has synced. The analyzer plugs into their handlers.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "src/k8s/informer.h"
#include "src/k8s/request_metrics.h"

namespace dralens::app {

class ClusterWatch {
 public:
  // Handlers for one informer, by resource type (the analyzer's feed); null: none.
  using HandlerFactory = std::function<k8s::InformerHandlers(const k8s::ResourceType&)>;
  // `client` and `metrics` must outlive the watch.
  // `with_workloads` adds an informer over scheduling.k8s.io Workloads.
  ClusterWatch(k8s::KubeClient& client, const k8s::KubeRequestMetrics* metrics,
               const HandlerFactory& handlers = nullptr, bool with_workloads = false);
  ~ClusterWatch();

  void Start();
  void Stop();
  // OK when every informer has synced; otherwise names those that have not.
  absl::Status Ready() const;
  // "resourceclaims=3 resourceslices=2 ..." for logs.
  std::string Summary() const;
  // Whether the informer of `plural` (e.g. "nodes") has synced.
  bool Synced(const std::string& plural) const;
  // Per resource (plural): since when its cache may lag the API server (Informer::StaleSince).
  std::vector<std::pair<std::string, std::optional<absl::Time>>> StaleSince() const;

 private:
  std::vector<std::unique_ptr<k8s::Informer>> informers_;
  std::vector<std::string> names_;
};

}  // namespace dralens::app
