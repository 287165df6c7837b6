#include <algorithm>
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
    std::set<Key> claims;
    for (const std::string& signature : shapes) {
      if (auto shape = pending_requests_.find(signature); shape != pending_requests_.end()) {
        for (const auto& [created, key] : shape->second->claims) {
          claims.insert(key);
        }
      }
    }
    for (const Key& key : claims) {
      UpdatePendingSeries(*state_.FindClaim(key));
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
  for (const std::string& node : dirty) {
    RecomputeNode(node, /*pools=*/true);
  }
  for (const std::string& node : tallies) {
    if (!dirty.contains(node)) {
      RecomputeNode(node, /*pools=*/false);
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
  const std::pair<absl::Time, Key>* oldest = nullptr;
  for (const auto& [signature, shape] : pending_requests_) {
    const std::pair<absl::Time, Key>& first = *shape->claims.begin();
    if (oldest != nullptr && !(first < *oldest)) {
      continue;  // this shape's oldest claim could not win
    }
    for (Device* d : free) {
      if (RequestFits(*shape->request, *d)) {
        oldest = &first;
        break;
      }
    }
  }
  if (oldest == nullptr) {
    return nullptr;
  }
  return state_.FindClaim(oldest->second);
}

absl::string_view ToString(Usage usage) {
  return usage == Usage::kInUse ? "in_use" : "allocated_not_running";
}

Analyzer::GpuTally Analyzer::TallyGpus(
    const std::string& node, const Claim* of_claim,
    std::map<std::pair<std::string, std::string>, double>* parts) {
  GpuTally tally;
  const std::vector<Device*>& on_node = state_.DevicesOn(node);
  if (on_node.empty()) {
    return tally;
  }
  const bool down = state_.NodeDown(node);
  const uint32_t no_class = labels_.Id("");
  // The store keeps a node's devices by physical GPU, each GPU's in key order.
  for (size_t begin = 0; begin < on_node.size();) {
    size_t end = begin + 1;
    while (end < on_node.size() && on_node[end]->gpu == on_node[begin]->gpu) {
      ++end;
    }
    const absl::Span<Device* const> devices(&on_node[begin], end - begin);
    begin = end;
    if (of_claim != nullptr &&
        std::none_of(devices.begin(), devices.end(), [of_claim](const Device* d) {
          const ClusterState::Holders* holders = ClusterState::HoldersOf(*d);
          return holders != nullptr &&
                 std::any_of(holders->begin(), holders->end(),
                             [of_claim](const auto& holder) { return holder.first == of_claim; });
        })) {
      continue;  // only the claim's parts are asked for, and it holds nothing of this GPU
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
      tally.gpus[{{first.driver_id, product, static_cast<uint32_t>(f.state)}}] += gpus;
      if (f.stranded.has_value()) {
        const uint32_t cls = f.device_class == StrandedClass::kHolder           ? holder_class
                             : f.device_class == StrandedClass::kLongestPending ? pending_class
                                                                                : no_class;
        tally.stranded[{{static_cast<uint32_t>(*f.stranded), product, cls}}] += gpus;
      }
    };
    if (of_claim != nullptr) {
      for (const Held& h : held) {
        if (h.claim == of_claim) {
          (*parts)[{*h.device_class, first.product()}] += h.gpus;
        }
      }
      continue;  // the rest of the GPU is not the claim's
    }
    double allocated = 0;
    for (const Held& h : held) {
      const uint32_t cls = h.device_class == h.claim->held_class ? h.claim->held_class_id
                                                                 : labels_.Id(*h.device_class);
      if (h.gpus > 0) {
        // Showback counts what a claim holds whether or not its device is usable now.
        const Usage usage =
            h.claim->state == ClaimState::kInUse ? Usage::kInUse : Usage::kAllocatedNotRunning;
        tally.held[{{h.claim->ns_id, cls, product, static_cast<uint32_t>(usage)}}] += h.gpus;
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
      continue;
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
  return tally;
}

void Analyzer::RecomputeNode(const std::string& node, bool pools) {
  auto& slot = node_aggregates_[node];
  if (slot == nullptr) {
    slot = std::make_unique<NodeAggregate>();
    pools = true;
  }
  NodeAggregate& agg = *slot;
  const std::vector<Device*>& on_node = state_.DevicesOn(node);
  if (pools) {
    LabelTable<std::array<int, kPoolStates>> pool;
    const uint32_t no_class = labels_.Id("");
    for (const Device* device : on_node) {
      const Device& d = *device;
      const bool allocated = state_.DeviceAllocated(d);
      const bool blocked = state_.DeviceBlocked(d);
      PoolState state = d.tainted                ? PoolState::kTainted
                        : (allocated || blocked) ? PoolState::kAllocated
                                                 : PoolState::kFree;
      auto count = [&](uint32_t cls) {
        ++pool[{{d.driver_id, cls, d.product_id}}][static_cast<int>(state)];
      };
      if (d.class_ids.empty()) {
        count(no_class);
      }
      for (uint32_t cls : d.class_ids) {
        count(cls);
      }
    }
    UpdatePoolTotals(agg.pool, pool);
    agg.pool = std::move(pool);
  }
  // The node's series that went to zero stay at zero while it publishes devices (a state with
  // no GPU reads 0, not a gap), and go with its last device.
  const bool has_devices = !on_node.empty();

  GpuTally tally = TallyGpus(node);
  agg.gpu_gauges.EraseIf([&](const LabelKey& labels, prometheus::Gauge* gauge) {
    if (tally.gpus.Contains(labels)) {
      return false;
    }
    if (has_devices) {
      gauge->Set(0);
      return false;
    }
    gpus_.Remove(gauge);
    return true;
  });
  for (const auto& [labels, value] : tally.gpus) {
    prometheus::Gauge*& g = agg.gpu_gauges[labels];
    if (g == nullptr) {
      // Names in order (telemetry::LabelTextOf).
      const telemetry::LabelView text[] = {{"driver", labels_.Value(labels[0])},
                                           {"node", node},
                                           {"product", labels_.Value(labels[1])},
                                           {"state", ToString(static_cast<GpuState>(labels[2]))}};
      g = &gpus_.AddText(telemetry::LabelTextOf(text));
    }
    g->Set(value);
  }

  // Stranded series: accrue what the old value earned, then switch to the new one.
  const absl::Time now = clock_.Now();
  for (const auto& [labels, value] : tally.stranded) {
    std::unique_ptr<Series>& s = agg.stranded[labels];
    if (s == nullptr) {
      s = std::make_unique<Series>();
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
    }
  }
  for (auto& [labels, s] : agg.stranded) {
    const double* value = tally.stranded.Find(labels);
    const double gpus = value == nullptr ? 0 : *value;
    if (gpus == s->gpus) {
      continue;  // nothing to accrue early: Tick accrues at the same rate
    }
    Accrue(*s, now);
    s->gpus = gpus;
    s->gauge->Set(s->gpus);
  }
  UpdateHeld(agg.held, tally.held, now);
  agg.held = std::move(tally.held);
  RecomputePlaceable(node, agg);
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

void Analyzer::UpdatePoolTotals(const LabelTable<std::array<int, kPoolStates>>& before,
                                const LabelTable<std::array<int, kPoolStates>>& after) {
  LabelTable<bool> touched;
  for (const auto& [labels, counts] : before) {
    PoolTotal& total = pool_totals_[labels];
    for (int s = 0; s < kPoolStates; ++s) {
      total.devices[s] -= counts[s];
    }
    touched[labels] = true;
  }
  for (const auto& [labels, counts] : after) {
    PoolTotal& total = pool_totals_[labels];
    for (int s = 0; s < kPoolStates; ++s) {
      total.devices[s] += counts[s];
    }
    touched[labels] = true;
  }
  // A (driver, class, product) that any node publishes has all three states, zeros included, so
  // that "no free device of this class" reads as 0, not as a missing series; it goes when the
  // last of its devices does. The family holds a few series per class, so removing is cheap.
  for (const auto& [labels, unused] : touched) {
    auto it = pool_totals_.find(labels);
    PoolTotal& total = it->second;
    const bool any =
        std::any_of(total.devices.begin(), total.devices.end(), [](int64_t n) { return n != 0; });
    const std::string& driver = labels_.Value(labels[0]);
    const std::string& device_class = labels_.Value(labels[1]);
    const std::string& product = labels_.Value(labels[2]);
    // The price of a GPU of each (class, product) published, so that rules can price what the
    // node's series count (idle claims) the way stranded cost is priced here.
    if (any && total.gauges[0] == nullptr) {
      const std::pair<std::string, std::string> priced = {device_class, product};
      auto& [gauge, refs] = prices_in_use_[priced];
      if (refs++ == 0) {
        gauge =
            &price_per_gpu_hour_.Add({{"device_class", priced.first}, {"product", priced.second}});
        gauge->Set(prices_.PriceOf(priced.first, priced.second));
      }
    } else if (!any && total.gauges[0] != nullptr) {
      auto price = prices_in_use_.find({device_class, product});
      if (price != prices_in_use_.end() && --price->second.second == 0) {
        price_per_gpu_hour_.Remove(price->second.first);
        prices_in_use_.erase(price);
      }
    }
    for (int s = 0; s < kPoolStates; ++s) {
      if (!any) {
        if (total.gauges[s] != nullptr) {
          pool_devices_.Remove(total.gauges[s]);
        }
        continue;
      }
      if (total.gauges[s] == nullptr) {
        total.gauges[s] =
            &pool_devices_.Add({{"driver", driver},
                                {"device_class", device_class},
                                {"product", product},
                                {"state", std::string(ToString(static_cast<PoolState>(s)))}});
      }
      total.gauges[s]->Set(static_cast<double>(total.devices[s]));
    }
    if (!any) {
      pool_totals_.erase(it);
    }
  }
}

void Analyzer::RecomputePlaceable(const std::string& node, NodeAggregate& agg) {
  std::map<std::vector<std::string>, double> placeable;
  // The node's counter sets, found through its devices: O(devices of the node), not O(sets of
  // the fleet).
  std::set<std::string> set_keys;
  for (const Device* d : state_.DevicesOn(node)) {
    for (const auto& [set_key, counters] : d->consumes) {
      set_keys.insert(set_key);
    }
  }
  for (const std::string& set_key : set_keys) {
    const CounterSet* set = state_.FindCounterSet(set_key);
    if (set == nullptr || set->node != node) {
      continue;
    }
    std::map<std::string, std::vector<Device*>> by_profile;
    for (const Key& key : set->devices) {
      Device& d = *state_.FindDevice(key);
      std::string profile =
          !d.profile().empty() ? d.profile() : (!d.type().empty() ? d.type() : "device");
      auto& list = by_profile[profile];
      if (!d.tainted && ClusterState::HoldersOf(d) == nullptr) {
        list.push_back(&d);
      }
    }
    for (auto& [profile, candidates] : by_profile) {
      std::sort(candidates.begin(), candidates.end(),
                [](const Device* a, const Device* b) { return a->key < b->key; });
      std::map<std::string, double> left = set->capacity;
      for (const auto& [name, used] : set->used) {
        left[name] -= used;
      }
      int fits = 0;
      for (const Device* d : candidates) {
        for (const auto& [consumed_set, counters] : d->consumes) {
          if (consumed_set != set_key) {
            continue;
          }
          bool ok = true;
          for (const auto& [name, need] : counters) {
            ok = ok && fit::WithinCounter(left[name], need);
          }
          if (ok) {
            for (const auto& [name, need] : counters) {
              left[name] -= need;
            }
            ++fits;
          }
        }
      }
      placeable[{set->name, profile}] = fits;
    }
  }
  for (auto it = agg.placeable.begin(); it != agg.placeable.end();) {
    if (placeable.count(it->first) == 0) {
      mig_placeable_.Remove(it->second);
      it = agg.placeable.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [labels, count] : placeable) {
    prometheus::Gauge*& g = agg.placeable[labels];
    if (g == nullptr) {
      g = &mig_placeable_.Add({{"node", node}, {"gpu", labels[0]}, {"profile", labels[1]}});
    }
    g->Set(count);
  }
}

}  // namespace dralens::exporter::cluster
