#include "driver/prepare/claim_plan.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "driver/prepare/failure_reason.h"
#include "driver/slices/slice_builder.h"
#include "src/common/status.h"

namespace dralens::driver::prepare {
namespace {

// The published memory capacity (slices::Bytes uses binary SI as well); nullopt when unknown.
std::optional<common::Quantity> MemoryOf(uint64_t bytes) {
  if (bytes == 0) {
    return std::nullopt;
  }
  return common::Quantity::FromInt64(static_cast<int64_t>(bytes),
                                     common::Quantity::Format::kBinarySI);
}

}  // namespace

std::map<std::string, OwnedDevice> IndexDevices(const model::Inventory& inventory,
                                                bool dynamic_mig) {
  std::map<std::string, OwnedDevice> out;
  if (dynamic_mig) {
    for (const model::GpuInfo& gpu : inventory.gpus()) {
      if (!slices::OffersDynamicMig(gpu)) {
        continue;  // not published: an allocation naming it is refused as a foreign device
      }
      for (const model::MigProfile& profile : gpu.mig_profiles) {
        for (const model::MigPlacement& placement : profile.placements) {
          OwnedDevice d{.name = slices::DynamicMigDeviceName(gpu, profile, placement.start),
                        .type = model::DeviceType::kMig,
                        .uuid = "",
                        .mig_profile = profile.name,
                        .gpu_minor = gpu.minor,
                        .mig = std::nullopt,
                        .dynamic = OwnedDevice::DynamicMig{.parent_uuid = gpu.uuid,
                                                           .profile = profile.name,
                                                           .placement_start = placement.start},
                        .memory = MemoryOf(profile.memory_bytes())};
          out.emplace(d.name, d);
        }
      }
    }
  }
  for (const model::GpuInfo& gpu : inventory.gpus()) {
    OwnedDevice d{.name = slices::GpuDeviceName(gpu),
                  .type = model::DeviceType::kGpu,
                  .uuid = gpu.uuid,
                  .mig_profile = "",
                  .gpu_minor = gpu.minor,
                  .mig = std::nullopt,
                  .dynamic = std::nullopt,
                  .memory = MemoryOf(gpu.memory_bytes),
                  .host_index = static_cast<int>(gpu.index)};
    out.emplace(d.name, d);
  }
  for (const model::MigDevice& mig : inventory.mig_devices()) {
    OwnedDevice d{.name = slices::MigDeviceName(mig),
                  .type = model::DeviceType::kMig,
                  .uuid = mig.uuid,
                  .mig_profile = mig.ProfileName(),
                  .gpu_minor = mig.parent_minor,
                  .mig = CdiDeviceInput::Mig{.gi_id = mig.gi_id, .ci_id = mig.ci_id},
                  .dynamic = std::nullopt,
                  .memory = MemoryOf(mig.profile.memory_bytes())};
    out.emplace(d.name, d);
  }
  return out;
}

std::string StripSubRequest(absl::string_view request) {
  size_t slash = request.find('/');
  return std::string(slash == absl::string_view::npos ? request : request.substr(0, slash));
}

std::string RequestClass(const model::ResourceClaim& claim, absl::string_view request) {
  const size_t slash = request.find('/');
  const absl::string_view name = request.substr(0, slash);
  for (const model::DeviceRequest& r : claim.spec.devices.requests) {
    if (r.name != name) {
      continue;
    }
    if (slash == absl::string_view::npos) {
      return r.exactly.has_value() ? r.exactly->device_class_name : "";
    }
    for (const model::DeviceSubRequest& sub : r.first_available) {
      if (sub.name == request.substr(slash + 1)) {
        return sub.device_class_name;
      }
    }
  }
  return "";
}

absl::StatusOr<ClaimPlan> PlanClaim(const model::ResourceClaim& claim, absl::string_view driver,
                                    absl::string_view pool,
                                    const std::map<std::string, OwnedDevice>& devices,
                                    const CdiHostInfo& host) {
  const std::string key = absl::StrCat(claim.metadata.namespace_name, "/", claim.metadata.name);
  if (!claim.status.allocation.has_value()) {
    return WithReason(
        absl::FailedPreconditionError(absl::StrCat("claim ", key, " is not allocated")),
        FailureReason::kNotAllocated);
  }
  ClaimPlan plan;
  std::vector<CdiDeviceInput> cdi_inputs;
  for (const model::DeviceRequestAllocationResult& r : claim.status.allocation->devices.results) {
    if (r.driver != driver) {
      continue;  // another driver's device: the kubelet sends the claim to that driver too
    }
    if (r.pool != pool) {
      // Our pools are node-local, so our device in another pool is another node's: the claim
      // was not allocated for this node, and preparing the rest of it would be wrong.
      return WithReason(
          absl::FailedPreconditionError(absl::StrCat(
              "claim ", key, ": request \"", r.request, "\" is allocated device \"", r.device,
              "\" in pool \"", r.pool, "\", but this node serves pool \"", pool, "\"")),
          FailureReason::kForeignDevice);
    }
    auto it = devices.find(r.device);
    if (it == devices.end()) {
      return WithReason(
          absl::FailedPreconditionError(
              absl::StrCat("claim ", key, ": request \"", r.request, "\" is allocated device \"",
                           r.device, "\" in pool \"", r.pool, "\", which this node does not have")),
          FailureReason::kForeignDevice);
    }
    const OwnedDevice& owned = it->second;
    RETURN_IF_ERROR(WithReason(ValidateCdiDeviceName(owned.name), FailureReason::kForeignDevice));
    CheckpointDevice d;
    d.request_names = {StripSubRequest(r.request)};
    d.pool = r.pool;
    d.device = r.device;
    d.cdi_device_ids = {CdiDeviceId(claim.metadata.uid, r.device)};
    d.share_id = r.share_id;
    d.type = owned.type;
    d.uuid = owned.uuid;
    d.device_class = RequestClass(claim, r.request);
    if (owned.dynamic.has_value()) {
      d.dynamic_mig =
          CheckpointDevice::DynamicMig{.parent_uuid = owned.dynamic->parent_uuid,
                                       .profile = owned.dynamic->profile,
                                       .placement_start = owned.dynamic->placement_start,
                                       .gi_id = std::nullopt,
                                       .ci_id = std::nullopt};
    }
    plan.devices.push_back(std::move(d));
    plan.requests.push_back(r.request);
    auto consumed = r.consumed_capacity.find("memory");
    plan.consumed_memory.push_back(consumed == r.consumed_capacity.end()
                                       ? std::nullopt
                                       : std::optional<common::Quantity>(consumed->second));
    cdi_inputs.push_back(
        CdiDeviceInput{.device = owned.name, .gpu_minor = owned.gpu_minor, .mig = owned.mig});
  }
  plan.cdi_inputs = cdi_inputs;
  bool dynamic = false;
  for (const CheckpointDevice& d : plan.devices) {
    dynamic = dynamic || d.dynamic_mig.has_value();
  }
  if (!cdi_inputs.empty() && !dynamic) {
    ASSIGN_OR_RETURN(CdiSpec spec, BuildClaimCdiSpec(claim.metadata.uid, cdi_inputs, host));
    plan.cdi_spec = std::move(spec);
  }
  return plan;
}

}  // namespace dralens::driver::prepare
