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

// --- claims ------------------------------------------------------------------------------------

namespace {

std::string SignatureOf(absl::string_view device_class, const std::vector<model::DeviceSelector>& s,
                        const std::vector<model::DeviceToleration>& tolerations,
                        absl::string_view mode, int64_t count) {
  std::string out = absl::StrCat(device_class, "\x1f", mode, "\x1f", count);
  for (const model::DeviceSelector& selector : s) {
    if (selector.cel.has_value()) {
      absl::StrAppend(&out, "\x1f", selector.cel->expression);
    }
  }
  for (const model::DeviceToleration& t : tolerations) {
    absl::StrAppend(&out, "\x1e", t.key, "\x1d", t.op, "\x1d", t.value, "\x1d", t.effect);
  }
  return out;
}

}  // namespace

void Analyzer::UpsertClaim(const model::ResourceClaim& obj) {
  absl::MutexLock lock(&mu_);
  const Key key = absl::StrCat(obj.metadata.namespace_name, "/", obj.metadata.name);
  Claim* found = state_.FindClaim(key);
  if (found != nullptr && found->uid != obj.metadata.uid) {
    // Same name, new object: the old one is gone.
    DeleteClaimLocked(key);
    found = nullptr;
  }
  if (found == nullptr) {
    auto c = std::make_unique<Claim>();
    c->key = key;
    c->ns_id = labels_.Id(obj.metadata.namespace_name);
    c->ns_name = &labels_.Value(c->ns_id);
    c->name = absl::string_view(c->key).substr(c->ns().size() + 1);
    c->uid = obj.metadata.uid;
    c->created = obj.metadata.creation_timestamp.value_or(clock_.Now());
    auto build = [&](const std::string& name, const std::string& cls,
                     const std::vector<model::DeviceSelector>& selectors,
                     const std::vector<model::DeviceToleration>& tolerations,
                     const std::string& mode, int64_t count) {
      auto r = std::make_shared<Request>();
      r->name = name;
      r->device_class = cls;
      r->tolerations = tolerations;
      r->all = mode == "All";
      r->count = count > 0 ? count : 1;
      r->signature = SignatureOf(cls, selectors, tolerations, mode, r->count);
      for (const model::DeviceSelector& s : selectors) {
        if (s.cel.has_value()) {
          r->selectors.push_back(SelectorId(s.cel->expression));
        }
      }
      return r;
    };
    for (const model::DeviceRequest& req : obj.spec.devices.requests) {
      if (req.exactly.has_value()) {
        const model::ExactDeviceRequest& e = *req.exactly;
        c->requests.push_back(
            state_.SharedRequest(build(req.name, e.device_class_name, e.selectors, e.tolerations,
                                       e.allocation_mode, e.count)));
      } else {
        auto r = std::make_shared<Request>();
        r->name = req.name;
        for (const model::DeviceSubRequest& sub : req.first_available) {
          r->alternatives.push_back(build(absl::StrCat(req.name, "/", sub.name),
                                          sub.device_class_name, sub.selectors, sub.tolerations,
                                          sub.allocation_mode, sub.count));
          absl::StrAppend(&r->signature, "\x1c", r->alternatives.back()->signature);
        }
        r->device_class =
            r->alternatives.empty() ? std::string() : r->alternatives.front()->device_class;
        c->requests.push_back(state_.SharedRequest(std::move(r)));
      }
    }
    c->class_id =
        labels_.Id(c->requests.empty() ? std::string() : c->requests.front()->device_class);
    c->class_name = &labels_.Value(c->class_id);
    c->span =
        lifecycle_.Begin(c->ns(), std::string(c->name), c->uid, c->device_class(), c->created);
    found = &state_.AddClaim(std::move(c));
    RecordTransition(*found, Transition::kCreated);
  }
  Claim& claim = *found;

  // The class of each request (and sub-request) by the name allocation results use.
  std::map<std::string, std::string> class_of;
  for (const model::DeviceRequest& req : obj.spec.devices.requests) {
    if (req.exactly.has_value()) {
      class_of[req.name] = req.exactly->device_class_name;
    }
    for (const model::DeviceSubRequest& sub : req.first_available) {
      class_of[absl::StrCat(req.name, "/", sub.name)] = sub.device_class_name;
    }
  }
  std::vector<std::pair<Key, std::string>> devices;
  std::map<Key, std::map<std::string, double>> consumed;
  const auto& allocation = obj.status.allocation;
  if (claim.allocated && !allocation.has_value()) {
    // Deallocated: what the allocation cost stays with the claim (explain, and its span).
    const auto [seconds, cost] = CurrentSpend(claim, clock_.Now(), nullptr);
    claim.spent_gpu_seconds += seconds;
    claim.spent_cost += cost;
  }
  if (allocation.has_value()) {
    for (const model::DeviceRequestAllocationResult& r : allocation->devices.results) {
      Key device = DeviceKey(r.driver, r.pool, r.device);
      devices.emplace_back(device, class_of[r.request]);
      auto& capacity = consumed[device];
      for (const auto& [name, value] : r.consumed_capacity) {
        capacity[name] += value.AsApproximateDouble();
      }
    }
    if (allocation->allocation_timestamp.has_value()) {
      claim.allocation_time = allocation->allocation_timestamp;
    } else if (!claim.allocated && (claim.has_state || deriving_)) {
      // No timestamp: when this replica saw the allocation happen. A claim that was already
      // allocated in the initial LIST has no known allocation time.
      claim.allocation_time = clock_.Now();
    }
  } else {
    claim.allocation_time.reset();
  }
  claim.allocated = allocation.has_value();
  SetClaimAllocations(claim, std::move(devices), std::move(consumed));
  std::vector<Key> pods;
  for (const model::ResourceClaimConsumerReference& ref : obj.status.reserved_for) {
    if (ref.resource == "pods" && ref.api_group.empty()) {
      pods.push_back(absl::StrCat(claim.ns(), "/", ref.name));
    }
  }
  state_.SetReservations(claim, std::move(pods));
  RefreshClaimState(claim);
  Flush();
}

