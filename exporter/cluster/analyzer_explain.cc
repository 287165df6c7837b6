// Analyzer::Explain: a claim's funnel or placement, computed on demand from the cache.
#include <algorithm>
#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/analyzer_state.h"

namespace dralens::exporter::cluster {
namespace {

constexpr size_t kNearNodes = 3;  // nodes a near miss names before "and N more"

struct NearGroup {
  int64_t devices = 0;
  std::set<std::string> nodes;
};

// The largest group (ties: the first in key order), as a NearMiss.
std::optional<NearMiss> Largest(
    const std::map<std::pair<std::string, std::string>, NearGroup>& groups, bool taint) {
  const std::pair<const std::pair<std::string, std::string>, NearGroup>* best = nullptr;
  for (const auto& g : groups) {
    if (best == nullptr || g.second.devices > best->second.devices) {
      best = &g;
    }
  }
  if (best == nullptr) {
    return std::nullopt;
  }
  NearMiss near;
  near.devices = best->second.devices;
  near.product = best->first.first;
  (taint ? near.taint : near.selector) = best->first.second;
  for (const std::string& node : best->second.nodes) {
    if (near.nodes.size() < kNearNodes) {
      near.nodes.push_back(node);
    } else {
      ++near.more_nodes;
    }
  }
  return near;
}

}  // namespace

RequestFunnel Analyzer::LeafFunnel(const std::shared_ptr<Request>& leaf) {
  RequestFunnel f;
  f.request = leaf->name;
  f.device_class = leaf->device_class;
  f.all = leaf->all;
  f.count = leaf->count;
  if (classes_.count(leaf->device_class) == 0) {
    f.class_exists = false;
    f.reason = PendingReason::kUnsatisfiable;
    return f;
  }
  std::unordered_set<const Claim*> holders;
  // (product, selector) and (product, taint) -> free devices kept out by only that.
  std::map<std::pair<std::string, std::string>, NearGroup> near_selector, near_taint;
  for (const auto* index : {&class_devices_, &class_unknown_}) {
    auto keys = index->find(leaf->device_class);
    if (keys == index->end()) {
      continue;
    }
    const bool sure = index == &class_devices_;
    for (const auto& [order, device] : keys->second) {
      Device& d = *device;
      f.class_devices += sure;
      const fit::Match m = LeafMatch(*leaf, d);
      const bool allocated = state_.DeviceAllocated(d);
      const bool blocked = !allocated && state_.DeviceBlocked(d);
      const bool down = state_.NodeDown(d.node);
      const bool free = !allocated && !blocked && !down;
      f.unknown += m == fit::Match::kUnknown;
      f.matching += m == fit::Match::kTainted || m == fit::Match::kMatch;
      if (m == fit::Match::kMatch) {
        ++f.untainted;
        if (free) {
          ++f.free;
        } else if (allocated) {
          ++f.allocated;
          if (const ClusterState::Holders* h = ClusterState::HoldersOf(d); h != nullptr) {
            for (const auto& [claim, consumed] : *h) {
              holders.insert(claim);
            }
          }
        } else if (blocked) {
          ++f.blocked;
        } else {
          ++f.node_down;
        }
      }
      if (!free || !sure) {
        continue;
      }
      // The NoSchedule/NoExecute taint the request does not tolerate, if any (only a device the
      // selectors keep out, or a tainted match, can have one that matters).
      const model::DeviceTaint* untolerated =
          m == fit::Match::kNoMatch || m == fit::Match::kTainted
              ? fit::UntoleratedTaint(d.spec.taints, leaf->tolerations)
              : nullptr;
      if (m == fit::Match::kNoMatch && untolerated == nullptr) {
        // The class matches; is it one of the request's selectors alone that keeps it out (every
        // other one surely true)?
        std::vector<int> failing;
        bool others_true = true;
        for (int s : leaf->selectors) {
          const cel::Verdict v = Evaluate(d, s);
          if (v == cel::Verdict::kFalse) {
            failing.push_back(s);
          } else if (v != cel::Verdict::kTrue) {
            others_true = false;
          }
        }
        if (failing.size() == 1 && others_true) {
          NearGroup& g = near_selector[{d.product(), expressions_[failing.front()]}];
          ++g.devices;
          g.nodes.insert(d.node);
        }
      } else if (m == fit::Match::kTainted && untolerated != nullptr) {
        const model::DeviceTaint& taint = *untolerated;
        NearGroup& g =
            near_taint[{d.product(), absl::StrCat(taint.key, taint.value.empty() ? "" : "=",
                                                  taint.value, ":", taint.effect)}];
        ++g.devices;
        g.nodes.insert(d.node);
      }
    }
  }
  f.holders = static_cast<int64_t>(holders.size());
  LeafCounts counts;
  counts.request = leaf;
  counts.unknown = f.unknown;
  counts.matching = f.matching;
  counts.untainted = f.untainted;
  counts.free = f.free;
  f.reason = ReasonOfLeaf(counts);
  if (f.reason == PendingReason::kTainted) {
    f.nearest = Largest(near_taint, true);
  } else if (f.reason == PendingReason::kUnsatisfiable || f.reason == PendingReason::kNoCapacity) {
    f.nearest = Largest(near_selector, false);
  }
  return f;
}

RequestFunnel Analyzer::CachedLeafFunnel(const std::shared_ptr<Request>& leaf, FunnelCache* cache,
                                         size_t scan_limit) {
  auto compute = [&]() -> RequestFunnel {
    size_t devices = 0;
    for (const auto* index : {&class_devices_, &class_unknown_}) {
      if (auto keys = index->find(leaf->device_class); keys != index->end()) {
        devices += keys->second.size();
      }
    }
    auto counts = leaves_.find(leaf->signature);
    if (devices <= scan_limit || counts == leaves_.end() ||
        classes_.count(leaf->device_class) == 0) {
      return LeafFunnel(leaf);
    }
    RequestFunnel f;
    f.request = leaf->name;
    f.device_class = leaf->device_class;
    f.all = leaf->all;
    f.count = leaf->count;
    f.counts_only = true;
    auto sure = class_devices_.find(leaf->device_class);
    f.class_devices = sure == class_devices_.end() ? 0 : static_cast<int64_t>(sure->second.size());
    const LeafCounts& c = *counts->second;
    f.unknown = c.unknown;
    f.matching = c.matching;
    f.untainted = c.untainted;
    f.free = c.free;
    f.reason = ReasonOfLeaf(c);
    return f;
  };
  if (cache == nullptr) {
    return compute();
  }
  auto it = cache->find(leaf->signature);
  if (it == cache->end()) {
    it = cache->emplace(leaf->signature, compute()).first;
  }
  RequestFunnel f = it->second;
  f.request = leaf->name;  // the shape is shared; the request's name is the claim's own
  return f;
}

std::optional<ClaimExplanation> Analyzer::Explain(const std::string& ns, const std::string& name,
                                                  FunnelCache* funnels, size_t scan_limit) {
  absl::MutexLock lock(&mu_);
  const Claim* found = state_.FindClaim(absl::StrCat(ns, "/", name));
  if (found == nullptr) {
    return std::nullopt;
  }
  const Claim& c = *found;
  ClaimExplanation e;
  e.ns = c.ns();
  e.name = std::string(c.name);
  e.uid = c.uid;
  e.state = c.has_state ? c.state : StateOfClaim(c);
  e.created = c.created;
  e.now = clock_.Now();
  if (e.state == ClaimState::kPending) {
    PendingReason worst = PendingReason::kWaitingForPod;
    for (const std::shared_ptr<Request>& r : c.requests) {
      RequestFunnel f;
      if (r->alternatives.empty()) {
        f = CachedLeafFunnel(r, funnels, scan_limit);
      } else {
        f.request = r->name;
        f.device_class = r->device_class;
        f.reason = PendingReason::kUnsatisfiable;
        for (const std::shared_ptr<Request>& alt : r->alternatives) {
          f.options.push_back(CachedLeafFunnel(alt, funnels, scan_limit));
          f.reason = std::max(f.reason, f.options.back().reason);  // the best option
        }
      }
      worst = std::min(worst, f.reason);
      e.requests.push_back(std::move(f));
    }
    e.reason = worst;
    return e;
  }
  e.allocated_at = c.allocation_time;
  for (const auto& [key, cls] : c.devices) {
    PlacedDevice p;
    std::vector<std::string> parts = absl::StrSplit(key, absl::MaxSplits('/', 2));
    parts.resize(3);
    p.driver = parts[0];
    p.pool = parts[1];
    p.device = parts[2];
    p.device_class = cls;
    if (const Device* d = state_.FindDevice(key); d != nullptr) {
      const Device& dev = *d;
      p.node = dev.node;
      p.product = dev.product();
      p.pcie_root = dev.spec.StringAttribute("pcieRoot");
      p.nvlink_domain = dev.spec.StringAttribute("nvlinkDomain");
      if (const std::optional<model::DeviceAttribute> numa = dev.spec.Attribute("numaNode");
          numa.has_value() && numa->AsInt() != nullptr) {
        p.numa_node = *numa->AsInt();
      }
    }
    e.devices.push_back(std::move(p));
  }
  e.topology = c.spread;
  e.topology_sensitive = topology_sensitive_.count(c.device_class()) > 0;
  e.reserved_for = c.reserved_pods;
  for (const Key& pod : c.reserved_pods) {
    if (state_.PodRunning(pod)) {
      e.running_pods.push_back(pod);
    }
  }
  const auto [seconds, cost] = CurrentSpend(c, e.now, &e.gpus);
  e.gpu_seconds = c.spent_gpu_seconds + seconds;
  e.cost = c.spent_cost + cost;
  return e;
}

std::pair<double, double> Analyzer::CurrentSpend(const Claim& claim, absl::Time now, double* gpus) {
  if (gpus != nullptr) {
    *gpus = 0;
  }
  const double seconds = claim.allocated && claim.allocation_time.has_value()
                             ? std::max(0.0, absl::ToDoubleSeconds(now - *claim.allocation_time))
                             : 0;
  if (seconds == 0 && gpus == nullptr) {
    return {0, 0};  // nothing spent, and what it holds is not asked for
  }
  // The GPUs it holds (part of), each once, by node and place on the node.
  std::map<std::pair<std::string, uint32_t>, const Device*> gpus_held;
  for (const Device* d : claim.device_records) {
    if (d != nullptr) {
      gpus_held.emplace(std::make_pair(d->node, d->gpu_first), d);
    }
  }
  std::map<std::pair<std::string, std::string>, double> held;  // (class, product) -> GPUs
  std::vector<GpuPartEntry> unused;
  for (const auto& [place, d] : gpus_held) {
    TallyGpu(state_.GpuOf(*d), state_.NodeDown(d->node), 0, unused, &claim, &held);
  }
  double gpu_seconds = 0;
  double cost = 0;
  for (const auto& [class_product, part] : held) {
    if (gpus != nullptr) {
      *gpus += part;
    }
    gpu_seconds += part * seconds;
    cost += part * seconds / 3600 * prices_.PriceOf(class_product.first, class_product.second);
  }
  return {gpu_seconds, cost};
}

void Analyzer::VisitPending(absl::FunctionRef<void(const PendingView&)> visit) {
  absl::MutexLock lock(&mu_);
  for (const Claim* c : pending_) {
    if (c->reason.has_value()) {
      visit({c->key, c->ns(), c->name, c->uid, *c->reason, c->created});
    }
  }
}

}  // namespace dralens::exporter::cluster
