// Pure planning for one claim: allocated claim + this node's inventory → the devices to answer
// with and the CDI spec to write. No I/O, deterministic; the ClaimPreparer applies the plan.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "driver/prepare/cdi.h"
#include "driver/prepare/checkpoint.h"
#include "src/common/quantity.h"
#include "src/model/device_type.h"
#include "src/model/inventory.h"
#include "src/model/resource.h"

namespace dralens::driver::prepare {

// A device this node owns, as the preparer needs it.
struct OwnedDevice {
  std::string name;
  model::DeviceType type = model::DeviceType::kGpu;
  std::string uuid;
  std::string mig_profile;  // MIG devices: the GPU-instance profile, e.g. "1g.10gb"
  uint32_t gpu_minor = 0;   // own minor, or the parent's for MIG
  std::optional<CdiDeviceInput::Mig> mig;
  // Dynamic MIG: a placement the scheduler may allocate; the instance is created on prepare.
  struct DynamicMig {
    std::string parent_uuid;
    std::string profile;
    uint32_t placement_start = 0;
  };
  std::optional<DynamicMig> dynamic;
  // Memory capacity as published; bounds consumable-capacity allocations.
  std::optional<common::Quantity> memory = std::nullopt;
  // NVML index of a GPU (MPS per-device limits may be keyed by it); -1 for MIG devices.
  int host_index = -1;
};

// Name → device for every GPU and MIG device of an inventory, named exactly as the slice
// builder publishes them (slices::GpuDeviceName / slices::MigDeviceName). GPUs in MIG mode are
// listed too; the slice builder does not publish them, so no allocation names them.
// With `dynamic_mig`, also every profile x placement of the GPUs that slices::OffersDynamicMig,
// named as the slice builder publishes them (slices::DynamicMigDeviceName).
std::map<std::string, OwnedDevice> IndexDevices(const model::Inventory& inventory,
                                                bool dynamic_mig = false);

// "req/sub" → "req"; "req" unchanged.
std::string StripSubRequest(absl::string_view request);

struct ClaimPlan {
  std::vector<CheckpointDevice> devices;  // in allocation-result order
  std::optional<CdiSpec> cdi_spec;        // nullopt when the claim has no device here, or
                                          // when it has dynamic MIG devices (see below)
  // The CDI inputs, parallel to `devices`. A dynamic MIG device's GI and CI are known only
  // once its instance exists, so such claims get their spec built after creation.
  std::vector<CdiDeviceInput> cdi_inputs;
  // Parallel to `devices`: the allocation result's request as written ("req" or "req/sub"),
  // which config entries are matched against, and its consumedCapacity["memory"].
  std::vector<std::string> requests;
  std::vector<std::optional<common::Quantity>> consumed_memory;
};

// The DeviceClass of an allocation result's request ("req" or "req/sub") in the claim's spec;
// "" when the spec does not name it.
std::string RequestClass(const model::ResourceClaim& claim, absl::string_view request);

// Selects the allocation results for `driver` in `pool`, resolves each device against
// `devices` and computes the answer and the CDI spec. Errors (FailedPrecondition) name the
// claim: not allocated, a result for our driver in another pool (our pools are node-local, so
// that device belongs to another node), or one naming a device this node does not have. Each
// carries its FailureReason (not_allocated, foreign_device). Results for other drivers are
// skipped.
absl::StatusOr<ClaimPlan> PlanClaim(const model::ResourceClaim& claim, absl::string_view driver,
                                    absl::string_view pool,
                                    const std::map<std::string, OwnedDevice>& devices,
                                    const CdiHostInfo& host);

}  // namespace dralens::driver::prepare
