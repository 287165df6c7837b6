#include "exporter/cluster/compact_spec.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace dralens::exporter::cluster {

const std::string* NamePool::Intern(absl::string_view name) {
  if (auto it = names_.find(name); it != names_.end()) {
    return &*it;
  }
  return &*names_.emplace(name).first;
}

namespace {

// The entries of `kept` (vector, name order) and `published` (map, name order) are the same.
template <typename V>
bool SameEntries(const std::vector<std::pair<const std::string*, V>>& kept,
                 const std::map<std::string, V>& published) {
  if (kept.size() != published.size()) {
    return false;
  }
  return std::equal(kept.begin(), kept.end(), published.begin(), [](const auto& k, const auto& p) {
    return *k.first == p.first && k.second == p.second;
  });
}

}  // namespace

CompactSpec CompactSpec::Of(const model::SliceDevice& device, NamePool& names) {
  CompactSpec spec;
  spec.attributes.reserve(device.attributes.size());
  for (const auto& [name, value] : device.attributes) {
    spec.attributes.emplace_back(names.Intern(name), value);
  }
  spec.capacity.reserve(device.capacity.size());
  for (const auto& [name, value] : device.capacity) {
    spec.capacity.emplace_back(names.Intern(name), value);
  }
  spec.taints = device.taints;
  spec.consumes_counters = device.consumes_counters;
  spec.allow_multiple_allocations = device.allow_multiple_allocations.value_or(false);
  return spec;
}

bool CompactSpec::Same(const model::SliceDevice& device) const {
  return SameSelectorInput(device) && taints == device.taints &&
         consumes_counters == device.consumes_counters &&
         allow_multiple_allocations == device.allow_multiple_allocations.value_or(false);
}

bool CompactSpec::SameSelectorInput(const model::SliceDevice& device) const {
  return SameEntries(attributes, device.attributes) && SameEntries(capacity, device.capacity);
}

const model::DeviceAttribute* CompactSpec::Attribute(absl::string_view name) const {
  for (const auto& [key, value] : attributes) {
    if (*key == name || (absl::EndsWith(*key, name) && key->size() > name.size() &&
                         (*key)[key->size() - name.size() - 1] == '/')) {
      return &value;
    }
  }
  return nullptr;
}

std::string CompactSpec::StringAttribute(absl::string_view name) const {
  const model::DeviceAttribute* a = Attribute(name);
  return a == nullptr || a->AsString() == nullptr ? "" : *a->AsString();
}

SelectorMaps SelectorMaps::Of(const CompactSpec& spec) {
  SelectorMaps maps;
  for (const auto& [name, value] : spec.attributes) {
    maps.attributes.emplace_hint(maps.attributes.end(), *name, value);
  }
  for (const auto& [name, value] : spec.capacity) {
    maps.capacity.emplace_hint(maps.capacity.end(), *name, value);
  }
  return maps;
}

}  // namespace dralens::exporter::cluster
