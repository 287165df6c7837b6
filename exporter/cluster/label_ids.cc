#include "exporter/cluster/label_ids.h"

namespace dralens::exporter::cluster {

uint32_t LabelIds::Id(absl::string_view value) {
  if (auto it = ids_.find(value); it != ids_.end()) {  // no string built on a hit
    return it->second;
  }
  const uint32_t id = static_cast<uint32_t>(values_.size());
  auto it = ids_.emplace(std::string(value), id).first;
  values_.push_back(&it->first);
  return id;
}

}  // namespace dralens::exporter::cluster
