#include "exporter/cluster/analyzer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/log.h"
#include "src/telemetry/catalog.h"
#include "src/telemetry/tracing/trace_context.h"

namespace dralens::exporter::cluster {
namespace {

constexpr double kEpsilon = 1e-9;

// Allocation latencies: from a second (a scheduler that keeps up) to an hour (a claim that
// waited for capacity).
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600};
  return *buckets;
}

std::string DeviceKey(absl::string_view driver, absl::string_view pool, absl::string_view device) {
  return absl::StrCat(driver, "/", pool, "/", device);
}

// An attribute by its unqualified name, published either bare or in any domain.
const model::DeviceAttribute* Attribute(const model::SliceDevice& device, absl::string_view name) {
  for (const auto& [key, value] : device.attributes) {
    if (key == name || (absl::EndsWith(key, name) && key.size() > name.size() &&
                        key[key.size() - name.size() - 1] == '/')) {
      return &value;
    }
  }
  return nullptr;
}

std::string StringAttribute(const model::SliceDevice& device, absl::string_view name) {
  const model::DeviceAttribute* a = Attribute(device, name);
  if (a == nullptr || a->AsString() == nullptr) {
    return "";
  }
  return *a->AsString();
}

// Counters and capacities that count a GPU's MIG memory slices: the unit MIG placement is made
// of (a GPU has 8, or 4 on an A30; every instance owns whole slices and no two share one).
bool IsMemorySlice(absl::string_view name) {
  return absl::StartsWith(name, "memory-slice") || absl::StartsWith(name, "memorySlice");
}

// The share of `capacity` that `used` takes, by the rule of docs/cluster.md: memory slices
// when the set counts them, else memory, else the scarcest counter.
double ShareOf(const std::map<std::string, double>& capacity,
               const std::map<std::string, double>& used) {
  auto ratio = [](double u, double c) { return c > kEpsilon ? std::clamp(u / c, 0.0, 1.0) : 0.0; };
  double slices = 0, slices_used = 0;
  for (const auto& [name, value] : capacity) {
    if (IsMemorySlice(name)) {
      slices += value;
      if (auto u = used.find(name); u != used.end()) {
        slices_used += u->second;
      }
    }
  }
  if (slices > kEpsilon) {
    return ratio(slices_used, slices);
  }
  if (auto m = capacity.find("memory"); m != capacity.end()) {
    auto u = used.find("memory");
    return ratio(u == used.end() ? 0 : u->second, m->second);
  }
  double share = 0;
  for (const auto& [name, value] : capacity) {
    if (auto u = used.find(name); u != used.end()) {
      share = std::max(share, ratio(u->second, value));
    }
  }
  return share;
}

bool Blocking(const model::DeviceTaint& taint) {
  return taint.effect == "NoSchedule" || taint.effect == "NoExecute";
}

