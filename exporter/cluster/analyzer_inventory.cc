#include <algorithm>
#include <deque>
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
                                 const std::set<Key>& keep, const std::vector<bool>& held) {
  const ClusterState::Slice* slice = state_.FindSlice(name);
  if (slice == nullptr) {
    return;
  }
  for (size_t i = 0; i < slice->devices.size(); ++i) {
    if (i < held.size() && held[i]) {
      continue;  // kept by its digest: its key is not even read
    }
    const Key& key = slice->devices[i];
    if (keep.contains(key)) {
      continue;  // before the lookup: a republish keeps most devices, each lookup a cache miss
    }
    Device* device = state_.FindDevice(key);
    if (device == nullptr || device->slice != name) {
      continue;  // republished by another slice of the pool meanwhile
    }
    RemoveDevice(*device, touched);
  }
  for (const Key& set_key : slice->counter_sets) {
    const CounterSet* set = state_.FindCounterSet(set_key);
    if (set != nullptr && set->slice == name) {
      dirty_nodes_.insert(set->node);
      touched.insert(set->node);
      state_.RemoveCounterSet(set_key);
    }
  }
  state_.EraseSlice(name);
}

void Analyzer::RemoveDevice(Device& device, std::set<std::string>& touched) {
  CountDevice(device, -1);
  UnclassifyDevice(device);
  dirty_nodes_.insert(device.node);
  touched.insert(device.node);
  state_.RemoveDevice(device.key);
}

void Analyzer::UpsertSlice(const model::ResourceSlice& slice) {
  absl::MutexLock lock(&mu_);
  std::vector<PublishedDevice> devices;
  devices.reserve(slice.spec.devices.size());
  for (const model::SliceDevice& sd : slice.spec.devices) {
    devices.push_back({.digest = 0, .decoded = &sd});
  }
  UpsertSliceLocked(slice, devices);
}

void Analyzer::MatchHeld(const std::string& name, absl::Span<const uint64_t> digests,
                         std::vector<PublishedDevice>& devices) {
  // The devices this slice published last time, by digest (no device lookups: a republish of
  // eight devices cost eight cache misses here at 100k).
  absl::flat_hash_map<uint64_t, int32_t> held;
  if (const ClusterState::Slice* old = state_.FindSlice(name); old != nullptr) {
    for (size_t i = 0; i < old->devices.size() && i < old->digests.size(); ++i) {
      if (old->digests[i] != 0) {
        held.emplace(old->digests[i], static_cast<int32_t>(i));
      }
    }
  }
  devices.assign(digests.size(), PublishedDevice{});
  for (size_t i = 0; i < digests.size(); ++i) {
    devices[i].digest = digests[i];
    if (auto h = held.find(digests[i]); digests[i] != 0 && h != held.end()) {
      devices[i].held = h->second;
      held.erase(h);  // the same text twice in one slice: the second one is decoded
    }
  }
}

absl::Status Analyzer::UpsertSlice(
    const model::ResourceSlice& head, absl::Span<const uint64_t> digests,
    absl::FunctionRef<absl::StatusOr<model::SliceDevice>(size_t)> decode) {
  // The decode happens under the lock: taking it twice, to decode in between, cost as much in
  // contention at 100k claims as decoding one device does (scale_bench, perf).
  absl::MutexLock lock(&mu_);
  std::vector<PublishedDevice> devices;
  MatchHeld(head.metadata.name, digests, devices);
  // A deque: the records point into it as it grows (a taint decodes one device of eight).
  std::deque<model::SliceDevice> decoded;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].held >= 0) {
      continue;
    }
    absl::StatusOr<model::SliceDevice> device = decode(i);
    if (!device.ok()) {
      return device.status();
    }
    decoded.push_back(*std::move(device));
    devices[i].decoded = &decoded.back();
  }
  UpsertSliceLocked(head, devices);
  return absl::OkStatus();
}

