// What the cluster analyzer keeps of a published device: the fields it reads, compactly.
//
// A model::SliceDevice holds its attributes and capacities in std::maps: a tree node per entry,
// a 40-byte variant per value and, for the many names and values longer than the short-string
// buffer ("resource.kubernetes.io/pciBusID", a GPU's UUID), a heap string each. At 100k devices
// of a dozen attributes each that was the largest part of the analyzer's memory. CompactSpec
// encodes the attributes and plain capacities, in name order, into one byte string (names as
// indexes into a NamePool: a fleet publishes few distinct names), about 200 bytes for a GPU
// that the maps held in 800, and keeps the taints, counter consumption and sharing flag as
// they are.
//
// Selectors read maps (cel::DeviceView); SelectorMaps decodes them for a device whose verdict
// for a selector is not cached yet, which after the device's first classification happens only
// for a selector the analyzer has not seen before.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "src/model/resource.h"

namespace dralens::exporter::cluster {

// Interned attribute and capacity names, by index. Never shrinks: the names are a fleet's
// vocabulary. Not thread-safe (the analyzer's mutex guards it).
class NamePool {
 public:
  uint32_t Index(absl::string_view name);
  // The index of a name already interned, else nullopt.
  std::optional<uint32_t> Find(absl::string_view name) const;
  const std::string& Name(uint32_t index) const { return *names_[index]; }
  size_t size() const { return names_.size(); }

 private:
  std::vector<std::unique_ptr<const std::string>> names_;  // stable addresses for the keys
  absl::flat_hash_map<absl::string_view, uint32_t> index_;
};

class CompactSpec {
 public:
  CompactSpec() = default;
  // `names` must outlive the spec; it is not copied.
  static CompactSpec Of(const model::SliceDevice& device, NamePool& names);

  std::vector<model::DeviceTaint> taints;
  std::vector<model::DeviceCounterConsumption> consumes_counters;
  bool allow_multiple_allocations = false;

  // `device` publishes the same values of every field kept here (the fields not kept are not
  // read by the analysis).
  bool Same(const model::SliceDevice& device) const;
  // `device` has the same attributes and capacity: a selector's verdict on it stands.
  bool SameSelectorInput(const model::SliceDevice& device) const;
  // `device` consumes the same shared counters and has the same sharing flag: with the same
  // selector input, it differs at most in its taints.
  bool SameConsumption(const model::SliceDevice& device) const;
  // An attribute by its unqualified name, published either bare or in any domain.
  std::optional<model::DeviceAttribute> Attribute(absl::string_view name) const;
  std::string StringAttribute(absl::string_view name) const;
  // Every attribute and capacity, as published.
  std::map<std::string, model::DeviceAttribute> Attributes() const;
  std::map<std::string, model::DeviceCapacity> Capacity() const;
  // Bytes the spec's attributes and capacities take beyond the object itself (for tests).
  size_t EncodedSize() const { return encoded_.size(); }

 private:
  NamePool* names_ = nullptr;
  // The attributes, then the capacities without a request policy, in name order (the format
  // is in compact_spec.cc).
  std::string encoded_;
  // Capacities with a request policy (consumable capacity: rare), as published.
  std::vector<std::pair<uint32_t, model::DeviceCapacity>> with_policy_;
};

// The maps a selector reads of a device.
struct SelectorMaps {
  std::map<std::string, model::DeviceAttribute> attributes;
  std::map<std::string, model::DeviceCapacity> capacity;

  static SelectorMaps Of(const CompactSpec& spec);
};

}  // namespace dralens::exporter::cluster