bool Tolerates(const model::DeviceToleration& t, const model::DeviceTaint& taint) {
  if (!t.effect.empty() && t.effect != taint.effect) {
    return false;
  }
  if (t.op == "Exists") {
    return t.key.empty() || t.key == taint.key;
  }
  return t.key == taint.key && t.value == taint.value;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct Analyzer::Device {
  Key key;
  std::string slice;
  std::string driver, pool, node, product, type, profile;
  model::SliceDevice spec;
  bool tainted = false;  // a NoSchedule/NoExecute taint
  bool multi = false;    // allowMultipleAllocations
  // The physical GPU it is (part of): its counter set, else its parent's or its own UUID,
  // else the device itself. Devices with the same key are one GPU.
  std::string gpu;
  // Without counters: its weight among the devices of its GPU (memory slices, else memory).
  double weight = 1;
  std::map<std::string, double> capacity;
  bool counted = false;       // its part is in the leaves' counts
  bool counted_free = false;  // counted as free (not held, not blocked, node up)
  std::vector<std::pair<std::string, std::map<std::string, double>>> consumes;  // set key
  std::vector<std::string> classes;          // classes it surely matches
  std::vector<std::string> unknown_classes;  // classes whose selectors it cannot judge
  std::unordered_map<int, cel::Verdict> verdicts;
};

struct Analyzer::CounterSet {
  std::string key, slice, node, name;
  std::map<std::string, double> capacity;
  std::map<std::string, double> used;
  std::set<Key> devices;
};

struct Analyzer::Request {
  std::string signature;
  std::string device_class;
  std::vector<int> selectors;
  std::vector<model::DeviceToleration> tolerations;
  bool all = false;
  int64_t count = 1;
  std::vector<std::shared_ptr<Request>> alternatives;  // firstAvailable: any one will do
};

struct Analyzer::Claim {
  Key key;
  std::string ns, name, uid, device_class;
  absl::Time created = absl::InfinitePast();
  std::vector<std::shared_ptr<Request>> requests;
  std::vector<std::pair<Key, std::string>> devices;  // device key, class of its request
  std::vector<Key> reserved_pods;
  bool allocated = false;
  std::optional<absl::Time> allocation_time;
  bool has_state = false;
  ClaimState state = ClaimState::kPending;
  bool pending = false;
  bool seen_pending = false;
  std::optional<PendingReason> reason;
  bool age = false;  // has a pending age series
  telemetry::SpanPtr span;
};

struct Analyzer::Series {
  prometheus::Gauge* gauge = nullptr;
  prometheus::Counter* seconds = nullptr;
  prometheus::Counter* cost = nullptr;
  double price_per_second = 0;
  double gpus = 0;
  absl::Time last;
};

struct Analyzer::NodeAggregate {
  std::map<std::vector<std::string>, int> pool;  // driver, class, product, state
  std::map<std::vector<std::string>, prometheus::Gauge*> pool_gauges;
  std::map<std::vector<std::string>, prometheus::Gauge*> gpu_gauges;  // driver, product, state
  std::set<std::vector<std::string>> stranded;                        // kind, product, class
  std::map<std::vector<std::string>, prometheus::Gauge*> placeable;   // gpu, profile
};

struct Analyzer::PendingShape {
  std::shared_ptr<Request> request;
  std::set<std::pair<absl::Time, Key>> claims;  // (created, key): oldest first
};

struct Analyzer::LeafCounts {
  std::shared_ptr<Request> request;
  std::set<std::string> shapes;  // signatures of the pending shapes that use it
  int64_t unknown = 0, matching = 0, untainted = 0, free = 0;
  std::optional<PendingReason> last;  // the reason the pending claims were last given
};

struct Analyzer::GpuTally {
  std::map<std::vector<std::string>, double> gpus;      // driver, product, state
  std::map<std::vector<std::string>, double> stranded;  // kind, product, class
};

// ---------------------------------------------------------------------------------------------

Analyzer::Analyzer(prometheus::Registry& registry, telemetry::Tracer& tracer,
                   AnalyzerOptions options)
    : claims_(telemetry::BuildGauge(registry, "dralens_cluster_claims")),
      pending_claims_(telemetry::BuildGauge(registry, "dralens_cluster_pending_claims")),
      pending_ages_(std::make_shared<ObjectSeries>("dralens_cluster_pending_claim_age_seconds")),
      allocation_latency_(
          telemetry::BuildHistogram(registry, "dralens_cluster_allocation_latency_seconds")),
      transitions_(telemetry::BuildCounter(registry, "dralens_cluster_claim_transitions_total")),
      pool_devices_(telemetry::BuildGauge(registry, "dralens_cluster_pool_devices")),
      gpus_(telemetry::BuildGauge(registry, "dralens_cluster_gpus")),
      stranded_gpus_(telemetry::BuildGauge(registry, "dralens_cluster_stranded_gpus")),
      stranded_seconds_(
          telemetry::BuildCounter(registry, "dralens_cluster_stranded_gpu_seconds_total")),
      stranded_cost_(telemetry::BuildCounter(registry, "dralens_cluster_stranded_cost_total")),
      mig_placeable_(telemetry::BuildGauge(registry, "dralens_cluster_mig_placeable")),
      tracer_(tracer),
      prices_(std::move(options.prices)),
      clock_(options.clock != nullptr ? *options.clock : common::RealClock()) {
  absl::MutexLock lock(&mu_);
  deriving_ = !options.derive_after_sync;
  for (Transition t : {Transition::kCreated, Transition::kAllocated, Transition::kReserved,
                       Transition::kInUse, Transition::kReleased, Transition::kDeleted}) {
    transition_counters_[t] = &transitions_.Add({{"to", std::string(ToString(t))}});
  }
}

Analyzer::~Analyzer() {
  absl::MutexLock lock(&mu_);
  for (auto& [key, claim] : claims_by_key_) {
    claim->span->End();
  }
}

// --- selectors -------------------------------------------------------------------------------

int Analyzer::SelectorId(const std::string& expression) {
  auto [it, inserted] = selector_ids_.emplace(expression, static_cast<int>(programs_.size()));
  if (inserted) {
    programs_.push_back(cel::Program::Compile(expression));
    if (!programs_.back().ok()) {
      DLOG(kWarn, "cluster", "selector does not compile; its verdicts are unknown",
           {{"expression", expression}, {"error", programs_.back().status().message()}});
    }
  }
  return it->second;
}

cel::Verdict Analyzer::Evaluate(Device& device, int selector) {
  auto [it, inserted] = device.verdicts.emplace(selector, cel::Verdict::kUnknown);
  if (inserted) {
    const absl::StatusOr<cel::Program>& program = programs_[selector];
    if (program.ok()) {
      cel::DeviceView view{device.driver, &device.spec.attributes, &device.spec.capacity};
      it->second = program->Evaluate(view).verdict;
    }
  }
  return it->second;
}

cel::Verdict Analyzer::MatchesAll(Device& device, const std::vector<int>& selectors) {
  cel::Verdict result = cel::Verdict::kTrue;
  for (int s : selectors) {
    cel::Verdict v = Evaluate(device, s);
    if (v == cel::Verdict::kFalse) {
      return v;
    }
    if (v == cel::Verdict::kUnknown) {
      result = v;
    }
  }
  return result;
}

void Analyzer::UnclassifyDevice(Device& device) {
  for (const std::string& c : device.classes) {
    class_devices_[c].erase(device.key);
  }
  for (const std::string& c : device.unknown_classes) {
    class_unknown_[c].erase(device.key);
  }
  device.classes.clear();
  device.unknown_classes.clear();
}

void Analyzer::ClassifyDevice(Device& device) {
  UnclassifyDevice(device);
  for (const auto& [name, selectors] : classes_) {
    cel::Verdict v = MatchesAll(device, selectors);
    if (v == cel::Verdict::kTrue) {
      device.classes.push_back(name);
      class_devices_[name].insert(device.key);
    } else if (v == cel::Verdict::kUnknown) {
      device.unknown_classes.push_back(name);
      class_unknown_[name].insert(device.key);
    }
  }
}

// --- devices ---------------------------------------------------------------------------------

bool Analyzer::DeviceAllocated(const Device& device) const {
  auto it = allocations_.find(device.key);
  if (it == allocations_.end() || it->second.empty()) {
    return false;
  }
  if (!device.multi) {
    return true;
  }
  // Shared device: full once any consumed capacity reaches what the device has.
  std::map<std::string, double> consumed;
  for (const auto& [claim, capacity] : it->second) {
    for (const auto& [name, value] : capacity) {
      consumed[name] += value;
    }
  }
  for (const auto& [name, value] : consumed) {
    auto cap = device.spec.capacity.find(name);
    if (cap != device.spec.capacity.end() &&
        value + kEpsilon >= cap->second.value.AsApproximateDouble()) {
      return true;
    }
  }
  return false;
}

bool Analyzer::DeviceBlocked(const Device& device) const {
  auto alloc = allocations_.find(device.key);
  if (alloc != allocations_.end() && !alloc->second.empty()) {
    return false;  // its own allocation holds the counters
  }
  for (const auto& [set_key, counters] : device.consumes) {
    auto set = counter_sets_.find(set_key);
    if (set == counter_sets_.end()) {
      continue;
    }
    for (const auto& [name, need] : counters) {
      auto cap = set->second->capacity.find(name);
      double capacity = cap == set->second->capacity.end() ? 0 : cap->second;
      auto used = set->second->used.find(name);
      double in_use = used == set->second->used.end() ? 0 : used->second;
      if (capacity - in_use + kEpsilon < need) {
        return true;
      }
    }
  }
  return false;
}

bool Analyzer::DeviceFree(const Device& device) const {
  return !device.tainted && !DeviceAllocated(device) && !DeviceBlocked(device);
}

bool Analyzer::NodeDown(const std::string& node) const {
  if (node.empty()) {
    return false;
  }
  auto it = nodes_.find(node);
  if (it == nodes_.end()) {
    return nodes_synced_;
  }
  return !it->second.ready;
}

void Analyzer::RecountCounters(const std::string& set_key) {
  auto it = counter_sets_.find(set_key);
  if (it == counter_sets_.end()) {
    return;
  }
  CounterSet& set = *it->second;
  set.used.clear();
  for (const Key& key : set.devices) {
    auto dev = devices_.find(key);
    auto alloc = allocations_.find(key);
    if (dev == devices_.end() || alloc == allocations_.end() || alloc->second.empty()) {
      continue;
    }
    for (const auto& [consumed_set, counters] : dev->second->consumes) {
      if (consumed_set != set_key) {
        continue;
      }
      for (const auto& [name, value] : counters) {
        set.used[name] += value;
      }
    }
  }
  dirty_nodes_.insert(set.node);
  for (const Key& key : set.devices) {
    if (auto dev = devices_.find(key); dev != devices_.end()) {
      RefreshFree(*dev->second);
    }
  }
}

void Analyzer::MarkDeviceDirty(const Device& device) { dirty_nodes_.insert(device.node); }

void Analyzer::AllocationChanged(const Key& device_key) {
  capacity_changed_ = true;
  auto it = devices_.find(device_key);
  if (it == devices_.end()) {
    return;
  }
  MarkDeviceDirty(*it->second);
  for (const auto& [set_key, counters] : it->second->consumes) {
    RecountCounters(set_key);
  }
  RefreshFree(*it->second);
}

void Analyzer::MarkAllNodesDirty() {
  for (const auto& [node, keys] : node_devices_) {
    dirty_nodes_.insert(node);
  }
  for (const auto& [node, agg] : node_aggregates_) {
    dirty_nodes_.insert(node);
  }
}

// --- slices, classes, nodes ------------------------------------------------------------------

void Analyzer::RemoveSliceLocked(const std::string& name, std::set<std::string>& touched) {
  auto it = slices_.find(name);
  if (it == slices_.end()) {
    return;
  }
  for (const Key& key : it->second.first) {
    auto dev = devices_.find(key);
    if (dev == devices_.end() || dev->second->slice != name) {
      continue;  // republished by another slice of the pool meanwhile
    }
    Device& d = *dev->second;
    CountDevice(d, -1);
    UnclassifyDevice(d);
    node_devices_[d.node].erase(key);
    dirty_nodes_.insert(d.node);
    touched.insert(d.node);
    for (const auto& [set_key, counters] : d.consumes) {
      if (auto set = counter_sets_.find(set_key); set != counter_sets_.end()) {
        set->second->devices.erase(key);
      }
    }
    devices_.erase(dev);
  }
  for (const std::string& set_key : it->second.second) {
    auto set = counter_sets_.find(set_key);
    if (set != counter_sets_.end() && set->second->slice == name) {
      dirty_nodes_.insert(set->second->node);
      touched.insert(set->second->node);
      counter_sets_.erase(set);
    }
  }
  slices_.erase(it);
  capacity_changed_ = true;
}

void Analyzer::UpsertSlice(const model::ResourceSlice& slice) {
  absl::MutexLock lock(&mu_);
  const std::string& name = slice.metadata.name;
  // Devices that come back unchanged keep their cached selector verdicts.
  std::unordered_map<Key, std::unordered_map<int, cel::Verdict>> kept;
  if (auto old = slices_.find(name); old != slices_.end()) {
    for (const Key& key : old->second.first) {
      if (auto dev = devices_.find(key); dev != devices_.end()) {
        kept[key] = std::move(dev->second->verdicts);
      }
    }
  }
  std::unordered_map<Key, model::SliceDevice> old_specs;
  if (auto old = slices_.find(name); old != slices_.end()) {
    for (const Key& key : old->second.first) {
      if (auto dev = devices_.find(key); dev != devices_.end()) {
        old_specs[key] = dev->second->spec;
      }
    }
  }
  std::set<std::string> touched;
  RemoveSliceLocked(name, touched);
  const model::ResourceSliceSpec& spec = slice.spec;
  const std::string slice_node = spec.node_name.value_or("");
  std::vector<Key> keys;
  std::vector<std::string> set_keys;
  for (const model::CounterSet& cs : spec.shared_counters) {
    auto set = std::make_unique<CounterSet>();
    set->key = DeviceKey(spec.driver, spec.pool.name, cs.name);
    set->slice = name;
    set->node = slice_node;
    set->name = cs.name;
    for (const auto& [counter, value] : cs.counters) {
      set->capacity[counter] = value.value.AsApproximateDouble();
    }
    set_keys.push_back(set->key);
    counter_sets_[set->key] = std::move(set);
  }
  for (const model::SliceDevice& sd : spec.devices) {
    auto d = std::make_unique<Device>();
    d->key = DeviceKey(spec.driver, spec.pool.name, sd.name);
    d->slice = name;
    d->driver = spec.driver;
    d->pool = spec.pool.name;
    d->node = sd.node_name.value_or(slice_node);
    d->spec = sd;
    d->product = StringAttribute(sd, "productName");
    d->type = StringAttribute(sd, "type");
    d->profile = StringAttribute(sd, "profile");
    d->multi = sd.allow_multiple_allocations.value_or(false);
    d->tainted = std::any_of(sd.taints.begin(), sd.taints.end(), Blocking);
    for (const model::DeviceCounterConsumption& c : sd.consumes_counters) {
      std::map<std::string, double> counters;
      for (const auto& [counter, value] : c.counters) {
        counters[counter] = value.value.AsApproximateDouble();
      }
      std::string set_key = DeviceKey(spec.driver, spec.pool.name, c.counter_set);
      d->consumes.emplace_back(set_key, std::move(counters));
    }
    double slices = 0;
    for (const auto& [name, value] : sd.capacity) {
      d->capacity[name] = value.value.AsApproximateDouble();
      if (IsMemorySlice(name)) {
        slices += d->capacity[name];
      }
    }
    if (slices > 0) {
      d->weight = slices;
    } else if (auto m = d->capacity.find("memory"); m != d->capacity.end() && m->second > 0) {
      d->weight = m->second;
    }
    if (!d->consumes.empty()) {
      d->gpu = absl::StrCat("counters\x1f", d->consumes.front().first);
    } else if (std::string parent = StringAttribute(sd, "parentUUID"); !parent.empty()) {
      d->gpu = absl::StrCat("uuid\x1f", spec.driver, "\x1f", parent);
    } else if (std::string uuid = StringAttribute(sd, "uuid"); !uuid.empty()) {
      d->gpu = absl::StrCat("uuid\x1f", spec.driver, "\x1f", uuid);
    } else {
      d->gpu = absl::StrCat("device\x1f", d->key);
    }
    if (auto old = old_specs.find(d->key); old != old_specs.end() && old->second == sd) {
      d->verdicts = std::move(kept[d->key]);
    }
    if (auto existing = devices_.find(d->key); existing != devices_.end()) {
      // The device moved here from another slice of the pool.
      Device& e = *existing->second;
      CountDevice(e, -1);
      touched.insert(e.node);
      UnclassifyDevice(e);
      node_devices_[e.node].erase(e.key);
      dirty_nodes_.insert(e.node);
      devices_.erase(existing);
    }
    ClassifyDevice(*d);
    node_devices_[d->node].insert(d->key);
    dirty_nodes_.insert(d->node);
    keys.push_back(d->key);
    devices_[d->key] = std::move(d);
  }
  // Attach consumers to their counter sets, which may come from another slice of the pool.
  for (const Key& key : keys) {
    for (const auto& [set_key, counters] : devices_[key]->consumes) {
      if (auto set = counter_sets_.find(set_key); set != counter_sets_.end()) {
        set->second->devices.insert(key);
      }
    }
  }
  for (const std::string& set_key : set_keys) {
    // Consumers published in other slices of the pool.
    for (const auto& [key, dev] : devices_) {
      for (const auto& [consumed, counters] : dev->consumes) {
        if (consumed == set_key) {
          counter_sets_[set_key]->devices.insert(key);
        }
      }
    }
    RecountCounters(set_key);
  }
  for (const Key& key : keys) {
    for (const auto& [set_key, counters] : devices_[key]->consumes) {
      RecountCounters(set_key);
    }
  }
  touched.insert(slice_node);
  for (const Key& key : keys) {
    Device& d = *devices_[key];
    touched.insert(d.node);
    d.counted_free = !DeviceAllocated(d) && !DeviceBlocked(d) && !NodeDown(d.node);
    CountDevice(d, +1);
  }
  // Devices of other slices whose counters this one publishes or frees.
  for (const std::string& node : touched) {
    RefreshNodeDevices(node);
  }
  slices_[name] = {std::move(keys), std::move(set_keys)};
  capacity_changed_ = true;
  Flush();
}

void Analyzer::DeleteSlice(const std::string& name) {
  absl::MutexLock lock(&mu_);
  std::set<std::string> touched;
  RemoveSliceLocked(name, touched);
  for (const std::string& node : touched) {
    RefreshNodeDevices(node);
  }
  Flush();
}

void Analyzer::UpsertClass(const model::DeviceClass& device_class) {
  absl::MutexLock lock(&mu_);
  std::vector<int> selectors;
  for (const model::DeviceSelector& s : device_class.spec.selectors) {
    if (s.cel.has_value()) {
      selectors.push_back(SelectorId(s.cel->expression));
    }
  }
  auto it = classes_.find(device_class.metadata.name);
  if (it != classes_.end() && it->second == selectors) {
    return;
  }
  classes_[device_class.metadata.name] = std::move(selectors);
  for (auto& [key, device] : devices_) {
    ClassifyDevice(*device);
  }
  for (auto& [signature, leaf] : leaves_) {
    RecountLeaf(*leaf);
  }
  capacity_changed_ = true;
  pending_shape_changed_ = true;
  MarkAllNodesDirty();
  Flush();
}

void Analyzer::DeleteClass(const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (classes_.erase(name) == 0) {
    return;
  }
  for (auto& [key, device] : devices_) {
    ClassifyDevice(*device);
  }
  class_devices_.erase(name);
  class_unknown_.erase(name);
  for (auto& [signature, leaf] : leaves_) {
    RecountLeaf(*leaf);
  }
  capacity_changed_ = true;
  pending_shape_changed_ = true;
  MarkAllNodesDirty();
  Flush();
}

void Analyzer::UpsertNode(const NodeInfo& node) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node.name);
  bool changed = it == nodes_.end() || it->second.ready != node.ready;
  nodes_[node.name] = node;
  if (changed) {
    RefreshNodeDevices(node.name);
    dirty_nodes_.insert(node.name);
    capacity_changed_ = true;
    Flush();
  }
}

