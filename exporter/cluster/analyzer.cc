#include "exporter/cluster/analyzer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "exporter/cluster/analyzer_state.h"
#include "src/common/log.h"
#include "src/telemetry/catalog.h"

namespace dralens::exporter::cluster {

Analyzer::Analyzer(prometheus::Registry& registry, telemetry::Tracer& tracer,
                   AnalyzerOptions options)
    : claims_(telemetry::BuildGauge(registry, "dralens_cluster_claims")),
      pending_claims_(telemetry::BuildGauge(registry, "dralens_cluster_pending_claims")),
      pending_ages_(std::make_shared<ObjectSeries>("dralens_cluster_pending_claim_age_seconds",
                                                   options.clock)),
      allocation_latency_(
          telemetry::BuildHistogram(registry, "dralens_cluster_allocation_latency_seconds")),
      transitions_(telemetry::BuildCounter(registry, "dralens_cluster_claim_transitions_total")),
      pool_devices_(telemetry::BuildGauge(registry, "dralens_cluster_pool_devices")),
      price_per_gpu_hour_(telemetry::BuildGauge(registry, "dralens_cluster_price_per_gpu_hour")),
      text_series_(std::make_shared<telemetry::TextFamilies>()),
      gpus_(text_series_->AddGauge("dralens_cluster_gpus")),
      stranded_gpus_(text_series_->AddGauge("dralens_cluster_stranded_gpus")),
      stranded_seconds_(text_series_->AddCounter("dralens_cluster_stranded_gpu_seconds_total")),
      stranded_cost_(text_series_->AddCounter("dralens_cluster_stranded_cost_total")),
      mig_placeable_(text_series_->AddGauge("dralens_cluster_mig_placeable")),
      topology_(telemetry::BuildGauge(registry, "dralens_cluster_claim_topology")),
      claim_spread_(text_series_->AddGauge("dralens_cluster_claim_spread")),
      held_seconds_(telemetry::BuildCounter(registry, "dralens_cluster_gpu_seconds_total")),
      held_cost_(telemetry::BuildCounter(registry, "dralens_cluster_cost_total")),
      lifecycle_(tracer),
      prices_(std::move(options.prices)),
      topology_sensitive_(std::move(options.topology_sensitive_classes)),
      stranded_retention_(options.stranded_retention),
      clock_(options.clock != nullptr ? *options.clock : common::RealClock()) {
  absl::MutexLock lock(&mu_);
  deriving_ = !options.derive_after_sync;
  no_class_ = labels_.Id("");
  for (Transition t : {Transition::kCreated, Transition::kAllocated, Transition::kReserved,
                       Transition::kInUse, Transition::kReleased, Transition::kDeleted}) {
    transition_counters_[t] = &transitions_.Add({{"to", std::string(ToString(t))}});
  }
}

Analyzer::~Analyzer() {
  absl::MutexLock lock(&mu_);
  for (const auto& [key, claim] : state_.claims()) {
    LifecycleTracer::Abandon(*claim->span);
  }
}

// --- selectors -------------------------------------------------------------------------------

int Analyzer::SelectorId(const std::string& expression) {
  auto [it, inserted] = selector_ids_.emplace(expression, static_cast<int>(programs_.size()));
  if (inserted) {
    programs_.push_back(cel::Program::Compile(expression));
    expressions_.push_back(expression);
    if (!programs_.back().ok()) {
      DLOG(kWarn, "cluster", "selector does not compile; its verdicts are unknown",
           {{"expression", expression}, {"error", programs_.back().status().message()}});
    }
  }
  return it->second;
}

cel::Verdict Analyzer::Evaluate(Device& device, int selector, const cel::DeviceView* view) {
  auto it = std::lower_bound(device.verdicts.begin(), device.verdicts.end(), selector,
                             [](const auto& entry, int id) { return entry.first < id; });
  if (it != device.verdicts.end() && it->first == selector) {
    return it->second;
  }
  cel::Verdict verdict = cel::Verdict::kUnknown;
  const absl::StatusOr<cel::Program>& program = programs_[selector];
  if (program.ok() && view != nullptr) {
    verdict = program->Evaluate(*view).verdict;
  } else if (program.ok()) {
    const SelectorMaps maps = SelectorMaps::Of(device.spec);
    verdict = program->Evaluate({device.driver(), &maps.attributes, &maps.capacity}).verdict;
  }
  device.verdicts.insert(it, {selector, verdict});
  return verdict;
}

cel::Verdict Analyzer::MatchesAll(Device& device, const std::vector<int>& selectors,
                                  const cel::DeviceView* view) {
  return fit::AllOf(selectors.size(),
                    [&](size_t i) { return Evaluate(device, selectors[i], view); });
}

bool Analyzer::ByOrder::operator()(const DeviceRef& a, const DeviceRef& b) const {
  return a.order != b.order ? a.order < b.order : a.device->key < b.device->key;
}

void Analyzer::UnclassifyDevice(Device& device) {
  for (uint32_t c : device.class_ids) {
    class_devices_[labels_.Value(c)].erase({device.order, &device});
  }
  for (const std::string& c : device.unknown_classes) {
    class_unknown_[c].erase({device.order, &device});
  }
  device.class_ids.clear();
  device.unknown_classes.clear();
}

void Analyzer::ClassifyDevice(Device& device, const cel::DeviceView* view) {
  UnclassifyDevice(device);
  // Without the published device at hand, its maps are rebuilt once for all the classes.
  std::optional<SelectorMaps> maps;
  cel::DeviceView rebuilt;
  if (view == nullptr && !classes_.empty()) {
    maps = SelectorMaps::Of(device.spec);
    rebuilt = {device.driver(), &maps->attributes, &maps->capacity};
    view = &rebuilt;
  }
  for (const auto& [name, selectors] : classes_) {
    cel::Verdict v = MatchesAll(device, selectors, view);
    if (v == cel::Verdict::kTrue) {
      device.class_ids.push_back(labels_.Id(name));
      class_devices_[name].insert({device.order, &device});
    } else if (v == cel::Verdict::kUnknown) {
      device.unknown_classes.push_back(name);
      class_unknown_[name].insert({device.order, &device});
    }
  }
}

// --- devices ---------------------------------------------------------------------------------

void Analyzer::RecountCounters(const std::string& set_key) {
  const CounterSet* set = state_.RecountUsed(set_key);
  if (set == nullptr) {
    return;
  }
  dirty_nodes_.insert(set->node);
  for (const Key& key : set->devices) {
    if (Device* device = state_.FindDevice(key); device != nullptr) {
      RefreshFree(*device);
    }
  }
}

void Analyzer::MarkGpuDirty(const Device& device) {
  if (!deriving_) {
    return;  // SetSynced recomputes every node
  }
  absl::InlinedVector<uint32_t, 2>& gpus = dirty_gpus_[device.node];
  if (std::find(gpus.begin(), gpus.end(), device.gpu_first) == gpus.end()) {
    gpus.push_back(device.gpu_first);
  }
}

void Analyzer::AllocationChanged(const Key& device_key) {
  Device* device = state_.FindDevice(device_key);
  if (device == nullptr) {
    return;
  }
  MarkGpuDirty(*device);
  for (const auto& [set_key, counters] : device->consumes) {
    RecountCounters(set_key);
  }
  RefreshFree(*device);
}

void Analyzer::MarkAllNodesDirty(bool pools) {
  NodeSet& dirty = pools ? dirty_nodes_ : dirty_tallies_;
  for (const auto& [node, devices] : state_.devices_by_node()) {
    dirty.insert(node);
  }
  for (const auto& [node, agg] : node_aggregates_) {
    dirty.insert(node);
  }
}

void Analyzer::Tick() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_.Now();
  for (auto it = node_aggregates_.begin(); it != node_aggregates_.end();) {
    NodeAggregate& agg = *it->second;
    agg.stranded.EraseIf([&](const LabelKey&, Series& series) {
      Accrue(series, now);
      if (series.gpus > 0 || now - series.idle_since < stranded_retention_) {
        return false;
      }
      // At 0 since the retention began: every scrape since has read the counters' last values.
      stranded_gpus_.Remove(series.gauge);
      stranded_seconds_.Remove(series.seconds);
      stranded_cost_.Remove(series.cost);
      return true;
    });
    // A node whose devices are gone and whose series have all gone with them (RecomputeNode
    // drops the others with its last device) leaves no record; it gets a new one if it comes
    // back.
    if (agg.stranded.empty() && agg.gpu_series.empty() && agg.held.empty() &&
        agg.placeable.empty() && agg.pool.empty() && state_.DevicesOn(it->first).empty()) {
      node_aggregates_.erase(it++);
    } else {
      ++it;
    }
  }
  for (auto& [labels, series] : held_) {
    Accrue(*series, now);
  }
}

std::optional<PendingReason> Analyzer::PendingReasonOf(const std::string& key) {
  absl::MutexLock lock(&mu_);
  const Claim* claim = state_.FindClaim(key);
  return claim == nullptr ? std::nullopt : claim->reason;
}

std::optional<ClaimState> Analyzer::StateOf(const std::string& key) {
  absl::MutexLock lock(&mu_);
  const Claim* claim = state_.FindClaim(key);
  if (claim == nullptr) {
    return std::nullopt;
  }
  return claim->state;
}

}  // namespace dralens::exporter::cluster
