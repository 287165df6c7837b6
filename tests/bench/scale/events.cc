#include "tests/bench/scale/events.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dralens::bench::scale {
namespace {

// The longest-pending claim of each class names the class of free_while_pending capacity;
// allocating it would relabel every free GPU of that class.
constexpr int kProtectedPerClass = 1;

int IndexOf(EventKind kind) { return static_cast<int>(kind); }

}  // namespace

const char* ToString(EventKind kind) {
  switch (kind) {
    case EventKind::kAllocate:
      return "allocate";
    case EventKind::kPodStart:
      return "pod_start";
    case EventKind::kPodStop:
      return "pod_stop";
    case EventKind::kRelease:
      return "release";
    case EventKind::kPodDelete:
      return "pod_delete";
    case EventKind::kPodAdd:
      return "pod_add";
    case EventKind::kTaint:
      return "taint";
  }
  return "unknown";
}

void EventGenerator::Pool::Set(int value, bool member) {
  if (static_cast<size_t>(value) >= position_.size()) {
    position_.resize(value + 1, 0);
  }
  int& pos = position_[value];
  if (member && pos == 0) {
    items_.push_back(value);
    pos = static_cast<int>(items_.size());
  } else if (!member && pos != 0) {
    const int last = items_.back();
    items_[pos - 1] = last;
    position_[last] = pos;
    items_.pop_back();
    pos = 0;
  }
}

bool EventGenerator::Pool::Contains(int value) const {
  return static_cast<size_t>(value) < position_.size() && position_[value] != 0;
}

EventGenerator::EventGenerator(Fleet& fleet, uint64_t seed)
    : fleet_(fleet), rng_(seed ^ 0x5ca1ab1eull), protected_(fleet.claims.size(), false) {
  // The longest-pending claims of each class with room stay pending.
  std::vector<std::tuple<absl::Time, std::string, int>> by_age[kClassCount];
  for (size_t i = 0; i < fleet_.claims.size(); ++i) {
    const Claim& c = fleet_.claims[i];
    if (fleet_.StateOf(c) == ClaimState::kPending && Roomy(c)) {
      by_age[c.request.device_class].emplace_back(c.created, absl::StrCat(c.ns, "/", c.name),
                                                  static_cast<int>(i));
    }
  }
  for (auto& list : by_age) {
    std::sort(list.begin(), list.end());
    for (size_t i = 0; i < list.size() && i < kProtectedPerClass; ++i) {
      protected_[std::get<2>(list[i])] = true;
    }
  }
  for (size_t i = 0; i < fleet_.claims.size(); ++i) {
    Reindex(static_cast<int>(i));
  }
  for (size_t g = 0; g < fleet_.gpus.size(); ++g) {
    ReindexGpu(static_cast<int>(g));
  }
  for (int c : {kClassGpu, kClassAmpere, kClassLargeMemory}) {
    reserve_[c] = std::max(4, FreeFor(c) / 4);
  }
  for (size_t n = 0; n < fleet_.nodes.size(); ++n) {
    const ProductId p = fleet_.nodes[n].product;
    if (p != ProductId::kB200 && p != ProductId::kH100) {
      taint_nodes_.push_back(static_cast<int>(n));
    }
  }
}

bool EventGenerator::Roomy(const Claim& claim) const {
  const int c = claim.request.device_class;
  return claim.request.selector == kNoSelector &&
         (c == kClassGpu || c == kClassAmpere || c == kClassLargeMemory);
}

bool EventGenerator::Touchable(int gpu) const {
  const ProductId p = fleet_.ProductOfGpu(fleet_.gpus[gpu]);
  return p != ProductId::kH100 && p != ProductId::kB200;
}

int EventGenerator::FreeFor(int device_class) const {
  int n = 0;
  for (int p = 0; p < kProductCount; ++p) {
    if (ClassAt(device_class).matches(static_cast<ProductId>(p))) {
      n += static_cast<int>(free_[p].size());
    }
  }
  return n;
}

bool EventGenerator::KeepsReserve(int gpu) const {
  const ProductId product = fleet_.ProductOfGpu(fleet_.gpus[gpu]);
  for (int c : {kClassGpu, kClassAmpere, kClassLargeMemory}) {
    if (ClassAt(c).matches(product) && FreeFor(c) - 1 < reserve_[c]) {
      return false;
    }
  }
  return true;
}

void EventGenerator::Reindex(int index) {
  const Claim& c = fleet_.claims[index];
  const Pod& pod = fleet_.pods[c.pod];
  const ClaimState state = fleet_.StateOf(c);
  const bool touchable = c.gpus.empty() || Touchable(c.gpus.front());
  pools_[IndexOf(EventKind::kAllocate)].Set(index, state == ClaimState::kPending && Roomy(c) &&
                                                       !protected_[index] && pod.exists &&
                                                       pod.phase == PodPhase::kPending);
  pools_[IndexOf(EventKind::kPodStart)].Set(
      index, state == ClaimState::kReserved && pod.exists && pod.phase == PodPhase::kPending);
  pools_[IndexOf(EventKind::kPodStop)].Set(index, state == ClaimState::kInUse && touchable);
  pools_[IndexOf(EventKind::kRelease)].Set(
      index, (state == ClaimState::kAllocated || state == ClaimState::kReserved) && touchable);
  pools_[IndexOf(EventKind::kPodDelete)].Set(
      index, pod.exists && pod.phase != PodPhase::kRunning && !c.reserved);
  pools_[IndexOf(EventKind::kPodAdd)].Set(index, !pod.exists);
}