void Analyzer::DeleteNode(const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (nodes_.erase(name) > 0) {
    RefreshNodeDevices(name);
    dirty_nodes_.insert(name);
    capacity_changed_ = true;
    Flush();
  }
}

void Analyzer::SetNodesSynced() {
  absl::MutexLock lock(&mu_);
  nodes_synced_ = true;
  for (auto& [key, device] : devices_) {
    RefreshFree(*device);
  }
  MarkAllNodesDirty();
  capacity_changed_ = true;
  Flush();
}

void Analyzer::SetSynced() {
  absl::MutexLock lock(&mu_);
  if (deriving_) {
    return;
  }
  deriving_ = true;
  MarkAllNodesDirty();
  capacity_changed_ = true;
  rederive_all_ = true;
  Flush();
}

// --- pods --------------------------------------------------------------------------------------

void Analyzer::UpsertPod(const model::Pod& pod) {
  absl::MutexLock lock(&mu_);
  const Key key = absl::StrCat(pod.metadata.namespace_name, "/", pod.metadata.name);
  const bool running = pod.status.phase == "Running";
  auto [it, inserted] = pods_running_.emplace(key, running);
  if (!inserted && it->second == running) {
    return;
  }
  it->second = running;
  if (auto claims = pod_claims_.find(key); claims != pod_claims_.end()) {
    for (const Key& claim_key : claims->second) {
      if (auto c = claims_by_key_.find(claim_key); c != claims_by_key_.end()) {
        RefreshClaimState(*c->second);
      }
    }
  }
  Flush();
}

