#include "src/app/cluster_watch.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "exporter/cluster/feed.h"

namespace dralens::app {

ClusterWatch::ClusterWatch(k8s::KubeClient& client, const k8s::KubeRequestMetrics* metrics,
                           const HandlerFactory& handlers, bool with_workloads) {
  std::vector<const k8s::ResourceType*> types = {&k8s::kResourceClaims, &k8s::kResourceSlices,
                                                 &k8s::kDeviceClasses, &k8s::kPods, &k8s::kNodes};
  if (with_workloads) {
    types.push_back(&k8s::kWorkloads);
  }
  for (const k8s::ResourceType* type : types) {
    k8s::InformerOptions options;
    options.metrics = metrics;
    // The analyzer keeps what it needs of each object; the informers keep hashes only.
    options.keep_objects = false;
    options.projection = exporter::cluster::ProjectionFor(*type);
    // A page is parsed whole, by each of the informers at once: at 500 objects a page the
    // parse buffers of the initial LISTs were a third of the role's peak heap at 50k claims.
    // At 100 they are a fifth of that, for a few hundred more requests at 100k.
    options.page_size = 100;
    informers_.push_back(std::make_unique<k8s::Informer>(client, *type, options));
    if (handlers) {
      informers_.back()->SetHandlers(handlers(*type));
    }
    names_.push_back(type->plural);
  }
}

ClusterWatch::~ClusterWatch() { Stop(); }

void ClusterWatch::Start() {
  for (auto& informer : informers_) {
    informer->Start();
  }
}

void ClusterWatch::Stop() {
  for (auto& informer : informers_) {
    informer->Stop();
  }
}

absl::Status ClusterWatch::Ready() const {
  std::vector<std::string> pending;
  for (size_t i = 0; i < informers_.size(); ++i) {
    if (!informers_[i]->HasSynced()) {
      pending.push_back(names_[i]);
    }
  }
  if (pending.empty()) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat("not synced: ", absl::StrJoin(pending, ", ")));
}

bool ClusterWatch::Synced(const std::string& plural) const {
  for (size_t i = 0; i < informers_.size(); ++i) {
    if (names_[i] == plural) {
      return informers_[i]->HasSynced();
    }
  }
  return false;
}

std::vector<std::pair<std::string, std::optional<absl::Time>>> ClusterWatch::StaleSince() const {
  std::vector<std::pair<std::string, std::optional<absl::Time>>> out;
  for (size_t i = 0; i < informers_.size(); ++i) {
    out.emplace_back(names_[i], informers_[i]->StaleSince());
  }
  return out;
}

std::string ClusterWatch::Summary() const {
  std::vector<std::string> parts;
  for (size_t i = 0; i < informers_.size(); ++i) {
    parts.push_back(absl::StrCat(names_[i], "=", informers_[i]->Size()));
  }
  return absl::StrJoin(parts, " ");
}

}  // namespace dralens::app
