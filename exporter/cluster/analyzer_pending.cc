#include <algorithm>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/analyzer_state.h"
#include "src/common/log.h"
#include "src/telemetry/catalog.h"

namespace dralens::exporter::cluster {

// --- counts per pending request shape ------------------------------------------------------------

fit::Match Analyzer::LeafMatch(const Request& leaf, Device& device) {
  auto cls = classes_.find(leaf.device_class);
  if (cls == classes_.end()) {
    return fit::Match::kNoMatch;
  }
  return fit::MatchDevice([&] { return MatchesAll(device, cls->second); },
                          [&] { return MatchesAll(device, leaf.selectors); }, device.spec.taints,
                          leaf.tolerations);
}

namespace {

// A device's part in a leaf's counts, by how it stands to the leaf.
bool Unknown(fit::Match m) { return m == fit::Match::kUnknown; }
bool Matching(fit::Match m) { return m == fit::Match::kTainted || m == fit::Match::kMatch; }
bool Untainted(fit::Match m) { return m == fit::Match::kMatch; }

}  // namespace

void Analyzer::CountDevice(Device& device, int sign) {
  if ((sign > 0) == device.counted) {
    return;
  }
  device.counted = sign > 0;
  for (auto& [signature, leaf] : leaves_) {
    const fit::Match m = LeafMatch(*leaf->request, device);
    if (m == fit::Match::kNoMatch) {
      continue;
    }
    leaf->unknown += sign * Unknown(m);
    leaf->matching += sign * Matching(m);
    leaf->untainted += sign * Untainted(m);
    if (Untainted(m) && device.counted_free) {
      MoveFree(*leaf, device.node, sign);
    }
    dirty_leaves_.insert(signature);
  }
}

void Analyzer::RefreshFree(Device& device) {
  if (!device.counted) {
    return;
  }
  const bool free = !state_.DeviceAllocated(device) && !state_.DeviceBlocked(device) &&
                    !state_.NodeDown(device.node);
  if (free == device.counted_free) {
    return;
  }
  device.counted_free = free;
  for (auto& [signature, leaf] : leaves_) {
    if (Untainted(LeafMatch(*leaf->request, device))) {
      MoveFree(*leaf, device.node, free ? 1 : -1);
      dirty_leaves_.insert(signature);
    }
  }
}

void Analyzer::RefreshNodeDevices(const std::string& node) {
  for (Device* d : state_.DevicesOn(node)) {
    RefreshFree(*d);
  }
}

void Analyzer::RecountLeaf(LeafCounts& leaf) {
  leaf.unknown = leaf.matching = leaf.untainted = leaf.free = 0;
  leaf.free_nodes.clear();
  for (const auto* index : {&class_devices_, &class_unknown_}) {
    auto keys = index->find(leaf.request->device_class);
    if (keys == index->end()) {
      continue;
    }
    for (const auto& [order, device] : keys->second) {
      Device& d = *device;
      if (!d.counted) {
        continue;
      }
      const fit::Match m = LeafMatch(*leaf.request, d);
      leaf.unknown += Unknown(m);
      leaf.matching += Matching(m);
      leaf.untainted += Untainted(m);
      if (Untainted(m) && d.counted_free) {
        MoveFree(leaf, d.node, 1);
      }
    }
  }
  dirty_leaves_.insert(leaf.request->signature);
}

PendingReason Analyzer::ReasonOfLeaf(const LeafCounts& leaf) const {
  const Request& r = *leaf.request;
  return ReasonOf({.class_exists = classes_.contains(r.device_class),
                   .all = r.all,
                   .count = r.count,
                   .unknown = leaf.unknown > 0,
                   .matching = leaf.matching,
                   .untainted = leaf.untainted,
                   .free = leaf.free});
}

std::vector<std::shared_ptr<Request>> Analyzer::LeavesOf(const std::shared_ptr<Request>& request) {
  if (request->alternatives.empty()) {
    return {request};
  }
  return request->alternatives;
}

void Analyzer::MoveFree(LeafCounts& leaf, const std::string& node, int delta) {
  leaf.free += delta;
  int& on_node = leaf.free_nodes[node];
  on_node += delta;
  if (on_node <= 0) {
    leaf.free_nodes.erase(node);
  }
}

void Analyzer::MarkShapeNodesDirty(const std::shared_ptr<Request>& request) {
  for (const std::shared_ptr<Request>& part : LeavesOf(request)) {
    if (auto leaf = leaves_.find(part->signature); leaf != leaves_.end()) {
      for (const auto& [node, n] : leaf->second->free_nodes) {
        dirty_tallies_.insert(node);
      }
    }
  }
}

void Analyzer::RegisterShape(const PendingShape& shape, const std::string& signature) {
  for (const std::shared_ptr<Request>& part : LeavesOf(shape.request)) {
    std::unique_ptr<LeafCounts>& leaf = leaves_[part->signature];
    if (leaf == nullptr) {
      leaf = std::make_unique<LeafCounts>();
      leaf->request = part;
      RecountLeaf(*leaf);
    }
    leaf->shapes.insert(signature);
  }
}

void Analyzer::UnregisterShape(const PendingShape& shape, const std::string& signature) {
  for (const std::shared_ptr<Request>& part : LeavesOf(shape.request)) {
    auto leaf = leaves_.find(part->signature);
    if (leaf == leaves_.end()) {
      continue;
    }
    leaf->second->shapes.erase(signature);
    if (leaf->second->shapes.empty()) {
      dirty_leaves_.erase(leaf->first);
      leaves_.erase(leaf);
    }
  }
}

PendingReason Analyzer::ReasonOfClaim(const Claim& claim) {
  absl::InlinedVector<PendingReason, 4> reasons;  // no allocation on this path for most claims
  for (const auto& r : claim.requests) {
    reasons.push_back(ReasonOfRequest(*r));
  }
  return WorstOf(reasons);
}

void Analyzer::DeleteClaim(const model::ResourceClaim& obj) {
  absl::MutexLock lock(&mu_);
  DeleteClaimLocked(absl::StrCat(obj.metadata.namespace_name, "/", obj.metadata.name));
  Flush();
}

void Analyzer::DeleteClaimLocked(const Key& key) {
  Claim* found = state_.FindClaim(key);
  if (found == nullptr) {
    return;
  }
  Claim& claim = *found;
  if (claim.pending) {
    LeavePending(claim);
  }
  // What the claim cost over its life, for its lifecycle span.
  const auto [seconds, cost] = CurrentSpend(claim, clock_.Now(), nullptr);
  SetClaimAllocations(claim, {}, {});
  state_.SetReservations(claim, {});
  if (claim.has_state) {
    auto c = claim_counts_.find(
        LabelKey{{static_cast<uint32_t>(claim.state), claim.class_id, claim.ns_id}});
    if (c != claim_counts_.end()) {
      c->second.first->Set(--c->second.second);
    }
  }
  RecordTransition(claim, Transition::kDeleted);
  LifecycleTracer::End(*claim.span, claim.spent_gpu_seconds + seconds, claim.spent_cost + cost);
  state_.EraseClaim(key);
}

}  // namespace dralens::exporter::cluster