void Analyzer::DeletePod(const std::string& ns, const std::string& name) {
  absl::MutexLock lock(&mu_);
  const Key key = absl::StrCat(ns, "/", name);
  if (pods_running_.erase(key) == 0) {
    return;
  }
  if (auto claims = pod_claims_.find(key); claims != pod_claims_.end()) {
    for (const Key& claim_key : claims->second) {
      if (auto c = claims_by_key_.find(claim_key); c != claims_by_key_.end()) {
        RefreshClaimState(*c->second);
      }
    }
  }
  Flush();
}

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
  auto it = claims_by_key_.find(key);
  if (it != claims_by_key_.end() && it->second->uid != obj.metadata.uid) {
    // Same name, new object: the old one is gone.
    DeleteClaimLocked(key);
    it = claims_by_key_.find(key);
  }
  if (it == claims_by_key_.end()) {
    auto c = std::make_unique<Claim>();
    c->key = key;
    c->ns = obj.metadata.namespace_name;
    c->name = obj.metadata.name;
    c->uid = obj.metadata.uid;
    c->created = obj.metadata.creation_timestamp.value_or(clock_.Now());
    auto build = [&](const std::string& cls, const std::vector<model::DeviceSelector>& selectors,
                     const std::vector<model::DeviceToleration>& tolerations,
                     const std::string& mode, int64_t count) {
      auto r = std::make_shared<Request>();
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
            build(e.device_class_name, e.selectors, e.tolerations, e.allocation_mode, e.count));
      } else {
        auto r = std::make_shared<Request>();
        for (const model::DeviceSubRequest& sub : req.first_available) {
          r->alternatives.push_back(build(sub.device_class_name, sub.selectors, sub.tolerations,
                                          sub.allocation_mode, sub.count));
          absl::StrAppend(&r->signature, "\x1c", r->alternatives.back()->signature);
        }
        r->device_class =
            r->alternatives.empty() ? std::string() : r->alternatives.front()->device_class;
        c->requests.push_back(std::move(r));
      }
    }
    c->device_class = c->requests.empty() ? std::string() : c->requests.front()->device_class;
    telemetry::StartSpanOptions options;
    options.trace_id = telemetry::TraceIdFromClaimUid(c->uid);
    options.start_time = c->created;
    c->span = tracer_.StartSpan("ResourceClaim", options);
    c->span->SetAttribute("k8s.namespace.name", c->ns);
    c->span->SetAttribute("k8s.resourceclaim.name", c->name);
    c->span->SetAttribute("k8s.resourceclaim.uid", c->uid);
    c->span->SetAttribute("dra.device_class", c->device_class);
    it = claims_by_key_.emplace(key, std::move(c)).first;
    RecordTransition(*it->second, Transition::kCreated);
  }
  Claim& claim = *it->second;

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
  if (allocation.has_value()) {
    for (const model::DeviceRequestAllocationResult& r : allocation->devices.results) {
      Key device = DeviceKey(r.driver, r.pool, r.device);
      devices.emplace_back(device, class_of[r.request]);
      auto& capacity = consumed[device];
      for (const auto& [name, value] : r.consumed_capacity) {
        capacity[name] += value.AsApproximateDouble();
      }
    }
    claim.allocation_time = allocation->allocation_timestamp;
  }
  claim.allocated = allocation.has_value();
  SetClaimAllocations(claim, std::move(devices), std::move(consumed));
  std::vector<Key> pods;
  for (const model::ResourceClaimConsumerReference& ref : obj.status.reserved_for) {
    if (ref.resource == "pods" && ref.api_group.empty()) {
      pods.push_back(absl::StrCat(claim.ns, "/", ref.name));
    }
  }
  SetReservations(claim, std::move(pods));
  RefreshClaimState(claim);
  Flush();
}

