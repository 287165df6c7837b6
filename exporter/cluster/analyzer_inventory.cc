#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/analyzer_state.h"
#include "src/common/log.h"
#include "src/telemetry/catalog.h"
#include "src/telemetry/tracing/trace_context.h"

namespace dralens::exporter::cluster {

// --- slices, classes, nodes ------------------------------------------------------------------

void Analyzer::RemoveSliceLocked(const std::string& name, std::set<std::string>& touched,
                                 const std::set<Key>& keep) {
  auto it = slices_.find(name);
  if (it == slices_.end()) {
    return;
  }
  for (const Key& key : it->second.first) {
    auto dev = devices_.find(key);
    if (dev == devices_.end() || dev->second->slice != name) {
      continue;  // republished by another slice of the pool meanwhile
    }
    if (keep.contains(key)) {
      continue;
    }
    RemoveDevice(dev, touched);
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
}

void Analyzer::RemoveDevice(DeviceMap::iterator it, std::set<std::string>& touched) {
  Device& d = *it->second;
  CountDevice(d, -1);
  UnclassifyDevice(d);
  if (auto devs = node_devices_.find(d.node); devs != node_devices_.end()) {
    std::erase(devs->second, &d);
    if (devs->second.empty()) {
      node_devices_.erase(devs);
    }
  }
  dirty_nodes_.insert(d.node);
  touched.insert(d.node);
  for (const auto& [set_key, counters] : d.consumes) {
    if (auto set = counter_sets_.find(set_key); set != counter_sets_.end()) {
      set->second->devices.erase(d.key);
    }
    if (auto c = consumers_.find(set_key); c != consumers_.end()) {
      c->second.erase(d.key);
      if (c->second.empty()) {
        consumers_.erase(c);
      }
    }
  }
  devices_.erase(it);
}

void Analyzer::UpsertSlice(const model::ResourceSlice& slice) {
  absl::MutexLock lock(&mu_);
  const std::string& name = slice.metadata.name;
  const model::ResourceSliceSpec& spec = slice.spec;
  const std::string slice_node = spec.node_name.value_or("");
  // A device this slice already published, exactly as it is now, stays as it is: its counts,
  // verdicts and indexes hold. Only the devices that changed leave and come back, so a taint
  // on one GPU costs one device, not the slice. A changed device whose attributes and capacity
  // are the same keeps its cached selector verdicts (taints are not what selectors read).
  std::unordered_map<Key, const model::SliceDevice*> incoming;
  for (const model::SliceDevice& sd : spec.devices) {
    incoming[DeviceKey(spec.driver, spec.pool.name, sd.name)] = &sd;
  }
  std::set<Key> unchanged;
  std::unordered_map<Key, std::vector<std::pair<int, cel::Verdict>>> kept;
  if (auto old = slices_.find(name); old != slices_.end()) {
    for (const Key& key : old->second.first) {
      auto dev = devices_.find(key);
      auto now = incoming.find(key);
      if (dev == devices_.end() || dev->second->slice != name || now == incoming.end()) {
        continue;
      }
      const Device& d = *dev->second;
      const model::SliceDevice& sd = *now->second;
      if (d.spec.Same(sd) && d.node == sd.node_name.value_or(slice_node)) {
        unchanged.insert(key);
      } else if (d.spec.SameSelectorInput(sd)) {
        kept[key] = std::move(dev->second->verdicts);
      }
    }
  }
  std::set<std::string> touched;
  RemoveSliceLocked(name, touched, unchanged);
  std::vector<Key> keys;     // every device of the slice, in its order
  std::vector<Key> changed;  // the ones that (re)entered the indexes now
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
    Key key = DeviceKey(spec.driver, spec.pool.name, sd.name);
    if (unchanged.contains(key)) {
      keys.push_back(std::move(key));
      continue;
    }
    auto d = std::make_unique<Device>();
    d->key = std::move(key);
    d->slice = name;
    d->pool = spec.pool.name;
    d->node = sd.node_name.value_or(slice_node);
    d->spec = CompactSpec::Of(sd, names_);
    d->driver_id = labels_.Id(spec.driver);
    d->product_id = labels_.Id(d->spec.StringAttribute("productName"));
    d->driver_name = &labels_.Value(d->driver_id);
    d->product_name = &labels_.Value(d->product_id);
    d->type_name = &labels_.Value(labels_.Id(d->spec.StringAttribute("type")));
    d->profile_name = &labels_.Value(labels_.Id(d->spec.StringAttribute("profile")));
    d->tainted = std::any_of(sd.taints.begin(), sd.taints.end(), fit::Blocking);
    // Counter sets by their key across pools.
    d->consumes = fit::ConsumptionOf(sd);
    for (auto& [set, counters] : d->consumes) {
      set = DeviceKey(spec.driver, spec.pool.name, set);
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
    } else if (std::string parent = d->spec.StringAttribute("parentUUID"); !parent.empty()) {
      d->gpu = absl::StrCat("uuid\x1f", spec.driver, "\x1f", parent);
    } else if (std::string uuid = d->spec.StringAttribute("uuid"); !uuid.empty()) {
      d->gpu = absl::StrCat("uuid\x1f", spec.driver, "\x1f", uuid);
    } else {
      d->gpu = absl::StrCat("device\x1f", d->key);
    }
    if (auto k = kept.find(d->key); k != kept.end()) {
      d->verdicts = std::move(k->second);
    }
    if (auto existing = devices_.find(d->key); existing != devices_.end()) {
      // The device moved here from another slice of the pool (or another publisher took its
      // name): the old one leaves every index it was in, as RemoveSliceLocked would take it out.
      RemoveDevice(existing, touched);
    }
    const cel::DeviceView published{d->driver(), &sd.attributes, &sd.capacity};
    ClassifyDevice(*d, &published);
    node_devices_[d->node].push_back(d.get());
    dirty_nodes_.insert(d->node);
    for (const auto& [set_key, counters] : d->consumes) {
      consumers_[set_key].insert(d->key);
      // Its counter set may come from another slice of the pool.
      if (auto set = counter_sets_.find(set_key); set != counter_sets_.end()) {
        set->second->devices.insert(d->key);
      }
    }
    keys.push_back(d->key);
    changed.push_back(d->key);
    const absl::string_view view = d->key;  // the map's key lives in the device it holds
    devices_.emplace(view, std::move(d));
  }
  for (const std::string& set_key : set_keys) {
    // Its consumers, whichever slice of the pool published them.
    if (auto c = consumers_.find(set_key); c != consumers_.end()) {
      counter_sets_[set_key]->devices = c->second;
    }
    RecountCounters(set_key);
  }
  for (const Key& key : changed) {
    for (const auto& [set_key, counters] : devices_[key]->consumes) {
      RecountCounters(set_key);
    }
  }
  // Claims holding a device published now may learn where it is.
  std::set<Claim*, ByClaimKey> holders;
  for (const Key& key : changed) {
    if (auto a = allocations_.find(key); a != allocations_.end()) {
      for (const auto& [claim, consumed] : a->second) {
        holders.insert(claim);
      }
    }
  }
  for (Claim* claim : holders) {
    RefreshSpread(*claim);
  }
  touched.insert(slice_node);
  for (const Key& key : changed) {
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
  ClassesChanged();
}

void Analyzer::DeleteClass(const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (classes_.erase(name) == 0) {
    return;
  }
  ClassesChanged();
}

void Analyzer::ClassesChanged() {
  for (auto& [key, device] : devices_) {
    ClassifyDevice(*device);
  }
  // A class that went leaves no (empty) index behind.
  for (auto* index : {&class_devices_, &class_unknown_}) {
    std::erase_if(*index, [this](const auto& entry) { return !classes_.contains(entry.first); });
  }
  for (auto& [signature, leaf] : leaves_) {
    RecountLeaf(*leaf);
  }
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
    Flush();
  }
}

void Analyzer::DeleteNode(const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (nodes_.erase(name) > 0) {
    RefreshNodeDevices(name);
    dirty_nodes_.insert(name);
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
  Flush();
}

void Analyzer::SetSynced() {
  absl::MutexLock lock(&mu_);
  if (deriving_) {
    return;
  }
  deriving_ = true;
  MarkAllNodesDirty();
  rederive_all_ = true;
  Flush();
}

// --- pods --------------------------------------------------------------------------------------

void Analyzer::UpsertPod(const model::Pod& pod) {
  absl::MutexLock lock(&mu_);
  const Key key = absl::StrCat(pod.metadata.namespace_name, "/", pod.metadata.name);
  const bool running = pod.status.phase == "Running";
  auto [it, inserted] = pods_.try_emplace(key);
  if (!inserted && it->second.exists && it->second.running == running) {
    return;
  }
  it->second.exists = true;
  it->second.running = running;
  PodChanged(it);
}

bool Analyzer::PodRunning(const Key& pod) const {
  auto it = pods_.find(pod);
  return it != pods_.end() && it->second.running;
}

void Analyzer::PodChanged(absl::flat_hash_map<Key, Pod>::iterator it) {
  // RefreshClaimState does not touch reservations, so the list stands while it runs.
  for (Claim* claim : it->second.claims) {
    RefreshClaimState(*claim);
  }
  if (!it->second.exists && it->second.claims.empty()) {
    pods_.erase(it);
  }
  Flush();
}

void Analyzer::DeletePod(const std::string& ns, const std::string& name) {
  absl::MutexLock lock(&mu_);
  const Key key = absl::StrCat(ns, "/", name);
  auto it = pods_.find(key);
  if (it == pods_.end() || !it->second.exists) {
    return;
  }
  it->second.exists = false;
  it->second.running = false;
  PodChanged(it);
}

}  // namespace dralens::exporter::cluster