void Analyzer::SetClaimAllocations(Claim& claim, std::vector<std::pair<Key, std::string>> devices,
                                   std::map<Key, std::map<std::string, double>> consumed) {
  const std::set<Key> touched =
      state_.SetAllocations(claim, std::move(devices), std::move(consumed));
  if (touched.empty()) {
    return;  // claim.devices is as it was
  }
  // The class of its devices when one serves all (a device's own class, else the claim's).
  claim.held_class = nullptr;
  for (const auto& [key, cls] : claim.devices) {
    const std::string* c = cls.empty() ? &claim.device_class() : &cls;
    if (claim.held_class != nullptr && *claim.held_class != *c) {
      claim.held_class = nullptr;
      break;
    }
    claim.held_class = c;
  }
  claim.held_class_id = claim.held_class != nullptr ? labels_.Id(*claim.held_class) : 0;
  for (const Key& device : touched) {
    AllocationChanged(device);
  }
  RefreshSpread(claim);
}

bool Analyzer::ByClaimKey::operator()(const Claim* a, const Claim* b) const {
  return a->key < b->key;
}

ClaimState Analyzer::StateOfClaim(const Claim& claim) const {
  const bool running = std::any_of(claim.reserved_pods.begin(), claim.reserved_pods.end(),
                                   [this](const Key& pod) { return state_.PodRunning(pod); });
  return ClaimStateOf(claim.allocated, !claim.reserved_pods.empty(), running);
}

void Analyzer::RecordTransition(Claim& claim, cluster::Transition to) {
  transition_counters_[to]->Increment();
  LifecycleTracer::OnTransition(*claim.span, to);
}