void Analyzer::UpsertSliceLocked(const model::ResourceSlice& slice,
                                 const std::vector<PublishedDevice>& devices) {
  const std::string& name = slice.metadata.name;
  const model::ResourceSliceSpec& spec = slice.spec;
  const std::string slice_node = spec.node_name.value_or("");
  // A device this slice already published, exactly as it is now, stays as it is: its counts,
  // verdicts and indexes hold. Only the devices that changed leave and come back, so a taint
  // on one GPU costs one device, not the slice. A device held by its digest was not even
  // decoded; a decoded one is compared with the record. A changed device whose attributes and
  // capacity are the same keeps its cached selector verdicts (taints are not what selectors
  // read).
  //
  // A device held by its digest is known by its place in the slice as published before, and
  // its key moves from there to the slice as published now: neither its key nor its record is
  // read (at fleet scale each is a cache miss, and a taint holds seven devices of eight).
  ClusterState::Slice* old = state_.FindSlice(name);
  std::vector<bool> held(old != nullptr ? old->devices.size() : 0);
  std::unordered_map<Key, const model::SliceDevice*> incoming;
  std::set<Key> unchanged;  // decoded, and the same as the record
  for (const PublishedDevice& p : devices) {
    if (p.held >= 0) {
      held.at(p.held) = true;  // MatchHeld placed it in this slice, under the same lock
    } else {
      incoming[DeviceKey(spec.driver, spec.pool.name, p.decoded->name)] = p.decoded;
    }
  }
  std::unordered_map<Key, std::vector<std::pair<int, cel::Verdict>>> kept;
  // The devices published again under the same key with other content, as they were.
  std::unordered_map<Key, Replaced> replaced;
  // The devices whose taints alone changed.
  std::vector<std::pair<Device*, const model::SliceDevice*>> retainted;
  size_t published_before = 0;
  bool had_counter_sets = false;
  // The held devices' keys, by their places.
  std::vector<Key> held_keys(held.size());
  if (old != nullptr) {
    published_before = old->devices.size();
    had_counter_sets = !old->counter_sets.empty();
    for (size_t i = 0; i < old->devices.size(); ++i) {
      if (held[i]) {
        held_keys[i] = std::move(old->devices[i]);  // the slice is replaced below
        continue;
      }
      const Key& key = old->devices[i];
      auto now = incoming.find(key);
      if (now == incoming.end()) {
        continue;  // gone: no lookup (a cache miss each at 100k)
      }
      Device* device = state_.FindDevice(key);
      if (device == nullptr || device->slice != name) {
        continue;
      }
      const model::SliceDevice& sd = *now->second;
      const bool same_input = device->spec.SameSelectorInput(sd);
      if (same_input && device->spec.SameConsumption(sd) &&
          device->node == sd.node_name.value_or(slice_node)) {
        // The same device, or the same with other taints: the record stays in every index
        // (a taint that came or went takes it out of none), and takes its new taints below.
        unchanged.insert(key);
        if (device->spec.taints != sd.taints) {
          retainted.emplace_back(device, &sd);
        }
        continue;
      }
      if (same_input) {
        // A copy: the old device still leaves the leaf counts by these verdicts below, and
        // without them would evaluate every selector again on its way out.
        kept[key] = device->verdicts;
      }
      replaced[key] = {.node = device->node,
                       .gpu = device->gpu,
                       .driver_id = device->driver_id,
                       .product_id = device->product_id,
                       .class_ids = device->class_ids,
                       .pool_state = device->pool_state,
                       .consumed = !device->consumes.empty(),
                       .node_was_dirty = dirty_nodes_.contains(device->node)};
    }
  }
  std::set<std::string> touched;
  RemoveSliceLocked(name, touched, unchanged, held);
  old = nullptr;          // erased
  std::vector<Key> keys;  // every device of the slice, in its order
  std::vector<uint64_t> digests;
  std::vector<Device*> changed;  // the ones that (re)entered the indexes now
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
    state_.AddCounterSet(std::move(set));
  }
  for (const PublishedDevice& p : devices) {
    digests.push_back(p.digest);
    if (p.held >= 0) {
      keys.push_back(std::move(held_keys[p.held]));
      continue;
    }
    const model::SliceDevice& sd = *p.decoded;
    Key key = DeviceKey(spec.driver, spec.pool.name, sd.name);
    if (unchanged.contains(key)) {
      keys.push_back(std::move(key));  // the same device, sent as other text (or without it)
      continue;
    }
    auto d = std::make_unique<Device>();
    d->key = std::move(key);
    d->order = OrderOf(d->key);
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
    if (Device* existing = state_.FindDevice(d->key); existing != nullptr) {
      // The device moved here from another slice of the pool (or another publisher took its
      // name): the old one leaves every index it was in, as RemoveSliceLocked would take it out,
      // and its slice no longer holds it by its digest.
      state_.ForgetDigest(existing->slice, existing->key);
      RemoveDevice(*existing, touched);
    }
    const cel::DeviceView published{d->driver(), &sd.attributes, &sd.capacity};
    ClassifyDevice(*d, &published);
    dirty_nodes_.insert(d->node);
    Device& added = state_.AddDevice(std::move(d));
    keys.push_back(added.key);
    changed.push_back(&added);
  }
  for (const std::string& set_key : set_keys) {
    RecountCounters(set_key);
  }
  for (const Device* device : changed) {
    for (const auto& [set_key, counters] : device->consumes) {
      RecountCounters(set_key);
    }
  }
  // Claims holding a device published now may learn where it is.
  std::set<Claim*, ByClaimKey> holders;
  for (const Device* device : changed) {
    if (const ClusterState::Holders* h = ClusterState::HoldersOf(*device); h != nullptr) {
      for (const auto& [claim, consumed] : *h) {
        holders.insert(claim);
      }
    }
  }
  for (Claim* claim : holders) {
    RefreshSpread(*claim);
  }
  for (const auto& [device, sd] : retainted) {
    RetaintDevice(*device, sd->taints);
  }
  touched.insert(slice_node);
  for (Device* device : changed) {
    Device& d = *device;
    touched.insert(d.node);
    d.counted_free =
        !state_.DeviceAllocated(d) && !state_.DeviceBlocked(d) && !state_.NodeDown(d.node);
    CountDevice(d, +1);
  }
  const bool in_place = keys.size() == published_before && !had_counter_sets && set_keys.empty() &&
                        RepublishedInPlace(changed, replaced);
  if (!in_place) {
    // Devices of other slices whose counters this one publishes or frees.
    for (const std::string& node : touched) {
      RefreshNodeDevices(node);
    }
  }
  state_.SetSlice(name, {std::move(keys), std::move(digests), std::move(set_keys)});
  Flush();
}

