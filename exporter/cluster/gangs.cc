#include "exporter/cluster/gangs.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "src/telemetry/catalog.h"

namespace dralens::exporter::cluster {
namespace {

using nlohmann::json;

std::string Str(const json& obj, const char* key) {
  if (!obj.is_object()) {
    return "";
  }
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

const json& Member(const json& obj, const char* key) {
  static const json* const kNull = new json();
  if (!obj.is_object()) {
    return *kNull;
  }
  auto it = obj.find(key);
  return it == obj.end() ? *kNull : *it;
}

constexpr char kSep = '\x1f';

std::string GangKey(const std::string& ns, const std::string& workload, const std::string& group,
                    const std::string& replica) {
  return absl::StrCat(ns, std::string(1, kSep), workload, std::string(1, kSep), group,
                      std::string(1, kSep), replica);
}

}  // namespace

GangTracker::GangTracker(Analyzer& analyzer, prometheus::Registry& registry, common::Clock* clock)
    : analyzer_(analyzer),
      clock_(clock != nullptr ? *clock : common::RealClock()),
      pending_gangs_(telemetry::BuildGauge(registry, "dralens_cluster_pending_gangs")),
      text_series_(std::make_shared<telemetry::TextFamilies>()),
      age_(text_series_->AddGauge("dralens_cluster_pending_gang_age_seconds")),
      short_(text_series_->AddGauge("dralens_cluster_pending_gang_short_devices")) {}

void GangTracker::UpsertWorkload(const json& workload) {
  const json& md = Member(workload, "metadata");
  std::map<std::string, int64_t> groups;
  const json& pod_groups = Member(Member(workload, "spec"), "podGroups");
  if (pod_groups.is_array()) {
    for (const json& g : pod_groups) {
      const json& min = Member(Member(Member(g, "policy"), "gang"), "minCount");
      groups[Str(g, "name")] =
          min.is_number_integer() ? std::max<int64_t>(0, min.get<int64_t>()) : 0;
    }
  }
  absl::MutexLock lock(&mu_);
  workloads_[absl::StrCat(Str(md, "namespace"), "/", Str(md, "name"))] = std::move(groups);
}

void GangTracker::DeleteWorkload(const std::string& ns, const std::string& name) {
  absl::MutexLock lock(&mu_);
  workloads_.erase(absl::StrCat(ns, "/", name));
}

void GangTracker::UpsertPod(const json& pod) {
  const json& md = Member(pod, "metadata");
  const std::string key = absl::StrCat(Str(md, "namespace"), "/", Str(md, "name"));
  const json& spec = Member(pod, "spec");
  const json& ref = Member(spec, "workloadRef");
  if (!ref.is_object()) {
    absl::MutexLock lock(&mu_);
    pods_.erase(key);
    return;
  }
  PodInfo info;
  info.gang = GangKey(Str(md, "namespace"), Str(ref, "name"), Str(ref, "podGroup"),
                      Str(ref, "podGroupReplicaKey"));
  absl::Time created;
  std::string err;
  info.created = absl::ParseTime(absl::RFC3339_full, Str(md, "creationTimestamp"), &created, &err)
                     ? created
                     : clock_.Now();
  info.scheduled = !Str(spec, "nodeName").empty();
  // The claims the pod uses: named ones, and those generated from templates (in its status).
  std::set<std::string> claims;
  const json& refs = Member(spec, "resourceClaims");
  if (refs.is_array()) {
    for (const json& r : refs) {
      if (std::string name = Str(r, "resourceClaimName"); !name.empty()) {
        claims.insert(name);
      }
    }
  }
  const json& statuses = Member(Member(pod, "status"), "resourceClaimStatuses");
  if (statuses.is_array()) {
    for (const json& s : statuses) {
      if (std::string name = Str(s, "resourceClaimName"); !name.empty()) {
        claims.insert(name);
      }
    }
  }
  info.claims.assign(claims.begin(), claims.end());
  absl::MutexLock lock(&mu_);
  pods_[key] = std::move(info);
}

void GangTracker::DeletePod(const std::string& ns, const std::string& name) {
  absl::MutexLock lock(&mu_);
  pods_.erase(absl::StrCat(ns, "/", name));
}

void GangTracker::Refresh() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_.Now();
  std::map<std::string, GangView> gangs;
  // Per gang, the claims of each of its unscheduled pods.
  std::map<std::string, std::vector<const std::vector<std::string>*>> unscheduled;
  for (const auto& [pod, info] : pods_) {
    std::vector<std::string> parts = absl::StrSplit(info.gang, kSep);
    parts.resize(4);
    auto workload = workloads_.find(absl::StrCat(parts[0], "/", parts[1]));
    if (workload == workloads_.end()) {
      continue;  // no Workload (yet): kube-scheduler keeps such pods unschedulable
    }
    auto group = workload->second.find(parts[2]);
    if (group == workload->second.end() || group->second <= 0) {
      continue;  // not a gang: its pods are scheduled one by one
    }
    GangView& g = gangs[info.gang];
    if (g.pods == 0) {
      g.ns = parts[0];
      g.workload = parts[1];
      g.pod_group = parts[2];
      g.replica = parts[3];
      g.min_count = group->second;
      g.since = info.created;
    }
    ++g.pods;
    g.since = std::min(g.since, info.created);
    if (info.scheduled) {
      ++g.scheduled;
    } else {
      unscheduled[info.gang].push_back(&info.claims);
    }
  }
  std::map<std::string, int64_t> per_namespace;
  for (auto it = gangs.begin(); it != gangs.end();) {
    it = it->second.pending() ? std::next(it) : gangs.erase(it);
  }
  for (auto& [key, g] : gangs) {
    // kube-scheduler needs minCount - scheduled more pods to fit, not all of them: the pods
    // that lack least alone are placed together.
    std::vector<std::pair<int64_t, const std::vector<std::string>*>> pods;
    for (const std::vector<std::string>* claims : unscheduled[key]) {
      pods.emplace_back(analyzer_.ShortTogether(g.ns, *claims), claims);
      g.claims.insert(g.claims.end(), claims->begin(), claims->end());
    }
    std::stable_sort(pods.begin(), pods.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::string> together;
    const int64_t needed =
        std::min<int64_t>(g.min_count - g.scheduled, static_cast<int64_t>(pods.size()));
    for (int64_t i = 0; i < needed; ++i) {
      together.insert(together.end(), pods[i].second->begin(), pods[i].second->end());
    }
    std::sort(g.claims.begin(), g.claims.end());
    g.claims.erase(std::unique(g.claims.begin(), g.claims.end()), g.claims.end());
    g.short_devices = analyzer_.ShortTogether(g.ns, together);
    ++per_namespace[g.ns];
    Series& s = series_[key];
    if (s.age == nullptr) {
      const prometheus::Labels labels = {{"namespace", g.ns},
                                         {"workload", g.workload},
                                         {"pod_group", g.pod_group},
                                         {"replica", g.replica}};
      s.age = &age_.Add(labels);
      s.short_devices = &short_.Add(labels);
    }
    s.age->Set(std::max(0.0, absl::ToDoubleSeconds(now - g.since)));
    s.short_devices->Set(static_cast<double>(g.short_devices));
  }
  for (auto it = series_.begin(); it != series_.end();) {
    if (gangs.count(it->first) > 0) {
      ++it;
      continue;
    }
    age_.Remove(it->second.age);
    short_.Remove(it->second.short_devices);
    it = series_.erase(it);
  }
  for (auto it = per_namespace_.begin(); it != per_namespace_.end();) {
    if (per_namespace.count(it->first) == 0) {
      pending_gangs_.Remove(it->second);
      it = per_namespace_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [ns, n] : per_namespace) {
    prometheus::Gauge*& gauge = per_namespace_[ns];
    if (gauge == nullptr) {
      gauge = &pending_gangs_.Add({{"namespace", ns}});
    }
    gauge->Set(static_cast<double>(n));
  }
  gangs_ = std::move(gangs);
}

std::vector<GangView> GangTracker::Gangs() const {
  absl::MutexLock lock(&mu_);
  std::vector<GangView> out;
  for (const auto& [key, g] : gangs_) {
    out.push_back(g);
  }
  return out;
}

std::optional<GangView> GangTracker::GangOfClaim(const std::string& ns,
                                                 const std::string& claim) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [key, g] : gangs_) {
    if (g.ns == ns && std::binary_search(g.claims.begin(), g.claims.end(), claim)) {
      return g;
    }
  }
  return std::nullopt;
}

k8s::InformerHandlers GangTracker::WorkloadHandlers() {
  k8s::InformerHandlers h;
  h.on_add = [this](const json& o) { UpsertWorkload(o); };
  h.on_update = [this](const json&, const json& o) { UpsertWorkload(o); };
  h.on_delete = [this](const json& o) {
    const json& md = Member(o, "metadata");
    DeleteWorkload(Str(md, "namespace"), Str(md, "name"));
  };
  return h;
}

k8s::InformerHandlers GangTracker::PodHandlers() {
  k8s::InformerHandlers h;
  h.on_add = [this](const json& o) { UpsertPod(o); };
  h.on_update = [this](const json&, const json& o) { UpsertPod(o); };
  h.on_delete = [this](const json& o) {
    const json& md = Member(o, "metadata");
    DeletePod(Str(md, "namespace"), Str(md, "name"));
  };
  return h;
}

}  // namespace dralens::exporter::cluster