void Analyzer::RefreshClaimState(Claim& claim) {
  const ClaimState state = StateOfClaim(claim);
  const bool had_state = claim.has_state;
  const ClaimState old = claim.state;
  if (had_state && old == state) {
    return;
  }
  auto count = [&](ClaimState s, int delta) {
    const LabelKey labels = {{static_cast<uint32_t>(s), claim.class_id, claim.ns_id}};
    auto [it, inserted] = claim_counts_.emplace(labels, std::make_pair(nullptr, 0));
    if (inserted) {
      it->second.first = &claims_.Add({{"state", std::string(ToString(s))},
                                       {"device_class", claim.device_class()},
                                       {"namespace", claim.ns()}});
    }
    it->second.second += delta;
    it->second.first->Set(it->second.second);
  };
  if (had_state) {
    count(old, -1);
  }
  count(state, +1);
  claim.has_state = true;
  claim.state = state;

  const bool was_allocated = had_state && old != ClaimState::kPending;
  const bool was_reserved =
      had_state && (old == ClaimState::kReserved || old == ClaimState::kInUse);
  const bool reserved = state == ClaimState::kReserved || state == ClaimState::kInUse;
  if (state == ClaimState::kPending) {
    claim.seen_pending = true;
  }
  if (!was_allocated && state != ClaimState::kPending) {
    RecordTransition(claim, Transition::kAllocated);
    if (claim.seen_pending) {
      absl::Time at = claim.allocation_time.value_or(clock_.Now());
      auto [it, inserted] = latency_.emplace(claim.device_class(), nullptr);
      if (inserted) {
        it->second =
            &allocation_latency_.Add({{"device_class", claim.device_class()}}, LatencyBuckets());
      }
      it->second->Observe(std::max(0.0, absl::ToDoubleSeconds(at - claim.created)));
    }
  }
  if (!was_reserved && reserved) {
    RecordTransition(claim, Transition::kReserved);
  }
  if (was_reserved && !reserved) {
    RecordTransition(claim, Transition::kReleased);
  }
  if (state == ClaimState::kInUse && (!had_state || old != ClaimState::kInUse)) {
    RecordTransition(claim, Transition::kInUse);
  }
  if (state == ClaimState::kPending && !claim.pending) {
    EnterPending(claim);
  } else if (state != ClaimState::kPending && claim.pending) {
    LeavePending(claim);
  }
  // allocated_not_running follows the state of the claims holding a device.
  for (const Device* d : claim.device_records) {
    if (d != nullptr) {
      MarkGpuDirty(*d);
    }
  }
}

void Analyzer::EnterPending(Claim& claim) {
  claim.pending = true;
  pending_.insert(&claim);
  // free_while_pending goes to the class of the longest-pending claim that a node's free GPUs
  // could serve: when a shape appears or its longest-pending claim changes, only the nodes with
  // free devices that fit it can see their attribution move.
  for (const auto& r : claim.requests) {
    std::unique_ptr<PendingShape>& shape = pending_requests_[r->signature];
    if (shape == nullptr) {
      // The first pending shape: free MIG fragments may now count as unplaceable anywhere.
      pending_shape_changed_ = pending_shape_changed_ || pending_requests_.size() == 1;
      shape = std::make_unique<PendingShape>();
      shape->request = r;
      RegisterShape(*shape, r->signature);
    }
    auto [it, inserted] = shape->claims.insert({claim.created, &claim});
    if (inserted && it == shape->claims.begin()) {
      const auto was = std::next(it);
      if (was == shape->claims.end() || AttributionMayMove(*shape, *was, *it)) {
        MarkShapeNodesDirty(shape->request);
      }
    }
  }
  UpdatePendingSeries(claim);
}

void Analyzer::LeavePending(Claim& claim) {
  claim.pending = false;
  pending_.erase(&claim);
  for (const auto& r : claim.requests) {
    auto it = pending_requests_.find(r->signature);
    if (it == pending_requests_.end()) {
      continue;
    }
    auto& claims = it->second->claims;
    auto c = claims.find({claim.created, &claim});
    if (c != claims.end()) {
      if (c == claims.begin()) {
        const auto next = std::next(c);
        if (next == claims.end() || AttributionMayMove(*it->second, *c, *next)) {
          MarkShapeNodesDirty(it->second->request);  // before the shape's leaves may go
        }
      }
      claims.erase(c);
    }
    if (claims.empty()) {
      UnregisterShape(*it->second, it->first);
      pending_requests_.erase(it);
      // No pending claim left: free capacity is stranded nowhere.
      pending_shape_changed_ = pending_shape_changed_ || pending_requests_.empty();
    }
  }
  UpdatePendingSeries(claim);
}

