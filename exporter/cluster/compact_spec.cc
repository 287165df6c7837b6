#include "exporter/cluster/compact_spec.h"

#include <utility>

#include "absl/strings/match.h"

namespace dralens::exporter::cluster {

uint32_t NamePool::Index(absl::string_view name) {
  if (auto it = index_.find(name); it != index_.end()) {
    return it->second;
  }
  names_.push_back(std::make_unique<const std::string>(name));
  const auto index = static_cast<uint32_t>(names_.size() - 1);
  index_.emplace(*names_.back(), index);
  return index;
}

std::optional<uint32_t> NamePool::Find(absl::string_view name) const {
  if (auto it = index_.find(name); it != index_.end()) {
    return it->second;
  }
  return std::nullopt;
}

namespace {

// The encoding, every integer a base-128 varint:
//   attributes:  count, then per attribute in name order: name index, tag, value, where the
//                value of kInt is zigzag-coded, of kBool one byte, of kString and kVersion its
//                length and bytes;
//   capacities:  count, then per capacity without a request policy, in name order: name index,
//                the length and bytes of the quantity's canonical string.
enum Tag : uint8_t { kInt = 0, kBool = 1, kString = 2, kVersion = 3 };

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void PutBytes(std::string& out, absl::string_view bytes) {
  PutVarint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      const auto byte = static_cast<uint8_t>(in_[pos_++]);
      v |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) {
        return v;
      }
    }
  }
  uint8_t Byte() { return static_cast<uint8_t>(in_[pos_++]); }
  absl::string_view Bytes() {
    const size_t n = Varint();
    absl::string_view out = in_.substr(pos_, n);
    pos_ += n;
    return out;
  }

 private:
  absl::string_view in_;
  size_t pos_ = 0;
};

// The name index of `name`: interned in `names` when `intern`, else nullopt when `names` lacks
// it (a spec that holds a name not interned cannot exist).
std::optional<uint32_t> IndexOf(NamePool& names, const std::string& name, bool intern) {
  return intern ? std::optional<uint32_t>(names.Index(name)) : names.Find(name);
}

// Encodes the attributes and plain capacities of `device` into `out`, and its capacities with a
// request policy into `with_policy`. False when !intern and a name is not in `names`.
bool Encode(const model::SliceDevice& device, NamePool& names, bool intern, std::string& out,
            std::vector<std::pair<uint32_t, model::DeviceCapacity>>& with_policy) {
  PutVarint(out, device.attributes.size());
  for (const auto& [name, attribute] : device.attributes) {
    const std::optional<uint32_t> index = IndexOf(names, name, intern);
    if (!index.has_value()) {
      return false;
    }
    PutVarint(out, *index);
    if (const int64_t* i = attribute.AsInt()) {
      out.push_back(static_cast<char>(kInt));
      PutVarint(out, (static_cast<uint64_t>(*i) << 1) ^ static_cast<uint64_t>(*i >> 63));
    } else if (const bool* b = attribute.AsBool()) {
      out.push_back(static_cast<char>(kBool));
      out.push_back(*b ? 1 : 0);
    } else if (const std::string* s = attribute.AsString()) {
      out.push_back(static_cast<char>(kString));
      PutBytes(out, *s);
    } else {
      out.push_back(static_cast<char>(kVersion));
      PutBytes(out, *attribute.AsVersion());
    }
  }
  size_t plain = 0;
  for (const auto& [name, capacity] : device.capacity) {
    plain += capacity.request_policy.has_value() ? 0 : 1;
  }
  PutVarint(out, plain);
  for (const auto& [name, capacity] : device.capacity) {
    const std::optional<uint32_t> index = IndexOf(names, name, intern);
    if (!index.has_value()) {
      return false;
    }
    if (capacity.request_policy.has_value()) {
      with_policy.emplace_back(*index, capacity);
      continue;
    }
    PutVarint(out, *index);
    PutBytes(out, capacity.value.String());
  }
  return true;
}

model::DeviceAttribute ReadAttribute(Reader& r) {
  switch (r.Byte()) {
    case kInt: {
      const uint64_t z = r.Varint();
      return model::DeviceAttribute::Int(static_cast<int64_t>((z >> 1) ^ (~(z & 1) + 1)));
    }
    case kBool:
      return model::DeviceAttribute::Bool(r.Byte() != 0);
    case kString:
      return model::DeviceAttribute::String(std::string(r.Bytes()));
    default:
      return model::DeviceAttribute::SemVer(std::string(r.Bytes()));
  }
}