void Analyzer::RetaintDevice(Device& device, const std::vector<model::DeviceTaint>& taints) {
  // A taint moves the device's part in the leaves' counts (whether it is untainted for a
  // request), its pool state and its GPU's tally; not whether it is free, its classes or where
  // it is.
  const bool counted = device.counted;
  CountDevice(device, -1);
  device.spec.taints = taints;
  device.tainted = std::any_of(taints.begin(), taints.end(), fit::Blocking);
  if (counted) {
    CountDevice(device, +1);
  }
  if (device.consumes.empty()) {
    MarkGpuDirty(device);
  } else {
    // What its siblings on the counter set can place moves with it: the node's recompute.
    dirty_nodes_.insert(device.node);
  }
}

bool Analyzer::RepublishedInPlace(const std::vector<Device*>& changed,
                                  const std::unordered_map<Key, Replaced>& replaced) {
  // Every device that came back must have left from the same place, and no other device came or
  // went (the caller compares the slice's size). A device on counters sends its node to a full
  // recompute: what its siblings can place, and whether they are blocked, moves with it.
  if (!deriving_ || changed.size() != replaced.size()) {
    return false;
  }
  for (const Device* d : changed) {
    auto r = replaced.find(d->key);
    if (r == replaced.end() || r->second.consumed || !d->consumes.empty() ||
        r->second.node != d->node || r->second.gpu != d->gpu ||
        r->second.driver_id != d->driver_id || r->second.product_id != d->product_id ||
        r->second.class_ids != d->class_ids) {
      return false;
    }
  }
  // Each device is in the same GPU, under the same labels, as before: its node's pool counts
  // take it back in the state it was counted in, and only its GPU is tallied again.
  for (Device* d : changed) {
    const Replaced& r = replaced.at(d->key);
    d->pool_state = r.pool_state;
    if (!r.node_was_dirty) {
      dirty_nodes_.erase(d->node);
    }
  }
  for (const Device* d : changed) {
    MarkGpuDirty(*d);
  }
  return true;
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
  for (const auto& [key, device] : state_.devices()) {
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
  if (state_.SetNode(node)) {
    RefreshNodeDevices(node.name);
    dirty_nodes_.insert(node.name);
    Flush();
  }
}

void Analyzer::DeleteNode(const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (state_.EraseNode(name)) {
    RefreshNodeDevices(name);
    dirty_nodes_.insert(name);
    Flush();
  }
}

void Analyzer::SetNodesSynced() {
  absl::MutexLock lock(&mu_);
  state_.SetNodesSynced();
  for (const auto& [key, device] : state_.devices()) {
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
  PodChanged(state_.SetPod(absl::StrCat(pod.metadata.namespace_name, "/", pod.metadata.name), true,
                           pod.status.phase == "Running"));
}

void Analyzer::DeletePod(const std::string& ns, const std::string& name) {
  absl::MutexLock lock(&mu_);
  PodChanged(state_.SetPod(absl::StrCat(ns, "/", name), false, false));
}

void Analyzer::PodChanged(const std::optional<ClusterState::ClaimList>& claims) {
  if (!claims.has_value()) {
    return;
  }
  for (Claim* claim : *claims) {
    RefreshClaimState(*claim);
  }
  Flush();
}

}  // namespace dralens::exporter::cluster