bool Analyzer::AttributionMayMove(const PendingShape& shape, const PendingAge& from,
                                  const PendingAge& to) {
  const uint32_t from_class = from.claim->class_id;
  if (from_class != to.claim->class_id) {
    return true;
  }
  const ByAge before;
  const auto& [lo, hi] = std::minmax(from, to, before);
  for (const auto& [signature, other] : pending_requests_) {
    if (other.get() == &shape || other->claims.empty()) {
      continue;
    }
    const PendingAge& first = *other->claims.begin();
    if (before(lo, first) && before(first, hi) && first.claim->class_id != from_class) {
      return true;
    }
  }
  return false;
}

void Analyzer::UpdatePendingSeries(Claim& claim) {
  if (!deriving_) {
    return;  // SetSynced() derives every pending claim's reason once
  }
  std::optional<PendingReason> reason;
  if (claim.pending) {
    reason = ReasonOfClaim(claim);
  }
  if (reason != claim.reason) {
    auto count = [&](PendingReason r, int delta) {
      const LabelKey labels = {{claim.class_id, static_cast<uint32_t>(r)}};
      auto [it, inserted] = pending_counts_.emplace(labels, std::make_pair(nullptr, 0));
      if (inserted) {
        it->second.first = &pending_claims_.Add(
            {{"device_class", claim.device_class()}, {"reason", std::string(ToString(r))}});
      }
      it->second.second += delta;
      it->second.first->Set(it->second.second);
    };
    if (claim.reason.has_value()) {
      count(*claim.reason, -1);
    }
    if (claim.age) {
      pending_ages_->Erase(claim.key);
      claim.age = false;
    }
    if (reason.has_value()) {
      count(*reason, +1);
      // Labels in name order, as a registry family would give them.
      pending_ages_->Set(claim.key,
                         {{"claim", std::string(claim.name)},
                          {"device_class", claim.device_class()},
                          {"namespace", claim.ns()},
                          {"reason", std::string(ToString(*reason))}},
                         claim.created);
      claim.age = true;
      LifecycleTracer::OnPending(*claim.span, *reason);
    }
    claim.reason = reason;
  }
}

bool Analyzer::RequestFits(const Request& request, Device& device) {
  if (!request.alternatives.empty()) {
    for (const auto& alt : request.alternatives) {
      if (RequestFits(*alt, device)) {
        return true;
      }
    }
    return false;
  }
  return LeafMatch(request, device) == fit::Match::kMatch;
}

PendingReason Analyzer::ReasonOfRequest(const Request& request) {
  if (!request.alternatives.empty()) {
    absl::InlinedVector<PendingReason, 4> reasons;
    for (const auto& alt : request.alternatives) {
      reasons.push_back(ReasonOfRequest(*alt));
    }
    return BestOf(reasons);
  }
  if (auto leaf = leaves_.find(request.signature); leaf != leaves_.end()) {
    return ReasonOfLeaf(*leaf->second);
  }
  return ScanReason(request);
}

// The reason of a request that no pending claim holds (so it has no counts): one scan.
PendingReason Analyzer::ScanReason(const Request& request) {
  RequestCounts counts{.all = request.all, .count = request.count};
  counts.class_exists = classes_.contains(request.device_class);
  if (!counts.class_exists) {
    return ReasonOf(counts);
  }
  counts.unknown = !class_unknown_[request.device_class].empty();
  for (const auto& [order, device] : class_devices_[request.device_class]) {
    Device& d = *device;
    // The class surely matches these devices: what is left is the request's selectors and its
    // tolerations.
    const fit::Match m = LeafMatch(request, d);
    counts.unknown = counts.unknown || m == fit::Match::kUnknown;
    if (m == fit::Match::kNoMatch || m == fit::Match::kUnknown) {
      continue;
    }
    ++counts.matching;
    if (m == fit::Match::kTainted) {
      continue;
    }
    ++counts.untainted;
    if (!state_.DeviceAllocated(d) && !state_.DeviceBlocked(d) && !state_.NodeDown(d.node)) {
      ++counts.free;
    }
  }
  return ReasonOf(counts);
}

}  // namespace dralens::exporter::cluster
