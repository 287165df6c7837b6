#include "src/model/inventory.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dralens::model {

absl::string_view ToString(MigMode mode) {
  return mode == MigMode::kEnabled ? "enabled" : "disabled";
}

std::string GpuInfo::CudaComputeCapability() const {
  return absl::StrCat(cuda_compute_major, ".", cuda_compute_minor);
}

const MigProfile* GpuInfo::FindMigProfile(absl::string_view name) const {
  for (const MigProfile& p : mig_profiles) {
    if (p.name == name) {
      return &p;
    }
  }
  return nullptr;
}

const MigProfile* GpuInfo::FindMigProfileById(uint32_t gi_profile_id) const {
  for (const MigProfile& p : mig_profiles) {
    if (p.gi_profile_id == gi_profile_id) {
      return &p;
    }
  }
  return nullptr;
}

std::string MigDevice::ProfileName() const {
  if (ci_slices == 0 || ci_slices == profile.gpu_slices) {
    return profile.name;
  }
  return absl::StrCat(ci_slices, "c.", profile.name);
}

bool InventoryDiff::empty() const {
  return !driver_changed && added_gpus.empty() && removed_gpus.empty() && changed_gpus.empty() &&
         added_mig_devices.empty() && removed_mig_devices.empty() && changed_mig_devices.empty();
}

std::string InventoryDiff::Summary() const {
  return absl::StrCat("gpus +", added_gpus.size(), " -", removed_gpus.size(), " ~",
                      changed_gpus.size(), ", mig +", added_mig_devices.size(), " -",
                      removed_mig_devices.size(), " ~", changed_mig_devices.size(), ", driver ",
                      driver_changed ? "changed" : "unchanged");
}

struct Inventory::Body {
  std::string driver_version;
  std::string cuda_driver_version;
  std::vector<GpuInfo> gpus;
  std::vector<MigDevice> mig_devices;
};

Inventory::Inventory() : body_(std::make_shared<const Body>()) {}

Inventory::Inventory(std::shared_ptr<const Body> body) : body_(std::move(body)) {}

absl::StatusOr<Inventory> Inventory::Create(std::string driver_version,
                                            std::string cuda_driver_version,
                                            std::vector<GpuInfo> gpus,
                                            std::vector<MigDevice> mig_devices) {
  std::sort(gpus.begin(), gpus.end(),
            [](const GpuInfo& a, const GpuInfo& b) { return a.minor < b.minor; });
  std::set<std::string> uuids;
  std::map<std::string, const GpuInfo*> by_uuid;
  for (size_t i = 0; i < gpus.size(); ++i) {
    const GpuInfo& gpu = gpus[i];
    if (gpu.uuid.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("GPU with minor ", gpu.minor, " has no UUID"));
    }
    if (!uuids.insert(gpu.uuid).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate GPU UUID ", gpu.uuid));
    }
    if (i > 0 && gpus[i - 1].minor == gpu.minor) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate GPU minor ", gpu.minor, " (",
                                                     gpus[i - 1].uuid, ", ", gpu.uuid, ")"));
    }
    by_uuid[gpu.uuid] = &gpu;
  }

  std::map<std::string, std::vector<MigPlacement>> gi_placements;  // per parent, one per GI
  std::set<std::tuple<std::string, uint32_t, uint32_t>> instance_ids;
  for (MigDevice& mig : mig_devices) {
    if (mig.uuid.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("MIG device gi ", mig.gi_id, " ci ", mig.ci_id,
                                                     " on ", mig.parent_uuid, " has no UUID"));
    }
    if (!uuids.insert(mig.uuid).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate device UUID ", mig.uuid));
    }
    auto parent = by_uuid.find(mig.parent_uuid);
    if (parent == by_uuid.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("MIG device ", mig.uuid, " has unknown parent GPU ", mig.parent_uuid));
    }
    if (!parent->second->mig_enabled()) {
      return absl::InvalidArgumentError(absl::StrCat("MIG device ", mig.uuid, " on GPU ",
                                                     mig.parent_uuid, " which is not in MIG mode"));
    }
    mig.parent_minor = parent->second->minor;
    mig.parent_index = parent->second->index;
    if (!instance_ids.emplace(mig.parent_uuid, mig.gi_id, mig.ci_id).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate MIG instance gi ", mig.gi_id,
                                                     " ci ", mig.ci_id, " on ", mig.parent_uuid));
    }
  }
  // Placements are per GI: several CIs of one GI share it.
  std::set<std::tuple<std::string, uint32_t>> seen_gi;
  for (const MigDevice& mig : mig_devices) {
    if (!seen_gi.emplace(mig.parent_uuid, mig.gi_id).second) {
      continue;
    }
    std::vector<MigPlacement>& placed = gi_placements[mig.parent_uuid];
    for (const MigPlacement& other : placed) {
      if (other.Overlaps(mig.placement)) {
        return absl::InvalidArgumentError(
            absl::StrCat("MIG device ", mig.uuid, " placement ", ToString(mig.placement),
                         " overlaps placement ", ToString(other), " on GPU ", mig.parent_uuid));
      }
    }
    placed.push_back(mig.placement);
  }
  std::sort(mig_devices.begin(), mig_devices.end(), [](const MigDevice& a, const MigDevice& b) {
    return std::tie(a.parent_minor, a.placement.start, a.gi_id, a.ci_id) <
           std::tie(b.parent_minor, b.placement.start, b.gi_id, b.ci_id);
  });

  auto body = std::make_shared<Body>();
  body->driver_version = std::move(driver_version);
  body->cuda_driver_version = std::move(cuda_driver_version);
  body->gpus = std::move(gpus);
  body->mig_devices = std::move(mig_devices);
  return Inventory(std::move(body));
}

