// Label values of the cluster series as small integers.
//
// A node's tally (GPUs by driver, product and state; stranded GPUs by kind, product and class;
// held GPUs by namespace, class, product and usage) is summed on every event that touches the
// node. Keyed by vectors of strings, that meant allocating and comparing strings for every
// device; keyed by LabelKey (up to four integers) it is a few integer compares. Strings are
// looked up once per device and only turned back into text when a series is created.
//
// LabelIds never forgets a value: the values are drivers, products, device classes, namespaces
// and the fixed state and kind names, and the series they label (counters) outlive their
// objects anyway, so the table grows no faster than the series do.
#pragma once

#include <algorithm>
#include <array>
#include <compare>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/string_view.h"

namespace dralens::exporter::cluster {

class LabelIds {
 public:
  // The id of `value`, interning it on first sight. Ids are dense, from 0.
  uint32_t Id(absl::string_view value);
  const std::string& Value(uint32_t id) const { return *values_.at(id); }
  size_t size() const { return values_.size(); }

 private:
  absl::node_hash_map<std::string, uint32_t> ids_;  // node map: the keys stay where they are
  std::vector<const std::string*> values_;          // by id, pointing at the keys of ids_
};

// Up to four label ids; unused positions are 0. Ordered, so that series are created in a
// stable order.
struct LabelKey {
  std::array<uint32_t, 4> ids = {};
  friend bool operator==(const LabelKey&, const LabelKey&) = default;
  friend auto operator<=>(const LabelKey&, const LabelKey&) = default;
  uint32_t operator[](size_t i) const { return ids[i]; }
  template <typename H>
  friend H AbslHashValue(H h, const LabelKey& key) {
    return H::combine(std::move(h), key.ids);
  }
};

// Values summed by LabelKey. A node has a handful of label sets, so this is a vector searched
// linearly: no allocation per entry and no hashing. The first N entries live in the table
// itself: a node's recompute builds several tables per event (its tally, the held deltas, a
// copy of its pool counts), each of which took a heap block, and reads the node's own tables
// through a pointer each.
template <typename V, size_t N = 4>
class LabelTable {
 public:
  V& operator[](const LabelKey& key) {
    for (auto& [k, v] : entries_) {
      if (k == key) {
        return v;
      }
    }
    return entries_.emplace_back(key, V{}).second;
  }
  const V* Find(const LabelKey& key) const {
    for (const auto& [k, v] : entries_) {
      if (k == key) {
        return &v;
      }
    }
    return nullptr;
  }
  bool Contains(const LabelKey& key) const { return Find(key) != nullptr; }
  // Removes the entries for which `drop(key, value)` holds.
  template <typename F>
  void EraseIf(F drop) {
    entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                  [&](auto& e) { return drop(e.first, e.second); }),
                   entries_.end());
  }
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  auto begin() { return entries_.begin(); }
  auto end() { return entries_.end(); }
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }

 private:
  absl::InlinedVector<std::pair<LabelKey, V>, N> entries_;
};

}  // namespace dralens::exporter::cluster