void Analyzer::SetClaimAllocations(Claim& claim, std::vector<std::pair<Key, std::string>> devices,
                                   std::map<Key, std::map<std::string, double>> consumed) {
  if (devices == claim.devices) {
    bool same = true;
    for (const auto& [device, capacity] : consumed) {
      auto a = allocations_.find(device);
      same = same && a != allocations_.end() && a->second.count(claim.key) > 0 &&
             a->second[claim.key] == capacity;
    }
    if (same) {
      return;
    }
  }
  std::set<Key> touched;
  for (const auto& [device, cls] : claim.devices) {
    auto a = allocations_.find(device);
    if (a != allocations_.end()) {
      a->second.erase(claim.key);
      if (a->second.empty()) {
        allocations_.erase(a);
      }
    }
    touched.insert(device);
  }
  for (const auto& [device, capacity] : consumed) {
    allocations_[device][claim.key] = capacity;
    touched.insert(device);
  }
  claim.devices = std::move(devices);
  for (const Key& device : touched) {
    AllocationChanged(device);
  }
}

void Analyzer::SetReservations(Claim& claim, std::vector<Key> pods) {
  if (pods == claim.reserved_pods) {
    return;
  }
  for (const Key& pod : claim.reserved_pods) {
    auto it = pod_claims_.find(pod);
    if (it != pod_claims_.end()) {
      it->second.erase(claim.key);
      if (it->second.empty()) {
        pod_claims_.erase(it);
      }
    }
  }
  for (const Key& pod : pods) {
    pod_claims_[pod].insert(claim.key);
  }
  claim.reserved_pods = std::move(pods);
}

ClaimState Analyzer::StateOfClaim(const Claim& claim) const {
  if (!claim.allocated) {
    return ClaimState::kPending;
  }
  if (claim.reserved_pods.empty()) {
    return ClaimState::kAllocated;
  }
  for (const Key& pod : claim.reserved_pods) {
    auto it = pods_running_.find(pod);
    if (it != pods_running_.end() && it->second) {
      return ClaimState::kInUse;
    }
  }
  return ClaimState::kReserved;
}

void Analyzer::RecordTransition(Claim& claim, cluster::Transition to) {
  transition_counters_[to]->Increment();
  claim.span->AddEvent(ToString(to));
}