const std::string& Inventory::driver_version() const { return body_->driver_version; }
const std::string& Inventory::cuda_driver_version() const { return body_->cuda_driver_version; }
const std::vector<GpuInfo>& Inventory::gpus() const { return body_->gpus; }
const std::vector<MigDevice>& Inventory::mig_devices() const { return body_->mig_devices; }

const GpuInfo* Inventory::FindGpuByUuid(absl::string_view uuid) const {
  for (const GpuInfo& gpu : body_->gpus) {
    if (gpu.uuid == uuid) {
      return &gpu;
    }
  }
  return nullptr;
}

const GpuInfo* Inventory::FindGpuByMinor(uint32_t minor) const {
  for (const GpuInfo& gpu : body_->gpus) {
    if (gpu.minor == minor) {
      return &gpu;
    }
  }
  return nullptr;
}

const MigDevice* Inventory::FindMigDeviceByUuid(absl::string_view uuid) const {
  for (const MigDevice& mig : body_->mig_devices) {
    if (mig.uuid == uuid) {
      return &mig;
    }
  }
  return nullptr;
}

const MigDevice* Inventory::FindMigDevice(absl::string_view parent_uuid, uint32_t gi_id,
                                          uint32_t ci_id) const {
  for (const MigDevice& mig : body_->mig_devices) {
    if (mig.parent_uuid == parent_uuid && mig.gi_id == gi_id && mig.ci_id == ci_id) {
      return &mig;
    }
  }
  return nullptr;
}

std::vector<const MigDevice*> Inventory::MigDevicesOf(absl::string_view parent_uuid) const {
  std::vector<const MigDevice*> out;
  for (const MigDevice& mig : body_->mig_devices) {
    if (mig.parent_uuid == parent_uuid) {
      out.push_back(&mig);
    }
  }
  return out;
}

std::vector<MigInstancePlacement> Inventory::MigPlacementsOf(absl::string_view parent_uuid) const {
  std::vector<MigInstancePlacement> out;
  std::set<uint32_t> seen_gi;
  for (const MigDevice& mig : body_->mig_devices) {
    if (mig.parent_uuid == parent_uuid && seen_gi.insert(mig.gi_id).second) {
      out.push_back(MigInstancePlacement{mig.profile.gi_profile_id, mig.placement});
    }
  }
  return out;
}

std::vector<MigPlaceable> Inventory::PlaceableCountsOf(absl::string_view parent_uuid) const {
  const GpuInfo* gpu = FindGpuByUuid(parent_uuid);
  if (gpu == nullptr || !gpu->mig_capable) {
    return {};
  }
  return PlaceableCounts(gpu->mig_profiles, MigPlacementsOf(parent_uuid));
}

bool Inventory::operator==(const Inventory& other) const {
  if (body_ == other.body_) {
    return true;
  }
  return body_->driver_version == other.body_->driver_version &&
         body_->cuda_driver_version == other.body_->cuda_driver_version &&
         body_->gpus == other.body_->gpus && body_->mig_devices == other.body_->mig_devices;
}

namespace {

template <typename T>
void DiffByUuid(const std::vector<T>& before, const std::vector<T>& after,
                std::vector<std::string>* added, std::vector<std::string>* removed,
                std::vector<std::string>* changed) {
  std::map<std::string, const T*> old_items;
  for (const T& item : before) {
    old_items[item.uuid] = &item;
  }
  std::set<std::string> seen;
  for (const T& item : after) {
    seen.insert(item.uuid);
    auto it = old_items.find(item.uuid);
    if (it == old_items.end()) {
      added->push_back(item.uuid);
    } else if (!(*it->second == item)) {
      changed->push_back(item.uuid);
    }
  }
  for (const auto& [uuid, item] : old_items) {
    if (seen.count(uuid) == 0) {
      removed->push_back(uuid);
    }
  }
  std::sort(added->begin(), added->end());
  std::sort(changed->begin(), changed->end());
  std::sort(removed->begin(), removed->end());
}

}  // namespace

InventoryDiff Diff(const Inventory& before, const Inventory& after) {
  InventoryDiff diff;
  diff.driver_changed = before.driver_version() != after.driver_version() ||
                        before.cuda_driver_version() != after.cuda_driver_version();
  DiffByUuid(before.gpus(), after.gpus(), &diff.added_gpus, &diff.removed_gpus, &diff.changed_gpus);
  DiffByUuid(before.mig_devices(), after.mig_devices(), &diff.added_mig_devices,
             &diff.removed_mig_devices, &diff.changed_mig_devices);
  return diff;
}

}  // namespace dralens::model
