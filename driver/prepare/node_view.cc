#include "driver/prepare/node_view.h"

#include <algorithm>
#include <map>
#include <utility>

#include "driver/slices/slice_builder.h"

namespace dralens::driver::prepare {

model::NodeLayout LayoutOf(const model::Inventory& inventory) {
  model::NodeLayout layout;
  for (const model::GpuInfo& gpu : inventory.gpus()) {
    layout.devices.push_back(model::NodeDevice{
        .name = slices::GpuDeviceName(gpu),
        .uuid = gpu.uuid,
        .product = gpu.product_name,
        .type = model::DeviceType::kGpu,
        .parent = "",
        .profile = "",
        .numa_node = gpu.numa_node ? std::optional<int>(*gpu.numa_node) : std::nullopt,
        .pci_bus_id = gpu.pci_bus_id,
        .memory_bytes = gpu.memory_bytes});
  }
  for (const model::MigDevice& mig : inventory.mig_devices()) {
    const model::GpuInfo* parent = inventory.FindGpuByUuid(mig.parent_uuid);
    layout.devices.push_back(model::NodeDevice{
        .name = slices::MigDeviceName(mig),
        .uuid = mig.uuid,
        .product = parent != nullptr ? parent->product_name : "",
        .type = model::DeviceType::kMig,
        .parent = parent != nullptr ? slices::GpuDeviceName(*parent) : "",
        .profile = mig.ProfileName(),
        .numa_node = parent != nullptr && parent->numa_node ? std::optional<int>(*parent->numa_node)
                                                            : std::nullopt,
        .pci_bus_id = parent != nullptr ? parent->pci_bus_id : "",
        .memory_bytes = mig.profile.memory_bytes()});
  }
  for (const model::GpuInfo& gpu : inventory.gpus()) {
    if (!gpu.mig_enabled()) {
      continue;
    }
    for (const model::MigPlaceable& p : inventory.PlaceableCountsOf(gpu.uuid)) {
      layout.placeable.push_back(model::MigPlaceableCount{
          .parent = slices::GpuDeviceName(gpu), .profile = p.profile, .count = p.count});
    }
  }
  return layout;
}

double GpuFraction(const CheckpointDevice& d, const model::Inventory& inventory) {
  if (d.type == model::DeviceType::kGpu) {
    const model::GpuInfo* gpu = inventory.FindGpuByUuid(d.uuid);
    if (gpu == nullptr) {
      return 0;  // gone from the inventory (fell off the bus): nothing to price
    }
    if (d.sharing.has_value() && d.sharing->consumed_memory.has_value() && gpu->memory_bytes > 0) {
      const double share = static_cast<double>(d.sharing->consumed_memory->Value()) /
                           static_cast<double>(gpu->memory_bytes);
      return std::clamp(share, 0.0, 1.0);
    }
    return 1;
  }
  if (d.dynamic_mig.has_value()) {
    // A placement of a partitionable GPU: its memory slices over the GPU's.
    const model::GpuInfo* parent = inventory.FindGpuByUuid(d.dynamic_mig->parent_uuid);
    const model::MigProfile* profile =
        parent != nullptr ? parent->FindMigProfile(d.dynamic_mig->profile) : nullptr;
    if (profile == nullptr || parent->memory_slices == 0) {
      return 0;
    }
    return static_cast<double>(profile->memory_slices) / parent->memory_slices;
  }
  // A static MIG device: its memory slices over those of every instance of its parent, as the
  // cluster divides a GPU among the instances published.
  const model::MigDevice* mig = inventory.FindMigDeviceByUuid(d.uuid);
  if (mig == nullptr) {
    return 0;
  }
  uint32_t all = 0;
  for (const model::MigDevice& other : inventory.mig_devices()) {
    if (other.parent_uuid == mig->parent_uuid) {
      all += other.profile.memory_slices;
    }
  }
  return all == 0 ? 0 : static_cast<double>(mig->profile.memory_slices) / all;
}

std::vector<model::PreparedClaim> PreparedClaimsOf(const Checkpoint& checkpoint,
                                                   const model::Inventory& inventory) {
  std::vector<model::PreparedClaim> out;
  for (const auto& [uid, claim] : checkpoint.claims) {
    if (claim.state != ClaimState::kPrepareCompleted) {
      continue;
    }
    model::PreparedClaim prepared{
        .uid = uid, .namespace_name = claim.namespace_name, .name = claim.name, .devices = {}};
    for (const CheckpointDevice& d : claim.devices) {
      model::ClaimDevice device{.device = d.device,
                                .pool = d.pool,
                                .type = d.type,
                                .uuid = d.uuid,
                                .gpu_uuid = d.uuid,
                                .gpu_instance_id = std::nullopt,
                                .device_class = d.device_class,
                                .product = "",
                                .gpus = 0};
      if (d.type == model::DeviceType::kMig) {
        device.gpu_uuid = "";
        if (d.dynamic_mig.has_value()) {
          device.gpu_uuid = d.dynamic_mig->parent_uuid;
          device.gpu_instance_id = d.dynamic_mig->gi_id;
        } else if (const model::MigDevice* mig = inventory.FindMigDeviceByUuid(d.uuid)) {
          device.gpu_uuid = mig->parent_uuid;
          device.gpu_instance_id = mig->gi_id;
        }
      }
      if (const model::GpuInfo* gpu = inventory.FindGpuByUuid(device.gpu_uuid)) {
        device.product = gpu->product_name;
      }
      device.gpus = GpuFraction(d, inventory);
      prepared.devices.push_back(std::move(device));
    }
    out.push_back(std::move(prepared));
  }
  return out;
}

NodeViewPublisher::NodeViewPublisher(std::string driver, std::string pool,
                                     model::NodeViewSink& sink)
    : driver_(std::move(driver)),
      pool_(std::move(pool)),
      sink_(sink),
      layout_(std::make_shared<const model::NodeLayout>()),
      snapshot_{.generation = 0, .checkpoint = std::make_shared<const Checkpoint>()} {}

void NodeViewPublisher::SetInventory(const model::Inventory& inventory) {
  auto layout = std::make_shared<const model::NodeLayout>(LayoutOf(inventory));
  absl::MutexLock lock(&mu_);
  inventory_ = inventory;
  if (*layout != *layout_) {
    layout_ = std::move(layout);
  }
  claims_ = PreparedClaimsOf(*snapshot_.checkpoint, inventory_);
  PublishLocked();
}

void NodeViewPublisher::SetUnhealthy(std::set<std::string> devices) {
  absl::MutexLock lock(&mu_);
  if (devices == unhealthy_) {
    return;
  }
  unhealthy_ = std::move(devices);
  PublishLocked();
}

void NodeViewPublisher::OnLedgerChanged(const CheckpointSnapshot& snapshot) {
  absl::MutexLock lock(&mu_);
  if (snapshot.generation <= snapshot_.generation) {
    return;  // a view at least this new was published already
  }
  snapshot_ = snapshot;
  std::vector<model::PreparedClaim> claims = PreparedClaimsOf(*snapshot.checkpoint, inventory_);
  if (claims == claims_) {
    return;  // a PrepareStarted record, or an amendment: nothing the series show
  }
  claims_ = std::move(claims);
  PublishLocked();
}

void NodeViewPublisher::PublishLocked() {
  sink_.Apply(model::NodeView{.driver = driver_,
                              .pool = pool_,
                              .layout = layout_,
                              .claims = claims_,
                              .unhealthy = unhealthy_});
}

}  // namespace dralens::driver::prepare
