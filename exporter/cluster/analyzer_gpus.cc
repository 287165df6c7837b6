#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/analyzer_state.h"
#include "src/common/log.h"
#include "src/telemetry/catalog.h"
#include "src/telemetry/exposition.h"

namespace dralens::exporter::cluster {

// --- derived series ----------------------------------------------------------------------------

void Analyzer::Flush() {
  if (!deriving_) {
    return;  // the dirty state accumulates until SetSynced()
  }
  // A claim's reason is a function of its requests' reasons, so only the claims of a shape
  // whose reason moved are touched: an allocation that crosses no threshold touches no claim.
  // (Ages are computed at scrape time.)
  if (rederive_all_) {
    rederive_all_ = false;
    dirty_leaves_.clear();
    for (auto& [signature, leaf] : leaves_) {
      leaf->last = ReasonOfLeaf(*leaf);
    }
    for (Claim* claim : pending_) {
      UpdatePendingSeries(*claim);
    }
  } else if (!dirty_leaves_.empty()) {
    std::set<std::string> dirty;
    dirty.swap(dirty_leaves_);
    std::set<std::string> shapes;
    for (const std::string& signature : dirty) {
      auto leaf = leaves_.find(signature);
      if (leaf == leaves_.end()) {
        continue;
      }
      const PendingReason reason = ReasonOfLeaf(*leaf->second);
      if (leaf->second->last != reason) {
        leaf->second->last = reason;
        shapes.insert(leaf->second->shapes.begin(), leaf->second->shapes.end());
      }
    }
    std::set<Claim*, ByClaimKey> claims;
    for (const std::string& signature : shapes) {
      if (auto shape = pending_requests_.find(signature); shape != pending_requests_.end()) {
        for (const PendingAge& pending : shape->second->claims) {
          claims.insert(pending.claim);
        }
      }
    }
    for (Claim* claim : claims) {
      UpdatePendingSeries(*claim);
    }
  }
  if (pending_shape_changed_) {
    MarkAllNodesDirty(/*pools=*/false);
  }
  pending_shape_changed_ = false;
  NodeSet dirty;
  dirty.swap(dirty_nodes_);
  NodeSet tallies;
  tallies.swap(dirty_tallies_);
  absl::flat_hash_map<std::string, absl::InlinedVector<uint32_t, 2>> gpus;
  gpus.swap(dirty_gpus_);
  for (const std::string& node : dirty) {
    RecomputeNode(node, /*pools=*/true, /*tallies=*/true, {});
  }
  for (const std::string& node : tallies) {
    if (!dirty.contains(node)) {
      auto marked = gpus.find(node);
      RecomputeNode(node, /*pools=*/false, /*tallies=*/true,
                    marked != gpus.end() ? absl::MakeConstSpan(marked->second)
                                         : absl::Span<const uint32_t>());
    }
  }
  for (const auto& [node, marked] : gpus) {
    if (!dirty.contains(node) && !tallies.contains(node)) {
      RecomputeNode(node, /*pools=*/false, /*tallies=*/false, marked);
    }
  }
}

void Analyzer::Accrue(Series& series, absl::Time now) {
  const double dt = absl::ToDoubleSeconds(now - series.last);
  series.last = now;
  if (dt <= 0 || series.gpus <= 0) {
    return;
  }
  series.seconds->Increment(series.gpus * dt);
  const double cost = series.gpus * series.price_per_second * dt;
  if (cost > 0) {
    series.cost->Increment(cost);
  }
}

const Claim* Analyzer::OldestPendingFor(const std::vector<Device*>& free) {
  const PendingAge* oldest = nullptr;
  for (const auto& [signature, shape] : pending_requests_) {
    const PendingAge& first = *shape->claims.begin();
    if (oldest != nullptr && !ByAge()(first, *oldest)) {
      continue;  // this shape's oldest claim could not win
    }
    for (Device* d : free) {
      if (RequestFits(*shape->request, *d)) {
        oldest = &first;
        break;
      }
    }
  }
  return oldest == nullptr ? nullptr : oldest->claim;
}

absl::string_view ToString(Usage usage) {
  return usage == Usage::kInUse ? "in_use" : "allocated_not_running";
}

void Analyzer::TallyGpu(absl::Span<Device* const> devices, bool down, uint32_t gpu,
                        std::vector<GpuPartEntry>& out, const Claim* of_claim,
                        std::map<std::pair<std::string, std::string>, double>* parts) {
  const uint32_t no_class = no_class_;
  if (of_claim != nullptr &&
      std::none_of(devices.begin(), devices.end(), [of_claim](const Device* d) {
        const ClusterState::Holders* holders = ClusterState::HoldersOf(*d);
        return holders != nullptr &&
               std::any_of(holders->begin(), holders->end(),
                           [of_claim](const auto& holder) { return holder.first == of_claim; });
      })) {
    return;  // only the claim's parts are asked for, and it holds nothing of this GPU
  }
  const Device& first = *devices.front();
  const CounterSet* set = nullptr;
  if (!first.consumes.empty()) {
    set = state_.FindCounterSet(first.consumes.front().first);
  }
  double weights = 0;
  for (const Device* d : devices) {
    weights += d->weight;
  }
  // The GPU in parts: what each holder holds (unavailable when the device is tainted or the
  // node down), and what is left.
  struct Held {
    const Claim* claim;
    const std::string* device_class;  // of the request the device was allocated for
    double gpus;
    bool unavailable;
  };
  auto class_of = [](const Claim& claim, const Key& device) -> const std::string* {
    if (claim.held_class != nullptr) {
      return claim.held_class;  // every device it holds is of one class
    }
    for (const auto& [key, cls] : claim.devices) {
      if (key == device && !cls.empty()) {
        return &cls;
      }
    }
    return &claim.device_class();
  };
  std::vector<Held> held;
  double left_free = 0, left_unavailable = 0;
  if (set != nullptr) {
    // Partitionable: a device holds the share of the counter set it consumes.
    double taken = 0;
    bool usable = false;  // some device that nobody holds can still be allocated
    for (const Device* d : devices) {
      std::vector<std::pair<const Claim*, double>> holders = state_.HolderShares(*d);
      if (holders.empty()) {
        usable = usable || !d->tainted;
        continue;
      }
      std::map<std::string, double> consumed;
      for (const auto& [set_key, counters] : d->consumes) {
        if (set_key == set->key) {
          for (const auto& [name, value] : counters) {
            consumed[name] += value;
          }
        }
      }
      const double share = ShareOf(set->capacity, consumed);
      for (const auto& [claim, part] : holders) {
        const double gpus = std::min(share * part, std::max(0.0, 1 - taken));
        taken += gpus;
        held.push_back({claim, class_of(*claim, d->key), gpus, down || d->tainted});
      }
    }
    const double left = std::max(0.0, 1 - taken);
    (down || !usable ? left_unavailable : left_free) += left;
  } else {
    // Whole devices, or static MIG devices of one parent: each is its weight's share.
    for (const Device* d : devices) {
      const double part = weights > 0 ? d->weight / weights : 0;
      double taken = 0;
      for (const auto& [claim, share] : state_.HolderShares(*d)) {
        held.push_back({claim, class_of(*claim, d->key), part * share, down || d->tainted});
        taken += part * share;
      }
      (down || d->tainted ? left_unavailable : left_free) += std::max(0.0, part - taken);
    }
  }

  // Each part judged by the pure rule of findings.h: one state, at most one stranded kind.
  const uint32_t product = first.product_id;
  auto record = [&](const PartFinding& f, double gpus, uint32_t holder_class,
                    uint32_t pending_class) {
    if (gpus <= 0) {
      return;
    }
    out.push_back({gpu, 0, {{first.driver_id, product, static_cast<uint32_t>(f.state)}}, gpus});
    if (f.stranded.has_value()) {
      const uint32_t cls = f.device_class == StrandedClass::kHolder           ? holder_class
                           : f.device_class == StrandedClass::kLongestPending ? pending_class
                                                                              : no_class;
      out.push_back({gpu, 1, {{static_cast<uint32_t>(*f.stranded), product, cls}}, gpus});
    }
  };
  if (of_claim != nullptr) {
    for (const Held& h : held) {
      if (h.claim == of_claim) {
        (*parts)[{*h.device_class, first.product()}] += h.gpus;
      }
    }
    return;  // the rest of the GPU is not the claim's
  }
  double allocated = 0;
  for (const Held& h : held) {
    const uint32_t cls = h.device_class == h.claim->held_class ? h.claim->held_class_id
                                                               : labels_.Id(*h.device_class);
    if (h.gpus > 0) {
      // Showback counts what a claim holds whether or not its device is usable now.
      const Usage usage =
          h.claim->state == ClaimState::kInUse ? Usage::kInUse : Usage::kAllocatedNotRunning;
      out.push_back(
          {gpu, 2, {{h.claim->ns_id, cls, product, static_cast<uint32_t>(usage)}}, h.gpus});
    }
    const PartFinding f = JudgePart({.held = true,
                                     .unavailable = h.unavailable,
                                     .holder_in_use = h.claim->state == ClaimState::kInUse});
    record(f, h.gpus, cls, no_class);
    if (f.state == GpuState::kAllocated) {
      allocated += h.gpus;
    }
  }
  record(JudgePart({.unavailable = true}), left_unavailable, no_class, no_class);
  if (left_free <= 0) {
    return;
  }
  // The free part. Whether a pending claim could use one of the GPU's free devices is asked
  // only while claims pend: it is the costly fact.
  GpuPart free_part{.claims_pend = !pending_requests_.empty()};
  const Claim* oldest = nullptr;
  if (free_part.claims_pend) {
    std::vector<Device*> free;
    bool mig = false;
    for (Device* d : devices) {
      mig = mig || d->type() == "mig";
      if (!d->tainted && state_.DeviceFree(*d)) {
        free.push_back(d);
      }
    }
    oldest = OldestPendingFor(free);
    free_part.fits_pending = oldest != nullptr;
    free_part.mig_cut = mig && (allocated > 0 || set == nullptr);
  }
  record(JudgePart(free_part), left_free, no_class,
         oldest != nullptr ? oldest->class_id : no_class);
}

void Analyzer::ReplaceGpu(std::vector<GpuPartEntry>& parts, uint32_t gpu,
                          const std::vector<GpuPartEntry>& part) {
  using Entry = GpuPartEntry;
  auto begin = std::lower_bound(parts.begin(), parts.end(), gpu,
                                [](const Entry& e, uint32_t g) { return e.gpu < g; });
  auto end = std::find_if(begin, parts.end(), [gpu](const Entry& e) { return e.gpu != gpu; });
  const size_t size = parts.size() - static_cast<size_t>(end - begin) + part.size();
  if (size > parts.capacity()) {
    std::vector<Entry> grown;
    grown.reserve(size);
    grown.insert(grown.end(), parts.begin(), begin);
    grown.insert(grown.end(), part.begin(), part.end());
    grown.insert(grown.end(), end, parts.end());
    parts = std::move(grown);
    return;
  }
  begin = parts.erase(begin, end);
  parts.insert(begin, part.begin(), part.end());
}

PoolState Analyzer::PoolStateOf(const Device& d) const {
  return d.tainted                                                ? PoolState::kTainted
         : (state_.DeviceAllocated(d) || state_.DeviceBlocked(d)) ? PoolState::kAllocated
                                                                  : PoolState::kFree;
}

void Analyzer::RecomputeNode(const std::string& node, bool pools, bool tallies,
                             absl::Span<const uint32_t> gpus) {
  auto& slot = node_aggregates_[node];
  if (slot == nullptr) {
    slot = std::make_unique<NodeAggregate>();
    pools = tallies = true;
  }
  NodeAggregate& agg = *slot;
  const std::vector<Device*>& on_node = state_.DevicesOn(node);
  const uint32_t no_class = no_class_;
  // The marked GPUs (MarkGpuDirty names each once; an index that no longer starts a GPU cannot
  // occur: a device that comes or goes marks its whole node).
  absl::InlinedVector<uint32_t, 4> marked;
  for (uint32_t first : gpus) {
    if (first < on_node.size() && on_node[first]->gpu_first == first) {
      marked.push_back(first);
    }
  }
  auto devices_of = [&](uint32_t first) { return ClusterState::GpuAt(on_node, first); };
  auto count = [&](LabelTable<std::array<int, kPoolStates>>& pool, const Device& d, int state,
                   int n) {
    if (d.class_ids.empty()) {
      pool[{{d.driver_id, no_class, d.product_id}}][state] += n;
    }
    for (uint32_t cls : d.class_ids) {
      pool[{{d.driver_id, cls, d.product_id}}][state] += n;
    }
  };
  if (!pools) {
    // Only the marked GPUs' devices can have changed state; a device not counted yet (none
    // should be) sends the node back to a full count.
    for (uint32_t first : marked) {
      for (const Device* d : devices_of(first)) {
        pools = pools || d->pool_state < 0;
      }
    }
  }
  if (pools) {
    LabelTable<std::array<int, kPoolStates>> pool;
    for (Device* d : on_node) {
      d->pool_state = static_cast<int8_t>(PoolStateOf(*d));
      count(pool, *d, d->pool_state, 1);
    }
    UpdatePoolTotals(agg.pool, pool);
    agg.pool = std::move(pool);
  } else if (!marked.empty()) {
    std::optional<LabelTable<std::array<int, kPoolStates>>> pool;
    for (uint32_t first : marked) {
      for (Device* d : devices_of(first)) {
        const int state = static_cast<int>(PoolStateOf(*d));
        if (state == d->pool_state) {
          continue;
        }
        if (!pool.has_value()) {
          pool = agg.pool;
        }
        count(*pool, *d, d->pool_state, -1);
        count(*pool, *d, state, 1);
        d->pool_state = static_cast<int8_t>(state);
      }
    }
    if (pool.has_value()) {
      UpdatePoolTotals(agg.pool, *pool);
      agg.pool = *std::move(pool);
    }
  }

  // The node's tally: every GPU's parts again, or the marked GPUs' parts replaced; then their
  // sum, GPU by GPU.
  const bool down = state_.NodeDown(node);
  std::vector<GpuPartEntry> part;
  part.reserve(tallies ? 2 * on_node.size() + 2 : 8);
  if (tallies) {
    for (size_t first = 0; first < on_node.size(); first += on_node[first]->gpu_devices) {
      TallyGpu(devices_of(static_cast<uint32_t>(first)), down, static_cast<uint32_t>(first), part);
    }
    agg.parts = part;  // a copy allocates what it needs, where appending would double
  } else {
    for (uint32_t first : marked) {
      part.clear();
      TallyGpu(devices_of(first), down, first, part);
      ReplaceGpu(agg.parts, first, part);
    }
  }
  GpuTally tally;
  LabelTable<double>* tables[] = {&tally.gpus, &tally.stranded, &tally.held};
  for (const GpuPartEntry& e : agg.parts) {
    (*tables[e.table])[e.labels] += e.gpus;
  }

  // The node's series that went to zero stay at zero while it publishes devices (a state with
  // no GPU reads 0, not a gap), and go with its last device.
  const bool has_devices = !on_node.empty();

  // A series is written only when its value moves: at fleet scale each one is a cache miss, and
  // most events leave most of a node's values as they were.
  agg.gpu_series.EraseIf([&](const LabelKey& labels, NodeAggregate::GpuSeries& series) {
    if (tally.gpus.Contains(labels)) {
      return false;
    }
    if (has_devices) {
      if (series.value != 0) {
        series.value = 0;
        series.gauge->Set(0);
      }
      return false;
    }
    gpus_.Remove(series.gauge);
    return true;
  });
  for (const auto& [labels, value] : tally.gpus) {
    NodeAggregate::GpuSeries& series = agg.gpu_series[labels];
    if (series.gauge == nullptr) {
      // Names in order (telemetry::LabelTextOf).
      const telemetry::LabelView text[] = {{"driver", labels_.Value(labels[0])},
                                           {"node", node},
                                           {"product", labels_.Value(labels[1])},
                                           {"state", ToString(static_cast<GpuState>(labels[2]))}};
      series.gauge = &gpus_.AddText(telemetry::LabelTextOf(text));
    } else if (series.value == value) {
      continue;
    }
    series.value = value;
    series.gauge->Set(value);
  }

  // Stranded series: accrue what the old value earned, then switch to the new one.
  const absl::Time now = clock_.Now();
  for (const auto& [labels, value] : tally.stranded) {
    Series* s = &agg.stranded[labels];
    if (s->gauge == nullptr) {
      const std::string& product = labels_.Value(labels[1]);
      const std::string& device_class = labels_.Value(labels[2]);
      // One text for the three families (names in order: telemetry::LabelTextOf).
      const telemetry::LabelView l[] = {{"device_class", device_class},
                                        {"kind", ToString(static_cast<StrandedKind>(labels[0]))},
                                        {"node", node},
                                        {"product", product}};
      const std::string text = telemetry::LabelTextOf(l);
      s->gauge = &stranded_gpus_.AddText(text);
      s->seconds = &stranded_seconds_.AddText(text);
      s->cost = &stranded_cost_.AddText(text);
      s->price_per_second = prices_.PriceOf(device_class, product) / 3600.0;
      s->last = now;
      s->idle_since = now;
    }
  }
  for (auto& [labels, s] : agg.stranded) {
    const double* value = tally.stranded.Find(labels);
    const double gpus = value == nullptr ? 0 : *value;
    if (gpus == s.gpus) {
      continue;  // nothing to accrue early: Tick accrues at the same rate
    }
    Accrue(s, now);
    s.gpus = gpus;
    s.idle_since = gpus > 0 ? absl::InfiniteFuture() : now;
    s.gauge->Set(s.gpus);
  }
  UpdateHeld(agg.held, tally.held, now);
  agg.held = std::move(tally.held);
  if (pools || tallies) {
    // A marked GPU's holders changed without moving a counter set (that marks the node).
    RecomputePlaceable(node, agg);
  }
}

void Analyzer::UpdateHeld(const LabelTable<double>& before, const LabelTable<double>& after,
                          absl::Time now) {
  LabelTable<double> delta;
  for (const auto& [labels, gpus] : before) {
    delta[labels] -= gpus;
  }
  for (const auto& [labels, gpus] : after) {
    delta[labels] += gpus;
  }
  for (const auto& [labels, change] : delta) {
    if (change == 0) {
      continue;
    }
    std::unique_ptr<Series>& s = held_[labels];
    if (s == nullptr) {
      // The counters are per (namespace, class, state); several products add to the same ones.
      s = std::make_unique<Series>();
      const std::string& device_class = labels_.Value(labels[1]);
      prometheus::Labels l = {{"namespace", labels_.Value(labels[0])},
                              {"device_class", device_class},
                              {"state", std::string(ToString(static_cast<Usage>(labels[3])))}};
      s->seconds = &held_seconds_.Add(l);
      s->cost = &held_cost_.Add(l);
      s->price_per_second = prices_.PriceOf(device_class, labels_.Value(labels[2])) / 3600.0;
      s->last = now;
    }
    Accrue(*s, now);
    s->gpus = std::max(0.0, s->gpus + change);
    if (s->gpus < kEpsilon) {
      s->gpus = 0;  // what float sums leave of a claim that is gone
    }
  }
}

}  // namespace dralens::exporter::cluster