void EventGenerator::ReindexGpu(int index) {
  const Gpu& gpu = fleet_.gpus[index];
  const bool free = gpu.holder < 0 && !fleet_.Unavailable(gpu) && Touchable(index);
  for (int p = 0; p < kProductCount; ++p) {
    free_[p].Set(index, free && p == static_cast<int>(fleet_.ProductOfGpu(gpu)));
  }
}

absl::Time EventGenerator::Tick() { return fleet_.options.epoch + absl::Seconds(++ticks_); }

size_t EventGenerator::Eligible(EventKind kind) const {
  if (kind == EventKind::kTaint) {
    return taint_nodes_.size();
  }
  return pools_[IndexOf(kind)].size();
}

std::optional<WatchEvent> EventGenerator::Next(EventKind kind) {
  WatchEvent event;
  event.kind = kind;
  if (kind == EventKind::kTaint) {
    for (int attempt = 0; attempt < 8 && !taint_nodes_.empty(); ++attempt) {
      const int n = taint_nodes_[rng_.Below(taint_nodes_.size())];
      Node& node = fleet_.nodes[n];
      const int g = node.first_gpu + static_cast<int>(rng_.Below(kGpusPerNode));
      Gpu& gpu = fleet_.gpus[g];
      if (!gpu.xid_taint && gpu.holder < 0 && !fleet_.Unavailable(gpu) && !KeepsReserve(g)) {
        continue;  // tainting this free GPU would eat into a class's reserve
      }
      gpu.xid_taint = !gpu.xid_taint;
      ++node.pool_generation;
      ReindexGpu(g);
      event.resource = Resource::kResourceSlices;
      event.object = RenderSlice(fleet_, n);
      return event;
    }
    return std::nullopt;
  }
  Pool& pool = pools_[IndexOf(kind)];
  for (int attempt = 0; attempt < 8 && pool.size() > 0; ++attempt) {
    const int index = pool.Draw(rng_);
    Claim& claim = fleet_.claims[index];
    Pod& pod = fleet_.pods[claim.pod];
    switch (kind) {
      case EventKind::kAllocate: {
        // A free GPU of a product the claim's class matches, weighted by how many are free.
        size_t total = 0;
        for (int p = 0; p < kProductCount; ++p) {
          if (ClassAt(claim.request.device_class).matches(static_cast<ProductId>(p))) {
            total += free_[p].size();
          }
        }
        if (total == 0) {
          continue;
        }
        size_t pick = rng_.Below(total);
        int g = -1;
        for (int p = 0; p < kProductCount && g < 0; ++p) {
          if (!ClassAt(claim.request.device_class).matches(static_cast<ProductId>(p))) {
            continue;
          }
          if (pick < free_[p].size()) {
            g = free_[p].Draw(rng_);
          } else {
            pick -= free_[p].size();
          }
        }
        if (!KeepsReserve(g)) {
          continue;
        }
        claim.gpus = {g};
        claim.reserved = true;
        claim.allocated_at = Tick();
        fleet_.gpus[g].holder = index;
        ReindexGpu(g);
        event.resource = Resource::kResourceClaims;
        event.object = RenderClaim(fleet_, index);
        break;
      }
      case EventKind::kPodStart: {
        pod.phase = PodPhase::kRunning;
        pod.node = fleet_.gpus[claim.gpus.front()].node;
        pod.started = Tick();
        pod.pod_ip = absl::StrFormat("10.%d.%d.%d", 128 + (pod.node >> 8), pod.node & 255,
                                     2 + static_cast<int>(rng_.Below(250)));
        event.resource = Resource::kPods;
        event.object = RenderPod(fleet_, claim.pod);
        break;
      }
      case EventKind::kPodStop: {
        pod.phase = PodPhase::kSucceeded;
        event.resource = Resource::kPods;
        event.object = RenderPod(fleet_, claim.pod);
        break;
      }
      case EventKind::kRelease: {
        for (int g : claim.gpus) {
          fleet_.gpus[g].holder = -1;
          ReindexGpu(g);
        }
        claim.gpus.clear();
        claim.reserved = false;
        event.resource = Resource::kResourceClaims;
        event.object = RenderClaim(fleet_, index);
        break;
      }
      case EventKind::kPodDelete: {
        event.type = "DELETED";
        event.resource = Resource::kPods;
        event.object = RenderPod(fleet_, claim.pod);
        pod.exists = false;
        break;
      }
      case EventKind::kPodAdd: {
        pod.exists = true;
        pod.phase = PodPhase::kPending;
        pod.node = -1;
        pod.pod_ip.clear();
        pod.uid = rng_.Uuid();
        pod.created = Tick();
        ++pod.incarnation;
        event.type = "ADDED";
        event.resource = Resource::kPods;
        event.object = RenderPod(fleet_, claim.pod);
        break;
      }
      case EventKind::kTaint:
        break;
    }
    Reindex(index);
    return event;
  }
  return std::nullopt;
}

std::optional<WatchEvent> EventGenerator::NextMixed() {
  std::vector<EventKind> kinds(std::begin(kEventKinds), std::end(kEventKinds));
  rng_.Shuffle(kinds);
  for (EventKind kind : kinds) {
    if (Eligible(kind) == 0) {
      continue;
    }
    if (std::optional<WatchEvent> event = Next(kind)) {
      return event;
    }
  }
  return std::nullopt;
}

}  // namespace dralens::bench::scale
