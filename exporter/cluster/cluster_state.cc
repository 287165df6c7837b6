#include "exporter/cluster/cluster_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/fnv.h"

namespace dralens::exporter::cluster {

std::string DeviceKey(absl::string_view driver, absl::string_view pool, absl::string_view device) {
  return absl::StrCat(driver, "/", pool, "/", device);
}

uint64_t OrderOf(absl::string_view key) { return common::Fnv1a64(key); }

// --- devices -----------------------------------------------------------------------------------

namespace {

bool ByGpuThenKey(const Device* a, const Device* b) {
  return a->gpu != b->gpu ? a->gpu < b->gpu : a->key < b->key;
}

// Records for each of a node's devices (sorted by ByGpuThenKey) where its GPU's devices start
// and how many they are. `same[i]`: device i is of the GPU of device i - 1.
void NumberGpus(const std::vector<Device*>& on_node, const std::vector<char>& same) {
  uint32_t first = 0;
  for (size_t i = 0; i < on_node.size(); ++i) {
    if (i > 0 && !same[i]) {
      first = static_cast<uint32_t>(i);
    }
    on_node[i]->gpu_first = first;
  }
  // Devices from each one to the end of its GPU, then the GPU's count for all of them.
  for (size_t i = on_node.size(); i-- > 0;) {
    const bool last = i + 1 == on_node.size() || !same[i + 1];
    on_node[i]->gpu_devices = last ? 1 : on_node[i + 1]->gpu_devices + 1;
  }
  for (Device* d : on_node) {
    d->gpu_devices = on_node[d->gpu_first]->gpu_devices;
  }
}

// Whether each device is of the previous one's GPU. Two devices that were there before are
// when they were numbered into one GPU (a GPU's devices are adjacent, so whatever came or went
// between them was of that GPU too); only `added` (null: none) is compared by its GPU's name,
// with its neighbours: reading that name is a cache miss of its own at fleet scale.
std::vector<char> SameGpu(const std::vector<Device*>& on_node, const Device* added) {
  std::vector<char> same(on_node.size(), 0);
  for (size_t i = 1; i < on_node.size(); ++i) {
    const Device* a = on_node[i - 1];
    const Device* b = on_node[i];
    same[i] = a == added || b == added ? a->gpu == b->gpu : a->gpu_first == b->gpu_first;
  }
  return same;
}

}  // namespace

Device* ClusterState::FindDevice(absl::string_view key) const {
  auto it = devices_.find(key);
  return it == devices_.end() ? nullptr : it->second.get();
}

Device& ClusterState::AddDevice(std::unique_ptr<Device> device) {
  Device& d = *device;
  std::vector<Device*>& on_node = node_devices_[d.node];
  on_node.insert(std::upper_bound(on_node.begin(), on_node.end(), &d, ByGpuThenKey), &d);
  NumberGpus(on_node, SameGpu(on_node, &d));
  for (const auto& [set_key, counters] : d.consumes) {
    consumers_[set_key].insert(d.key);
    // Its counter set may come from another slice of the pool.
    if (auto set = counter_sets_.find(set_key); set != counter_sets_.end()) {
      set->second->devices.insert(d.key);
    }
  }
  auto held = allocations_.find(d.key);
  d.holders = held == allocations_.end() ? nullptr : &held->second;
  LinkRecords(d, &d);
  const absl::string_view view = d.key;  // the map's key lives in the device it holds
  devices_.emplace(view, std::move(device));
  return d;
}

void ClusterState::RemoveDevice(absl::string_view key) {
  auto it = devices_.find(key);
  if (it == devices_.end()) {
    return;
  }
  Device& d = *it->second;
  LinkRecords(d, nullptr);
  if (auto devs = node_devices_.find(d.node); devs != node_devices_.end()) {
    std::erase(devs->second, &d);
    if (devs->second.empty()) {
      node_devices_.erase(devs);
    } else {
      NumberGpus(devs->second, SameGpu(devs->second, nullptr));
    }
  }
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

void ClusterState::LinkRecords(const Device& device, Device* record) {
  if (device.holders == nullptr) {
    return;
  }
  for (const auto& [claim, consumed] : *device.holders) {
    for (size_t i = 0; i < claim->devices.size(); ++i) {
      if (claim->devices[i].first == device.key) {
        claim->device_records[i] = record;
      }
    }
  }
}

const std::vector<Device*>& ClusterState::DevicesOn(const std::string& node) const {
  static const std::vector<Device*> kNone;
  auto it = node_devices_.find(node);
  return it == node_devices_.end() ? kNone : it->second;
}

absl::Span<Device* const> ClusterState::GpuOf(const Device& device) const {
  return GpuAt(DevicesOn(device.node), device.gpu_first);
}

// --- counter sets ------------------------------------------------------------------------------

const CounterSet* ClusterState::FindCounterSet(const Key& key) const {
  auto it = counter_sets_.find(key);
  return it == counter_sets_.end() ? nullptr : it->second.get();
}

void ClusterState::AddCounterSet(std::unique_ptr<CounterSet> set) {
  const Key key = set->key;
  // Its consumers, whichever slice of the pool published them.
  set->devices.clear();
  if (auto c = consumers_.find(key); c != consumers_.end()) {
    set->devices = c->second;
  }
  counter_sets_[key] = std::move(set);
  RecountUsed(key);
}

void ClusterState::RemoveCounterSet(const Key& key) { counter_sets_.erase(key); }

const CounterSet* ClusterState::RecountUsed(const Key& key) {
  auto it = counter_sets_.find(key);
  if (it == counter_sets_.end()) {
    return nullptr;
  }
  CounterSet& set = *it->second;
  set.used.clear();
  for (const Key& device_key : set.devices) {
    const Device* d = FindDevice(device_key);
    if (d == nullptr || HoldersOf(*d) == nullptr) {
      continue;
    }
    for (const auto& [consumed_set, counters] : d->consumes) {
      if (consumed_set != key) {
        continue;
      }
      for (const auto& [name, value] : counters) {
        set.used[name] += value;
      }
    }
  }
  return &set;
}

std::optional<double> ClusterState::CounterLeft(const Key& set_key, const std::string& name) const {
  const CounterSet* set = FindCounterSet(set_key);
  if (set == nullptr) {
    return std::nullopt;
  }
  auto cap = set->capacity.find(name);
  const double capacity = cap == set->capacity.end() ? 0 : cap->second;
  auto used = set->used.find(name);
  const double in_use = used == set->used.end() ? 0 : used->second;
  return capacity - in_use;
}

// --- slices ------------------------------------------------------------------------------------

const ClusterState::Slice* ClusterState::FindSlice(const std::string& name) const {
  auto it = slices_.find(name);
  return it == slices_.end() ? nullptr : &it->second;
}

ClusterState::Slice* ClusterState::FindSlice(const std::string& name) {
  return const_cast<Slice*>(std::as_const(*this).FindSlice(name));
}

void ClusterState::SetSlice(const std::string& name, Slice slice) {
  slices_[name] = std::move(slice);
}

void ClusterState::EraseSlice(const std::string& name) { slices_.erase(name); }

void ClusterState::ForgetDigest(const std::string& name, absl::string_view key) {
  auto it = slices_.find(name);
  if (it == slices_.end()) {
    return;
  }
  Slice& slice = it->second;
  for (size_t i = 0; i < slice.devices.size() && i < slice.digests.size(); ++i) {
    if (slice.devices[i] == key) {
      slice.digests[i] = 0;
    }
  }
}

// --- nodes -------------------------------------------------------------------------------------

bool ClusterState::SetNode(const NodeInfo& node) {
  auto [it, inserted] = nodes_.try_emplace(node.name, node);
  if (inserted) {
    return true;
  }
  const bool changed = it->second.ready != node.ready;
  it->second = node;
  return changed;
}

bool ClusterState::EraseNode(const std::string& name) { return nodes_.erase(name) > 0; }

bool ClusterState::NodeDown(const std::string& node) const {
  if (node.empty()) {
    return false;
  }
  auto it = nodes_.find(node);
  if (it == nodes_.end()) {
    return nodes_synced_;
  }
  return !it->second.ready;
}

// --- claims ------------------------------------------------------------------------------------

Claim* ClusterState::FindClaim(absl::string_view key) const {
  auto it = claims_.find(key);
  return it == claims_.end() ? nullptr : it->second.get();
}

Claim& ClusterState::AddClaim(std::unique_ptr<Claim> claim) {
  Claim& c = *claim;
  const absl::string_view view = c.key;  // the map's key lives in the claim it holds
  claims_.emplace(view, std::move(claim));
  return c;
}

void ClusterState::EraseClaim(absl::string_view key) { claims_.erase(key); }

std::shared_ptr<Request> ClusterState::SharedRequest(std::shared_ptr<Request> request) {
  // The key is the signature plus the names (the request's and its alternatives'), which
  // explain shows.
  std::string key = absl::StrCat(request->name, "\x1d", request->signature);
  for (const std::shared_ptr<Request>& alternative : request->alternatives) {
    absl::StrAppend(&key, "\x1e", alternative->name);
  }
  std::weak_ptr<Request>& slot = requests_[key];
  if (std::shared_ptr<Request> shared = slot.lock()) {
    return shared;
  }
  slot = request;
  if (requests_.size() > 2 * live_request_keys_ + 64) {
    // Forget the keys whose requests every claim let go of.
    std::erase_if(requests_, [](const auto& entry) { return entry.second.expired(); });
    live_request_keys_ = requests_.size();
  }
  return request;
}

// --- allocations -------------------------------------------------------------------------------

const ClusterState::Holders* ClusterState::HoldersOf(absl::string_view device) const {
  auto it = allocations_.find(device);
  return it == allocations_.end() || it->second.empty() ? nullptr : &it->second;
}

const ClusterState::Holders* ClusterState::HoldersOf(const Device& device) {
  return device.holders == nullptr || device.holders->empty() ? nullptr : device.holders;
}

std::set<ClusterState::Key> ClusterState::SetAllocations(
    Claim& claim, std::vector<std::pair<Key, std::string>> devices,
    std::map<Key, std::map<std::string, double>> consumed) {
  for (const auto& [device, cls] : devices) {
    consumed.try_emplace(device);  // every device held has a holders entry, which names the claim
  }
  if (devices == claim.devices) {
    bool same = true;
    for (const auto& [device, capacity] : consumed) {
      const Holders* holders = HoldersOf(device);
      if (holders == nullptr) {
        same = false;
        break;
      }
      auto held = std::find_if(holders->begin(), holders->end(),
                               [&](const auto& holder) { return holder.first == &claim; });
      same = same && held != holders->end() && held->second == capacity;
    }
    if (same) {
      return {};
    }
  }
  std::set<Key> touched;
  for (const auto& [device, cls] : claim.devices) {
    auto a = allocations_.find(device);
    if (a != allocations_.end()) {
      std::erase_if(a->second, [&](const auto& holder) { return holder.first == &claim; });
      if (a->second.empty()) {
        if (Device* d = FindDevice(device); d != nullptr) {
          d->holders = nullptr;
        }
        allocations_.erase(a);
      }
    }
    touched.insert(device);
  }
  for (auto& [device, capacity] : consumed) {
    auto [entry, created] = allocations_.try_emplace(device);
    Holders& holders = entry->second;
    if (created) {
      if (Device* d = FindDevice(device); d != nullptr) {
        d->holders = &holders;
      }
    }
    auto at = std::lower_bound(
        holders.begin(), holders.end(), claim.key,
        [](const auto& holder, const Key& key) { return holder.first->key < key; });
    if (at != holders.end() && at->first == &claim) {
      at->second = std::move(capacity);
    } else {
      holders.insert(at, {&claim, std::move(capacity)});
    }
    touched.insert(device);
  }
  claim.devices = std::move(devices);
  claim.device_records.clear();
  for (const auto& [device, cls] : claim.devices) {
    claim.device_records.push_back(FindDevice(device));
  }
  return touched;
}

bool ClusterState::DeviceAllocated(const Device& device) const {
  const Holders* holders = HoldersOf(device);
  if (holders == nullptr) {
    return false;
  }
  if (!device.spec.allow_multiple_allocations) {
    return true;
  }
  // Shared device: full once any consumed capacity reaches what the device has.
  std::map<std::string, double> consumed;
  for (const auto& [claim, capacity] : *holders) {
    for (const auto& [name, value] : capacity) {
      consumed[name] += value;
    }
  }
  for (const auto& [name, value] : consumed) {
    auto cap = device.capacity.find(name);
    if (cap != device.capacity.end() && value + kEpsilon >= cap->second) {
      return true;
    }
  }
  return false;
}

bool ClusterState::DeviceBlocked(const Device& device) const {
  if (HoldersOf(device) != nullptr) {
    return false;  // its own allocation holds the counters
  }
  return fit::FitCounters(device.consumes,
                          [this](const std::string& set_key, const std::string& name) {
                            return CounterLeft(set_key, name);
                          }) == fit::CounterFit::kExceeds;
}

bool ClusterState::DeviceFree(const Device& device) const {
  return !device.tainted && !DeviceAllocated(device) && !DeviceBlocked(device);
}

std::vector<std::pair<const Claim*, double>> ClusterState::HolderShares(
    const Device& device) const {
  std::vector<std::pair<const Claim*, double>> shares;
  const Holders* holders = HoldersOf(device);
  if (holders == nullptr) {
    return shares;
  }
  if (!device.spec.allow_multiple_allocations) {
    // Whole-device allocations: several holders (admin access) split it evenly.
    const double each = 1.0 / static_cast<double>(holders->size());
    for (const auto& [claim, consumed] : *holders) {
      shares.emplace_back(claim, each);
    }
    return shares;
  }
  // Shares of a device with allowMultipleAllocations: each holder's part of the capacity that
  // is most consumed (the one that fills the device first).
  std::map<std::string, double> total;
  for (const auto& [claim, consumed] : *holders) {
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
  for (const auto& [claim, consumed] : *holders) {
    auto v = consumed.find(binding);
    if (v != consumed.end() && v->second > 0) {
      shares.emplace_back(claim, v->second / capacity * scale);
    }
  }
  return shares;
}

// --- pods --------------------------------------------------------------------------------------

void ClusterState::SetReservations(Claim& claim, std::vector<Key> pods) {
  if (pods == claim.reserved_pods) {
    return;
  }
  for (const Key& pod : claim.reserved_pods) {
    auto it = pods_.find(pod);
    if (it != pods_.end()) {
      ClaimList& claims = it->second.claims;
      claims.erase(std::remove(claims.begin(), claims.end(), &claim), claims.end());
      if (claims.empty() && !it->second.exists) {
        pods_.erase(it);
      }
    }
  }
  for (const Key& pod : pods) {
    ClaimList& claims = pods_[pod].claims;
    if (std::find(claims.begin(), claims.end(), &claim) == claims.end()) {
      claims.push_back(&claim);
    }
  }
  claim.reserved_pods = std::move(pods);
}

bool ClusterState::PodRunning(const Key& pod) const {
  auto it = pods_.find(pod);
  return it != pods_.end() && it->second.running;
}

std::optional<ClusterState::ClaimList> ClusterState::SetPod(const Key& pod, bool exists,
                                                            bool running) {
  running = running && exists;
  auto it = pods_.find(pod);
  if (it == pods_.end()) {
    if (!exists) {
      return std::nullopt;
    }
    it = pods_.try_emplace(pod).first;
  } else if (it->second.exists == exists && it->second.running == running) {
    return std::nullopt;
  }
  it->second.exists = exists;
  it->second.running = running;
  ClaimList claims = it->second.claims;
  if (!exists && claims.empty()) {
    pods_.erase(it);
  }
  return claims;
}

}  // namespace dralens::exporter::cluster