// Skips an attribute's tag and value.
void SkipAttribute(Reader& r) {
  switch (r.Byte()) {
    case kInt:
      r.Varint();
      break;
    case kBool:
      r.Byte();
      break;
    default:
      r.Bytes();
  }
}

// `key` is `name` bare or in a domain ("example.com/name").
bool NameMatches(absl::string_view key, absl::string_view name) {
  return key == name || (absl::EndsWith(key, name) && key.size() > name.size() &&
                         key[key.size() - name.size() - 1] == '/');
}

}  // namespace

CompactSpec CompactSpec::Of(const model::SliceDevice& device, NamePool& names) {
  CompactSpec spec;
  spec.names_ = &names;
  Encode(device, names, /*intern=*/true, spec.encoded_, spec.with_policy_);
  spec.encoded_.shrink_to_fit();
  spec.taints = device.taints;
  spec.consumes_counters = device.consumes_counters;
  spec.allow_multiple_allocations = device.allow_multiple_allocations.value_or(false);
  return spec;
}

bool CompactSpec::Same(const model::SliceDevice& device) const {
  return SameSelectorInput(device) && taints == device.taints && SameConsumption(device);
}

bool CompactSpec::SameConsumption(const model::SliceDevice& device) const {
  return consumes_counters == device.consumes_counters &&
         allow_multiple_allocations == device.allow_multiple_allocations.value_or(false);
}

bool CompactSpec::SameSelectorInput(const model::SliceDevice& device) const {
  if (names_ == nullptr) {
    return device.attributes.empty() && device.capacity.empty();
  }
  std::string encoded;
  encoded.reserve(encoded_.size());
  std::vector<std::pair<uint32_t, model::DeviceCapacity>> with_policy;
  return Encode(device, *names_, /*intern=*/false, encoded, with_policy) && encoded == encoded_ &&
         with_policy == with_policy_;
}

std::optional<model::DeviceAttribute> CompactSpec::Attribute(absl::string_view name) const {
  if (encoded_.empty()) {
    return std::nullopt;
  }
  Reader r(encoded_);
  for (uint64_t n = r.Varint(); n > 0; --n) {
    if (NameMatches(names_->Name(static_cast<uint32_t>(r.Varint())), name)) {
      return ReadAttribute(r);
    }
    SkipAttribute(r);
  }
  return std::nullopt;
}

std::string CompactSpec::StringAttribute(absl::string_view name) const {
  std::optional<model::DeviceAttribute> a = Attribute(name);
  if (!a.has_value() || a->AsString() == nullptr) {
    return "";
  }
  return std::move(*std::get_if<std::string>(&a->value));
}

std::map<std::string, model::DeviceAttribute> CompactSpec::Attributes() const {
  std::map<std::string, model::DeviceAttribute> out;
  if (encoded_.empty()) {
    return out;
  }
  Reader r(encoded_);
  for (uint64_t n = r.Varint(); n > 0; --n) {
    const std::string& name = names_->Name(static_cast<uint32_t>(r.Varint()));
    out.emplace_hint(out.end(), name, ReadAttribute(r));
  }
  return out;
}

std::map<std::string, model::DeviceCapacity> CompactSpec::Capacity() const {
  std::map<std::string, model::DeviceCapacity> out;
  if (encoded_.empty()) {
    return out;
  }
  Reader r(encoded_);
  for (uint64_t n = r.Varint(); n > 0; --n) {
    r.Varint();
    SkipAttribute(r);
  }
  for (uint64_t n = r.Varint(); n > 0; --n) {
    const std::string& name = names_->Name(static_cast<uint32_t>(r.Varint()));
    // The canonical string of a quantity parses back to the same value.
    absl::StatusOr<common::Quantity> q = common::Quantity::Parse(r.Bytes());
    out[name].value = q.ok() ? *q : common::Quantity();
  }
  for (const auto& [index, capacity] : with_policy_) {
    out[names_->Name(index)] = capacity;
  }
  return out;
}

SelectorMaps SelectorMaps::Of(const CompactSpec& spec) {
  return SelectorMaps{spec.Attributes(), spec.Capacity()};
}

}  // namespace dralens::exporter::cluster
