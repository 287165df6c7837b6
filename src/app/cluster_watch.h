// ClusterWatch: the cluster role's informers over claims, slices, classes, pods and nodes.
//
// Ready once every informer has synced. The analyzer plugs into their handlers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "src/k8s/informer.h"
#include "src/k8s/request_metrics.h"

namespace dralens::app {

class ClusterWatch {
 public:
  // `client` and `metrics` must outlive the watch.
  ClusterWatch(k8s::KubeClient& client, const k8s::KubeRequestMetrics* metrics);
  ~ClusterWatch();

  void Start();
  void Stop();
  // OK when every informer has synced; otherwise names those that have not.
  absl::Status Ready() const;
  // "resourceclaims=3 resourceslices=2 ..." for logs.
  std::string Summary() const;

 private:
  std::vector<std::unique_ptr<k8s::Informer>> informers_;
  std::vector<std::string> names_;
};

}  // namespace dralens::app
