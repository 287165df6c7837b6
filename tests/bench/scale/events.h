// Events: watch events that move a Fleet the way a busy cluster moves, one object change each.
//
//   allocate    a pending claim with room to run gets a free GPU and is reserved for its pod
//   pod_start   the pod of a reserved claim starts Running (the claim becomes in_use)
//   pod_stop    a Running pod completes (Succeeded; its claim is reserved, not in use)
//   release     a claim whose pod is not running is deallocated (pending again)
//   pod_delete  a pod that is not running and holds no reservation is deleted
//   pod_add     a claim without a pod gets a new Pending pod
//   taint       a node's ResourceSlice is republished (pool generation + 1) with one GPU's XID
//               taint toggled
//
// So that each event costs what it changes, events stay clear of thresholds on purpose: they
// never touch H100s (every H100 is held and pending H100 claims wait for one, so freeing one
// would flip every such claim's reason), B200s (the tainted pool) or the longest-pending claim
// of each class (whose age names the class of free_while_pending capacity), and they keep a
// quarter of each class's free GPUs free (at least 4), so that pending claims with room keep
// it. Events are applied to the Fleet as they are drawn; the caller sends them to the API
// server.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/bench/scale/fleet.h"
#include "tests/bench/scale/render.h"

namespace dralens::bench::scale {

enum class EventKind { kAllocate, kPodStart, kPodStop, kRelease, kPodDelete, kPodAdd, kTaint };
inline constexpr EventKind kEventKinds[] = {
    EventKind::kAllocate,  EventKind::kPodStart, EventKind::kPodStop, EventKind::kRelease,
    EventKind::kPodDelete, EventKind::kPodAdd,   EventKind::kTaint};
const char* ToString(EventKind kind);

struct WatchEvent {
  EventKind kind = EventKind::kAllocate;
  const char* type = "MODIFIED";  // ADDED, MODIFIED or DELETED
  Resource resource = Resource::kPods;
  nlohmann::json object;
};

class EventGenerator {
 public:
  // `fleet` must outlive the generator and change only through it.
  EventGenerator(Fleet& fleet, uint64_t seed);

  // Applies one event of `kind` to the fleet; nullopt when nothing is eligible for it.
  std::optional<WatchEvent> Next(EventKind kind);
  // One event of a kind drawn uniformly among the kinds that have an eligible object.
  std::optional<WatchEvent> NextMixed();
  // How many objects are eligible for `kind` now.
  size_t Eligible(EventKind kind) const;

 private:
  // A set of ints with O(1) insert, erase and uniform draw.
  class Pool {
   public:
    void Set(int value, bool member);
    bool Contains(int value) const;
    int Draw(Rng& rng) const { return items_[rng.Below(items_.size())]; }
    size_t size() const { return items_.size(); }

   private:
    std::vector<int> items_;
    std::vector<int> position_;  // index into items_ + 1; 0 when absent
  };

  void Reindex(int claim);
  void ReindexGpu(int gpu);
  bool Roomy(const Claim& claim) const;
  bool Touchable(int gpu) const;  // a GPU the events may free or take
  int FreeFor(int device_class) const;
  // Whether taking free GPU `gpu` (allocating or tainting it) leaves every class with room
  // above its reserve.
  bool KeepsReserve(int gpu) const;
  absl::Time Tick();

  Fleet& fleet_;
  Rng rng_;
  int64_t ticks_ = 0;
  std::vector<bool> protected_;  // the longest-pending claims, never allocated
  Pool pools_[7];                // claims eligible per kind (taint uses nodes_)
  Pool free_[kProductCount];     // free, available GPUs per product
  std::vector<int> taint_nodes_;
  int reserve_[kClassCount] = {};
};

}  // namespace dralens::bench::scale
