// What the cluster analyzer keeps of a published device: the fields it reads, compactly.
//
// A model::SliceDevice holds its attributes and capacities in std::maps: a tree node per entry
// and, for the many names longer than the short-string buffer ("resource.kubernetes.io/
// pciBusID"), a heap string per name. At 100k devices of a dozen attributes and half a dozen
// capacities each that was the largest part of the analyzer's memory. CompactSpec keeps the
// same entries in name order in vectors, with the names shared through a NamePool (a fleet
// publishes few distinct names), and the taints, counter consumption and sharing flag.
//
// Selectors read maps (cel::DeviceView); SelectorMaps rebuilds them for a device whose verdict
// for a selector is not cached yet, which after the device's first classification happens only
// for a selector the analyzer has not seen before.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/node_hash_set.h"
#include "absl/strings/string_view.h"
#include "src/model/resource.h"

namespace dralens::exporter::cluster {

// Interned attribute and capacity names. Never shrinks: the names are a fleet's vocabulary.
class NamePool {
 public:
  const std::string* Intern(absl::string_view name);
  size_t size() const { return names_.size(); }

 private:
  absl::node_hash_set<std::string> names_;  // node set: the strings stay where they are
};

struct CompactSpec {
  std::vector<std::pair<const std::string*, model::DeviceAttribute>> attributes;  // name order
  std::vector<std::pair<const std::string*, model::DeviceCapacity>> capacity;     // name order
  std::vector<model::DeviceTaint> taints;
  std::vector<model::DeviceCounterConsumption> consumes_counters;
  bool allow_multiple_allocations = false;

  static CompactSpec Of(const model::SliceDevice& device, NamePool& names);
  // `device` publishes the same values of every field kept here (the fields not kept are not
  // read by the analysis).
  bool Same(const model::SliceDevice& device) const;
  // `device` has the same attributes and capacity: a selector's verdict on it stands.
  bool SameSelectorInput(const model::SliceDevice& device) const;
  // An attribute by its unqualified name, published either bare or in any domain.
  const model::DeviceAttribute* Attribute(absl::string_view name) const;
  std::string StringAttribute(absl::string_view name) const;
};

// The maps a selector reads of a device.
struct SelectorMaps {
  std::map<std::string, model::DeviceAttribute> attributes;
  std::map<std::string, model::DeviceCapacity> capacity;

  static SelectorMaps Of(const CompactSpec& spec);
};

}  // namespace dralens::exporter::cluster