void Analyzer::RefreshClaimState(Claim& claim) {
  const ClaimState state = StateOfClaim(claim);
  const bool had_state = claim.has_state;
  const ClaimState old = claim.state;
  if (had_state && old == state) {
    return;
  }
  auto count = [&](ClaimState s, int delta) {
    std::vector<std::string> labels = {std::string(ToString(s)), claim.device_class, claim.ns};
    auto [it, inserted] = claim_counts_.emplace(labels, std::make_pair(nullptr, 0));
    if (inserted) {
      it->second.first = &claims_.Add(
          {{"state", labels[0]}, {"device_class", labels[1]}, {"namespace", labels[2]}});
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
      auto [it, inserted] = latency_.emplace(claim.device_class, nullptr);
      if (inserted) {
        it->second =
            &allocation_latency_.Add({{"device_class", claim.device_class}}, LatencyBuckets());
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
  for (const auto& [device, cls] : claim.devices) {
    if (auto d = devices_.find(device); d != devices_.end()) {
      MarkDeviceDirty(*d->second);
    }
  }
}

void Analyzer::EnterPending(Claim& claim) {
  claim.pending = true;
  pending_.insert(claim.key);
  if (pending_per_class_[claim.device_class]++ == 0) {
    pending_shape_changed_ = true;
  }
  for (const auto& r : claim.requests) {
    std::unique_ptr<PendingShape>& shape = pending_requests_[r->signature];
    if (shape == nullptr) {
      shape = std::make_unique<PendingShape>();
      shape->request = r;
      pending_shape_changed_ = true;
      RegisterShape(*shape, r->signature);
    }
    auto [it, inserted] = shape->claims.emplace(claim.created, claim.key);
    if (inserted && it == shape->claims.begin()) {
      oldest_pending_changed_ = true;
    }
  }
  UpdatePendingSeries(claim);
}

void Analyzer::LeavePending(Claim& claim) {
  claim.pending = false;
  pending_.erase(claim.key);
  if (--pending_per_class_[claim.device_class] == 0) {
    pending_per_class_.erase(claim.device_class);
    pending_shape_changed_ = true;
  }
  for (const auto& r : claim.requests) {
    auto it = pending_requests_.find(r->signature);
    if (it == pending_requests_.end()) {
      continue;
    }
    std::set<std::pair<absl::Time, Key>>& claims = it->second->claims;
    auto c = claims.find({claim.created, claim.key});
    if (c != claims.end()) {
      if (c == claims.begin()) {
        oldest_pending_changed_ = true;
      }
      claims.erase(c);
    }
    if (claims.empty()) {
      UnregisterShape(*it->second, it->first);
      pending_requests_.erase(it);
      pending_shape_changed_ = true;
    }
  }
  UpdatePendingSeries(claim);
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
      std::vector<std::string> labels = {claim.device_class, std::string(ToString(r))};
      auto [it, inserted] = pending_counts_.emplace(labels, std::make_pair(nullptr, 0));
      if (inserted) {
        it->second.first =
            &pending_claims_.Add({{"device_class", labels[0]}, {"reason", labels[1]}});
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
                         {{"claim", claim.name},
                          {"device_class", claim.device_class},
                          {"namespace", claim.ns},
                          {"reason", std::string(ToString(*reason))}},
                         0);
      claim.age = true;
      claim.span->AddEvent("pending", {{"reason", std::string(ToString(*reason))}});
    }
    claim.reason = reason;
  }
  if (claim.age) {
    pending_ages_->SetValue(claim.key,
                            std::max(0.0, absl::ToDoubleSeconds(clock_.Now() - claim.created)));
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
  auto cls = classes_.find(request.device_class);
  if (cls == classes_.end() || MatchesAll(device, cls->second) != cel::Verdict::kTrue ||
      MatchesAll(device, request.selectors) != cel::Verdict::kTrue) {
    return false;
  }
  for (const model::DeviceTaint& taint : device.spec.taints) {
    if (Blocking(taint) &&
        std::none_of(request.tolerations.begin(), request.tolerations.end(),
                     [&](const model::DeviceToleration& t) { return Tolerates(t, taint); })) {
      return false;
    }
  }
  return true;
}

PendingReason Analyzer::ReasonOfRequest(const Request& request) {
  if (!request.alternatives.empty()) {
    // firstAvailable: the best verdict among the alternatives.
    PendingReason best = PendingReason::kUnsatisfiable;
    for (const auto& alt : request.alternatives) {
      best = std::max(best, ReasonOfRequest(*alt));
    }
    return best;
  }
  if (auto leaf = leaves_.find(request.signature); leaf != leaves_.end()) {
    return ReasonOfLeaf(*leaf->second);
  }
  return ScanReason(request);
}

// The reason of a request that no pending claim holds (so it has no counts): one scan.
PendingReason Analyzer::ScanReason(const Request& request) {
  PendingReason reason = PendingReason::kUnsatisfiable;
  auto cls = classes_.find(request.device_class);
  if (cls != classes_.end()) {
    bool unknown = !class_unknown_[request.device_class].empty();
    int64_t matching = 0, untainted = 0, free = 0;
    for (const Key& key : class_devices_[request.device_class]) {
      Device& d = *devices_.at(key);
      cel::Verdict v = MatchesAll(d, request.selectors);
      if (v == cel::Verdict::kUnknown) {
        unknown = true;
      }
      if (v != cel::Verdict::kTrue) {
        continue;
      }
      ++matching;
      bool blocked_by_taint = false;
      for (const model::DeviceTaint& taint : d.spec.taints) {
        blocked_by_taint =
            blocked_by_taint ||
            (Blocking(taint) &&
             std::none_of(request.tolerations.begin(), request.tolerations.end(),
                          [&](const model::DeviceToleration& t) { return Tolerates(t, taint); }));
      }
      if (blocked_by_taint) {
        continue;
      }
      ++untainted;
      if (!DeviceAllocated(d) && !DeviceBlocked(d) && !NodeDown(d.node)) {
        ++free;
      }
    }
    if (matching == 0 || (!request.all && matching < request.count)) {
      reason = unknown ? PendingReason::kUnknown : PendingReason::kUnsatisfiable;
    } else if (untainted == 0 || (!request.all && untainted < request.count)) {
      reason = PendingReason::kTainted;
    } else if (free < (request.all ? untainted : request.count)) {
      reason = PendingReason::kNoCapacity;
    } else {
      reason = PendingReason::kWaitingForPod;
    }
  }
  return reason;
}

// --- counts per pending request shape ------------------------------------------------------------

int Analyzer::LeafMatch(const Request& leaf, Device& device) {
  auto cls = classes_.find(leaf.device_class);
  if (cls == classes_.end()) {
    return 0;
  }
  cel::Verdict v = MatchesAll(device, cls->second);
  if (v == cel::Verdict::kTrue) {
    v = MatchesAll(device, leaf.selectors);
  }
  if (v == cel::Verdict::kFalse) {
    return 0;
  }
  if (v == cel::Verdict::kUnknown) {
    return 1;
  }
  for (const model::DeviceTaint& taint : device.spec.taints) {
    if (Blocking(taint) &&
        std::none_of(leaf.tolerations.begin(), leaf.tolerations.end(),
                     [&](const model::DeviceToleration& t) { return Tolerates(t, taint); })) {
      return 2;
    }
  }
  return 3;
}

void Analyzer::CountDevice(Device& device, int sign) {
  if ((sign > 0) == device.counted) {
    return;
  }
  device.counted = sign > 0;
  for (auto& [signature, leaf] : leaves_) {
    const int m = LeafMatch(*leaf->request, device);
    if (m == 0) {
      continue;
    }
    leaf->unknown += sign * (m == 1);
    leaf->matching += sign * (m >= 2);
    leaf->untainted += sign * (m == 3);
    leaf->free += sign * (m == 3 && device.counted_free);
    dirty_leaves_.insert(signature);
  }
}

void Analyzer::RefreshFree(Device& device) {
  if (!device.counted) {
    return;
  }
  const bool free = !DeviceAllocated(device) && !DeviceBlocked(device) && !NodeDown(device.node);
  if (free == device.counted_free) {
    return;
  }
  device.counted_free = free;
  for (auto& [signature, leaf] : leaves_) {
    if (LeafMatch(*leaf->request, device) == 3) {
      leaf->free += free ? 1 : -1;
      dirty_leaves_.insert(signature);
    }
  }
}

void Analyzer::RefreshNodeDevices(const std::string& node) {
  auto devs = node_devices_.find(node);
  if (devs == node_devices_.end()) {
    return;
  }
  for (const Key& key : devs->second) {
    RefreshFree(*devices_.at(key));
  }
}

void Analyzer::RecountLeaf(LeafCounts& leaf) {
  leaf.unknown = leaf.matching = leaf.untainted = leaf.free = 0;
  for (const auto* index : {&class_devices_, &class_unknown_}) {
    auto keys = index->find(leaf.request->device_class);
    if (keys == index->end()) {
      continue;
    }
    for (const Key& key : keys->second) {
      Device& d = *devices_.at(key);
      if (!d.counted) {
        continue;
      }
      const int m = LeafMatch(*leaf.request, d);
      leaf.unknown += m == 1;
      leaf.matching += m >= 2;
      leaf.untainted += m == 3;
      leaf.free += m == 3 && d.counted_free;
    }
  }
  dirty_leaves_.insert(leaf.request->signature);
}

PendingReason Analyzer::ReasonOfLeaf(const LeafCounts& leaf) const {
  const Request& r = *leaf.request;
  if (classes_.count(r.device_class) == 0) {
    return PendingReason::kUnsatisfiable;
  }
  if (leaf.matching == 0 || (!r.all && leaf.matching < r.count)) {
    return leaf.unknown > 0 ? PendingReason::kUnknown : PendingReason::kUnsatisfiable;
  }
  if (leaf.untainted == 0 || (!r.all && leaf.untainted < r.count)) {
    return PendingReason::kTainted;
  }
  if (leaf.free < (r.all ? leaf.untainted : r.count)) {
    return PendingReason::kNoCapacity;
  }
  return PendingReason::kWaitingForPod;
}

void Analyzer::RegisterShape(const PendingShape& shape, const std::string& signature) {
  std::vector<std::shared_ptr<Request>> parts = shape.request->alternatives;
  if (parts.empty()) {
    parts.push_back(shape.request);
  }
  for (const std::shared_ptr<Request>& part : parts) {
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
  std::vector<std::shared_ptr<Request>> parts = shape.request->alternatives;
  if (parts.empty()) {
    parts.push_back(shape.request);
  }
  for (const std::shared_ptr<Request>& part : parts) {
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
  PendingReason worst = PendingReason::kWaitingForPod;
  for (const auto& r : claim.requests) {
    worst = std::min(worst, ReasonOfRequest(*r));
  }
  return worst;
}

void Analyzer::DeleteClaim(const model::ResourceClaim& obj) {
  absl::MutexLock lock(&mu_);
  DeleteClaimLocked(absl::StrCat(obj.metadata.namespace_name, "/", obj.metadata.name));
  Flush();
}

void Analyzer::DeleteClaimLocked(const Key& key) {
  auto it = claims_by_key_.find(key);
  if (it == claims_by_key_.end()) {
    return;
  }
  Claim& claim = *it->second;
  if (claim.pending) {
    LeavePending(claim);
  }
  SetClaimAllocations(claim, {}, {});
  SetReservations(claim, {});
  if (claim.has_state) {
    auto c = claim_counts_.find({std::string(ToString(claim.state)), claim.device_class, claim.ns});
    if (c != claim_counts_.end()) {
      c->second.first->Set(--c->second.second);
    }
  }
  RecordTransition(claim, Transition::kDeleted);
  claim.span->End();
  claims_by_key_.erase(it);
}

// --- derived series ----------------------------------------------------------------------------

void Analyzer::Flush() {
  if (!deriving_) {
    return;  // the dirty state accumulates until SetSynced()
  }
  // A claim's reason is a function of its requests' reasons, so only the claims of a shape
  // whose reason moved are touched: an allocation that crosses no threshold touches no claim.
  // (Ages are refreshed by Tick.)
  if (rederive_all_) {
    rederive_all_ = false;
    dirty_leaves_.clear();
    for (auto& [signature, leaf] : leaves_) {
      leaf->last = ReasonOfLeaf(*leaf);
    }
    for (const Key& key : pending_) {
      UpdatePendingSeries(*claims_by_key_.at(key));
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
      UpdatePendingSeries(*claims_by_key_.at(key));
    }
  }
  if (pending_shape_changed_ || oldest_pending_changed_) {
    MarkAllNodesDirty();
  }
  capacity_changed_ = false;
  pending_shape_changed_ = false;
  oldest_pending_changed_ = false;
  std::set<std::string> dirty;
  dirty.swap(dirty_nodes_);
  for (const std::string& node : dirty) {
    RecomputeNode(node);
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

std::vector<std::pair<const Analyzer::Claim*, double>> Analyzer::HolderShares(
    const Device& device) const {
  std::vector<std::pair<const Claim*, double>> shares;
  auto a = allocations_.find(device.key);
  if (a == allocations_.end() || a->second.empty()) {
    return shares;
  }
  if (!device.multi) {
    // Whole-device allocations: several holders (admin access) split it evenly.
    for (const auto& [claim_key, consumed] : a->second) {
      if (auto c = claims_by_key_.find(claim_key); c != claims_by_key_.end()) {
        shares.emplace_back(c->second.get(), 0);
      }
    }
    for (auto& [claim, share] : shares) {
      share = 1.0 / static_cast<double>(shares.size());
    }
    return shares;
  }
  // Shares of a device with allowMultipleAllocations: each holder's part of the capacity that
  // is most consumed (the one that fills the device first).
  std::map<std::string, double> total;
  for (const auto& [claim_key, consumed] : a->second) {
    for (const auto& [name, value] : consumed) {
      total[name] += value;
    }
  }
  std::string binding;
  double most = -1;
  for (const auto& [name, value] : total) {
    auto cap = device.capacity.find(name);
    if (cap != device.capacity.end() && cap->second > kEpsilon && value / cap->second > most) {
      most = value / cap->second;
      binding = name;
    }
  }
  if (binding.empty()) {
    return shares;  // nothing consumed that the device measures: no part of it is held
  }
  const double capacity = device.capacity.at(binding);
  const double scale = most > 1 ? 1 / most : 1;  // over-committed: the device is full
  for (const auto& [claim_key, consumed] : a->second) {
    auto c = claims_by_key_.find(claim_key);
    auto v = consumed.find(binding);
    if (c != claims_by_key_.end() && v != consumed.end() && v->second > 0) {
      shares.emplace_back(c->second.get(), v->second / capacity * scale);
    }
  }
  return shares;
}

const Analyzer::Claim* Analyzer::OldestPendingFor(const std::vector<Device*>& free) {
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
  auto c = claims_by_key_.find(oldest->second);
  return c == claims_by_key_.end() ? nullptr : c->second.get();
}

Analyzer::GpuTally Analyzer::TallyGpus(const std::string& node) {
  GpuTally tally;
  auto devs = node_devices_.find(node);
  if (devs == node_devices_.end()) {
    return tally;
  }
  const bool down = NodeDown(node);
  // Devices by physical GPU, in key order so that the result does not depend on hashing.
  std::map<std::string, std::vector<Device*>> by_gpu;
  for (const Key& key : devs->second) {
    Device* d = devices_.at(key).get();
    by_gpu[d->gpu].push_back(d);
  }
  const std::string kFree(ToString(GpuState::kFree));
  const std::string kAllocated(ToString(GpuState::kAllocated));
  const std::string kUnavailable(ToString(GpuState::kUnavailable));
  for (auto& [gpu, devices] : by_gpu) {
    std::sort(devices.begin(), devices.end(),
              [](const Device* a, const Device* b) { return a->key < b->key; });
    const Device& first = *devices.front();
    const CounterSet* set = nullptr;
    if (!first.consumes.empty()) {
      if (auto it = counter_sets_.find(first.consumes.front().first); it != counter_sets_.end()) {
        set = it->second.get();
      }
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
      for (const auto& [key, cls] : claim.devices) {
        if (key == device && !cls.empty()) {
          return &cls;
        }
      }
      return &claim.device_class;
    };
    std::vector<Held> held;
    double left_free = 0, left_unavailable = 0;
    if (set != nullptr) {
      // Partitionable: a device holds the share of the counter set it consumes.
      double taken = 0;
      bool usable = false;  // some device that nobody holds can still be allocated
      for (const Device* d : devices) {
        std::vector<std::pair<const Claim*, double>> holders = HolderShares(*d);
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
        for (const auto& [claim, share] : HolderShares(*d)) {
          held.push_back({claim, class_of(*claim, d->key), part * share, down || d->tainted});
          taken += part * share;
        }
        (down || d->tainted ? left_unavailable : left_free) += std::max(0.0, part - taken);
      }
    }

    const std::string& product = first.product;
    auto add_gpus = [&](const std::string& state, double value) {
      if (value > 0) {
        tally.gpus[{first.driver, product, state}] += value;
      }
    };
    auto add_stranded = [&](StrandedKind kind, const std::string& cls, double value) {
      if (value > 0) {
        tally.stranded[{std::string(ToString(kind)), product, cls}] += value;
      }
    };
    double allocated = 0;
    for (const Held& h : held) {
      if (h.unavailable) {
        add_gpus(kUnavailable, h.gpus);
        add_stranded(StrandedKind::kAdvertisedUnhealthy, *h.device_class, h.gpus);
        continue;
      }
      add_gpus(kAllocated, h.gpus);
      allocated += h.gpus;
      if (h.claim->state != ClaimState::kInUse) {
        add_stranded(StrandedKind::kAllocatedNotRunning, *h.device_class, h.gpus);
      }
    }
    add_gpus(kUnavailable, left_unavailable);
    add_stranded(StrandedKind::kAdvertisedUnhealthy, "", left_unavailable);
    add_gpus(kFree, left_free);
    if (left_free <= 0 || pending_requests_.empty()) {
      continue;
    }
    // The free part: stranded while a pending claim could use one of its free devices.
    std::vector<Device*> free;
    bool mig = false;
    for (Device* d : devices) {
      mig = mig || d->type == "mig";
      if (!d->tainted && DeviceFree(*d)) {
        free.push_back(d);
      }
    }
    if (const Claim* oldest = OldestPendingFor(free); oldest != nullptr) {
      add_stranded(StrandedKind::kFreeWhilePending, oldest->device_class, left_free);
    } else if (mig && (allocated > 0 || set == nullptr)) {
      add_stranded(StrandedKind::kUnplaceableFragment, "", left_free);
    }
  }
  return tally;
}

void Analyzer::RecomputeNode(const std::string& node) {
  auto& slot = node_aggregates_[node];
  if (slot == nullptr) {
    slot = std::make_unique<NodeAggregate>();
  }
  NodeAggregate& agg = *slot;
  std::map<std::vector<std::string>, int> pool;
  static const std::vector<std::string> kNoClass = {""};
  if (auto devs = node_devices_.find(node); devs != node_devices_.end()) {
    for (const Key& key : devs->second) {
      Device& d = *devices_.at(key);
      const std::vector<std::string>& classes = d.classes.empty() ? kNoClass : d.classes;
      const bool allocated = DeviceAllocated(d);
      const bool blocked = DeviceBlocked(d);
      PoolState state = d.tainted                ? PoolState::kTainted
                        : (allocated || blocked) ? PoolState::kAllocated
                                                 : PoolState::kFree;
      for (const std::string& c : classes) {
        ++pool[{d.driver, c, d.product, std::string(ToString(state))}];
      }
    }
  }
  // Series that went to zero stay at zero while the node publishes devices, and are dropped
  // with its last device: prometheus-cpp's Family::Remove scans the whole family, too slow for
  // every allocation of a large fleet.
  auto devs = node_devices_.find(node);
  const bool has_devices = devs != node_devices_.end() && !devs->second.empty();
  for (auto it = agg.pool_gauges.begin(); it != agg.pool_gauges.end();) {
    if (pool.count(it->first) > 0) {
      ++it;
    } else if (has_devices) {
      it->second->Set(0);
      ++it;
    } else {
      pool_devices_.Remove(it->second);
      it = agg.pool_gauges.erase(it);
    }
  }
  for (const auto& [labels, count] : pool) {
    prometheus::Gauge*& g = agg.pool_gauges[labels];
    if (g == nullptr) {
      g = &pool_devices_.Add({{"node", node},
                              {"driver", labels[0]},
                              {"device_class", labels[1]},
                              {"product", labels[2]},
                              {"state", labels[3]}});
    }
    g->Set(count);
  }
  agg.pool = std::move(pool);

  GpuTally tally = TallyGpus(node);
  for (auto it = agg.gpu_gauges.begin(); it != agg.gpu_gauges.end();) {
    if (tally.gpus.count(it->first) > 0) {
      ++it;
    } else if (has_devices) {
      it->second->Set(0);
      ++it;
    } else {
      gpus_.Remove(it->second);
      it = agg.gpu_gauges.erase(it);
    }
  }
  for (const auto& [labels, value] : tally.gpus) {
    prometheus::Gauge*& g = agg.gpu_gauges[labels];
    if (g == nullptr) {
      g = &gpus_.Add(
          {{"node", node}, {"driver", labels[0]}, {"product", labels[1]}, {"state", labels[2]}});
    }
    g->Set(value);
  }

  // Stranded series: accrue what the old value earned, then switch to the new one.
  const absl::Time now = clock_.Now();
  std::set<std::vector<std::string>> keys = agg.stranded;
  for (const auto& [labels, value] : tally.stranded) {
    keys.insert(labels);
  }
  for (const std::vector<std::string>& labels : keys) {
    std::unique_ptr<Series>& s = stranded_[{labels[0], node, labels[1], labels[2]}];
    if (s == nullptr) {
      s = std::make_unique<Series>();
      prometheus::Labels l = {
          {"kind", labels[0]}, {"node", node}, {"product", labels[1]}, {"device_class", labels[2]}};
      s->gauge = &stranded_gpus_.Add(l);
      s->seconds = &stranded_seconds_.Add(l);
      s->cost = &stranded_cost_.Add(l);
      s->price_per_second = prices_.PriceOf(labels[2], labels[1]) / 3600.0;
      s->last = now;
    }
    Accrue(*s, now);
    auto found = tally.stranded.find(labels);
    s->gpus = found == tally.stranded.end() ? 0 : found->second;
    s->gauge->Set(s->gpus);
  }
  agg.stranded.clear();
  for (const auto& [labels, value] : tally.stranded) {
    agg.stranded.insert(labels);
  }
  RecomputePlaceable(node);
}

void Analyzer::RecomputePlaceable(const std::string& node) {
  NodeAggregate& agg = *node_aggregates_[node];
  std::map<std::vector<std::string>, double> placeable;
  for (const auto& [set_key, set] : counter_sets_) {
    if (set->node != node) {
      continue;
    }
    std::map<std::string, std::vector<Device*>> by_profile;
    for (const Key& key : set->devices) {
      Device& d = *devices_.at(key);
      std::string profile = !d.profile.empty() ? d.profile : (!d.type.empty() ? d.type : "device");
      auto& list = by_profile[profile];
      auto a = allocations_.find(key);
      if (!d.tainted && (a == allocations_.end() || a->second.empty())) {
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
            ok = ok && left[name] + kEpsilon >= need;
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

void Analyzer::Tick() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_.Now();
  for (auto& [labels, series] : stranded_) {
    Accrue(*series, now);
  }
  for (const Key& key : pending_) {
    Claim& claim = *claims_by_key_.at(key);
    if (claim.age) {
      pending_ages_->SetValue(claim.key, std::max(0.0, absl::ToDoubleSeconds(now - claim.created)));
    }
  }
}

std::optional<PendingReason> Analyzer::PendingReasonOf(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = claims_by_key_.find(key);
  return it == claims_by_key_.end() ? std::nullopt : it->second->reason;
}

std::optional<ClaimState> Analyzer::StateOf(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = claims_by_key_.find(key);
  if (it == claims_by_key_.end()) {
    return std::nullopt;
  }
  return it->second->state;
}

}  // namespace dralens::exporter::cluster
