#include "driver/discovery/simulated/simulated_device_source.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "driver/discovery/nvlink_domains.h"
#include "driver/discovery/nvml/nvml_status.h"
#include "src/common/status.h"

namespace dralens::driver::discovery {
namespace {

using nvml::NvmlStatus;

constexpr uint32_t kMaxGiId = 14;  // GI IDs 0-14 (reference §1.5)

uint64_t Fnv1a(absl::string_view data, uint64_t basis) {
  uint64_t h = basis;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  // splitmix64 finalizer: spreads the bits so nearby seeds look unrelated.
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

// GI ID by the size classes of published listings (§1.5): id = classBase + start / size.
uint32_t PreferredGiId(uint32_t board_slices, const model::MigPlacement& p) {
  if (p.size >= board_slices) {
    return 0;
  }
  if (p.size * 2 == board_slices) {
    return 1 + p.start / p.size;
  }
  if (p.size * 4 == board_slices) {
    return 3 + p.start / p.size;
  }
  return 7 + p.start;
}

// Bus numbers for the generated PCI addresses.
constexpr std::array<uint32_t, 8> kBuses = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};

}  // namespace

absl::string_view ToString(SimulatedOp op) {
  switch (op) {
    case SimulatedOp::kDiscover:
      return "Discover";
    case SimulatedOp::kCreateMigDevice:
      return "CreateMigDevice";
    case SimulatedOp::kDestroyMigDevice:
      return "DestroyMigDevice";
    case SimulatedOp::kGetMigMode:
      return "GetMigMode";
    case SimulatedOp::kSetMigMode:
      return "SetMigMode";
    case SimulatedOp::kSetTimeSlice:
      return "SetTimeSlice";
    case SimulatedOp::kWaitForEvent:
      return "WaitForEvent";
  }
  return "Unknown";
}

std::string DeterministicUuid(absl::string_view prefix, absl::string_view seed) {
  const uint64_t hi = Fnv1a(seed, 0xcbf29ce484222325ULL);
  const uint64_t lo = Fnv1a(seed, 0x84222325cbf29ce4ULL);
  return absl::StrFormat("%s-%08x-%04x-%04x-%04x-%012x", prefix, hi >> 32, (hi >> 16) & 0xffff,
                         hi & 0xffff, lo >> 48, lo & 0xffffffffffffULL);
}

SimulatedDeviceSource::SimulatedDeviceSource(SimulatedProfile profile, std::string node_name)
    : profile_(std::move(profile)), node_name_(std::move(node_name)) {}

absl::StatusOr<std::unique_ptr<SimulatedDeviceSource>> SimulatedDeviceSource::Create(
    const SimulatedProfile& profile, absl::string_view node_name) {
  RETURN_IF_ERROR(ValidateSimulatedProfile(profile));
  std::unique_ptr<SimulatedDeviceSource> source(
      new SimulatedDeviceSource(profile, std::string(node_name)));
  absl::MutexLock lock(&source->mu_);
  const size_t n = profile.gpus.size();
  for (size_t i = 0; i < n; ++i) {
    const SimulatedGpuSpec& spec = profile.gpus[i];
    const model::MigBoard* board = model::FindMigBoard(spec.board);
    Gpu gpu;
    gpu.board = board;
    model::GpuInfo& info = gpu.info;
    info.minor = static_cast<uint32_t>(i);
    info.index = static_cast<uint32_t>(i);
    info.uuid = DeterministicUuid("GPU", absl::StrCat(profile.name, "/", node_name, "/", i));
    info.product_name = board->product_name;
    info.brand = profile.brand;
    info.architecture = board->architecture;
    info.cuda_compute_major = board->cuda_compute_major;
    info.cuda_compute_minor = board->cuda_compute_minor;
    info.memory_bytes = board->memory_bytes();
    const uint32_t domain = static_cast<uint32_t>(i / kBuses.size());
    const uint32_t bus = kBuses[i % kBuses.size()];
    info.pci_bus_id =
        spec.pci_bus_id.empty() ? absl::StrFormat("%04x:%02x:00.0", domain, bus) : spec.pci_bus_id;
    info.pcie_root = spec.pcie_root.empty() ? absl::StrFormat("pci%04x:%02x", domain, bus & 0xf0)
                                            : spec.pcie_root;
    info.numa_node = spec.numa_node.has_value() ? *spec.numa_node : (n > 1 && i >= n / 2 ? 1 : 0);
    info.driver_version = profile.driver_version;
    info.cuda_driver_version = profile.cuda_driver_version;
    info.mig_capable = true;
    info.memory_slices = board->memory_slices;
    info.mig_profiles = board->profiles;
    gpu.current = gpu.pending =
        spec.mig_enabled ? model::MigMode::kEnabled : model::MigMode::kDisabled;
    source->gpus_.push_back(std::move(gpu));
  }
  source->AssignNvLinkDomains();
  for (size_t i = 0; i < n; ++i) {
    Gpu& gpu = source->gpus_[i];
    for (const SimulatedMigDeviceSpec& mig : profile.gpus[i].mig_devices) {
      ASSIGN_OR_RETURN(model::MigDevice created,
                       source->CreateLocked(gpu, *gpu.board->FindProfile(mig.profile), mig.start));
      (void)created;
    }
  }
  return source;
}

void SimulatedDeviceSource::AssignNvLinkDomains() {
  // The links a real node of this kind reports: on an HGX board 18 per GPU, spread over four
  // NVSwitches; through a bridge 4 per GPU, to its partner.
  std::vector<NvLinkEndpoint> endpoints;
  for (size_t i = 0; i < gpus_.size(); ++i) {
    const model::GpuInfo& info = gpus_[i].info;
    NvLinkEndpoint endpoint{.uuid = info.uuid,
                            .pci_bus_id = info.pci_bus_id,
                            .active_links = 0,
                            .remote_bus_ids = {},
                            .fabric_domain = ""};
    if (profile_.nvlink == SimulatedNvLink::kNvSwitch) {
      for (uint32_t link = 0; link < 18; ++link) {
        endpoint.remote_bus_ids.push_back(absl::StrCat("nvswitch-", link % 4));
      }
    } else if (profile_.nvlink == SimulatedNvLink::kPairs && (i ^ 1) < gpus_.size()) {
      endpoint.remote_bus_ids.assign(4, gpus_[i ^ 1].info.pci_bus_id);
    }
    endpoint.active_links = static_cast<uint32_t>(endpoint.remote_bus_ids.size());
    if (profile_.fabric.has_value()) {
      endpoint.fabric_domain =
          FabricDomain(profile_.fabric->cluster_uuid, profile_.fabric->clique_id);
    }
    endpoints.push_back(std::move(endpoint));
  }
  const std::vector<std::string> domains = NvLinkDomains(endpoints);
  for (size_t i = 0; i < gpus_.size(); ++i) {
    gpus_[i].info.nvlink_domain = domains[i];
  }
}

absl::Status SimulatedDeviceSource::Enter(SimulatedOp op) {
  ++calls_[op];
  auto it = faults_.find(op);
  if (it == faults_.end() || it->second.remaining <= 0) {
    return absl::OkStatus();
  }
  --it->second.remaining;
  return it->second.error;
}

absl::StatusOr<SimulatedDeviceSource::Gpu*> SimulatedDeviceSource::FindGpu(absl::string_view uuid) {
  for (Gpu& gpu : gpus_) {
    if (gpu.info.uuid == uuid) {
      if (gpu.lost) {
        return NvmlStatus(nvml::NVML_ERROR_GPU_IS_LOST, absl::StrCat("GPU ", uuid));
      }
      return &gpu;
    }
  }
  return NvmlStatus(nvml::NVML_ERROR_NOT_FOUND, absl::StrCat("get handle of GPU ", uuid));
}

model::MigDevice SimulatedDeviceSource::ToMigDevice(const Gpu& gpu, const GpuInstance& gi,
                                                    const ComputeInstance& ci) const {
  model::MigDevice mig;
  mig.uuid = ci.uuid;
  mig.parent_uuid = gpu.info.uuid;
  mig.parent_minor = gpu.info.minor;
  mig.parent_index = gpu.info.index;
  mig.profile = gi.profile;
  mig.gi_id = gi.id;
  mig.ci_id = ci.id;
  mig.ci_profile_id = ci.profile_id;
  mig.ci_slices = ci.slices;
  mig.placement = gi.placement;
  return mig;
}

absl::StatusOr<model::MigDevice> SimulatedDeviceSource::CreateLocked(
    Gpu& gpu, const model::MigProfile& profile, uint32_t start) {
  const model::MigPlacement wanted{start, profile.memory_slices};
  const std::string what = absl::StrCat("create GPU instance ", profile.name, " at ",
                                        model::ToString(wanted), " on ", gpu.info.uuid);
  if (gpu.current != model::MigMode::kEnabled) {
    return NvmlStatus(nvml::NVML_ERROR_NOT_SUPPORTED, absl::StrCat(what, ": MIG mode disabled"));
  }
  std::vector<model::MigInstancePlacement> existing;
  std::vector<bool> gi_used(kMaxGiId + 1, false);
  for (const GpuInstance& gi : gpu.gis) {
    existing.push_back({gi.profile.gi_profile_id, gi.placement});
    gi_used[gi.id] = true;
  }
  const absl::Status fit = model::CheckMigPlacement(profile, start, existing);
  if (!fit.ok()) {
    const nvml::nvmlReturn_t code = fit.code() == absl::StatusCode::kInvalidArgument
                                        ? nvml::NVML_ERROR_INVALID_ARGUMENT
                                        : nvml::NVML_ERROR_INSUFFICIENT_RESOURCES;
    const absl::Status status = NvmlStatus(code, what);
    return absl::Status(status.code(), absl::StrCat(status.message(), ": ", fit.message()));
  }
  uint32_t gi_id = PreferredGiId(gpu.board->memory_slices, wanted);
  if (gi_id > kMaxGiId || gi_used[gi_id]) {
    gi_id =
        static_cast<uint32_t>(std::find(gi_used.begin(), gi_used.end(), false) - gi_used.begin());
    if (gi_id > kMaxGiId) {
      return NvmlStatus(nvml::NVML_ERROR_INSUFFICIENT_RESOURCES,
                        absl::StrCat(what, ": no free GPU instance ID"));
    }
  }
  GpuInstance gi;
  gi.id = gi_id;
  gi.profile = profile;
  gi.placement = wanted;
  ComputeInstance ci;
  ci.id = 0;  // the only CI in a fresh GI; IDs count from 0 (§1.5)
  ci.profile_id = profile.ci_profile_id;
  ci.slices = profile.gpu_slices;
  ci.uuid =
      DeterministicUuid("MIG", absl::StrCat(profile_.name, "/", node_name_, "/", gpu.info.index,
                                            "/", gi.id, "/", ci.id, "/", gpu.creations++));
  gi.cis.push_back(ci);
  gpu.gis.push_back(std::move(gi));
  return ToMigDevice(gpu, gpu.gis.back(), gpu.gis.back().cis.back());
}

absl::Status SimulatedDeviceSource::DestroyLocked(Gpu& gpu, uint32_t gi_id, uint32_t ci_id) {
  const std::string what =
      absl::StrCat("destroy MIG instance gi ", gi_id, " ci ", ci_id, " on ", gpu.info.uuid);
  if (gpu.current != model::MigMode::kEnabled) {
    return NvmlStatus(nvml::NVML_ERROR_NOT_SUPPORTED, absl::StrCat(what, ": MIG mode disabled"));
  }
  auto gi = std::find_if(gpu.gis.begin(), gpu.gis.end(),
                         [gi_id](const GpuInstance& g) { return g.id == gi_id; });
  if (gi == gpu.gis.end()) {
    return NvmlStatus(nvml::NVML_ERROR_NOT_FOUND, absl::StrCat(what, ": no such GPU instance"));
  }
  auto ci = std::find_if(gi->cis.begin(), gi->cis.end(),
                         [ci_id](const ComputeInstance& c) { return c.id == ci_id; });
  if (ci == gi->cis.end()) {
    return NvmlStatus(nvml::NVML_ERROR_NOT_FOUND, absl::StrCat(what, ": no such compute instance"));
  }
  // CI before GI (§0.5); the GI goes once it holds no CI.
  gi->cis.erase(ci);
  if (gi->cis.empty()) {
    gpu.gis.erase(gi);
  }
  return absl::OkStatus();
}

absl::StatusOr<model::Inventory> SimulatedDeviceSource::Discover() {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Enter(SimulatedOp::kDiscover));
  std::vector<model::GpuInfo> gpus;
  std::vector<model::MigDevice> migs;
  for (const Gpu& gpu : gpus_) {
    if (gpu.lost) {
      continue;
    }
    model::GpuInfo info = gpu.info;
    info.mig_mode_current = gpu.current;
    info.mig_mode_pending = gpu.pending;
    gpus.push_back(std::move(info));
    for (const GpuInstance& gi : gpu.gis) {
      for (const ComputeInstance& ci : gi.cis) {
        migs.push_back(ToMigDevice(gpu, gi, ci));
      }
    }
  }
  return common::Annotate(
      model::Inventory::Create(profile_.driver_version, profile_.cuda_driver_version,
                               std::move(gpus), std::move(migs)),
      "simulated discovery");
}

absl::StatusOr<model::MigDevice> SimulatedDeviceSource::CreateMigDevice(absl::string_view gpu_uuid,
                                                                        absl::string_view profile,
                                                                        uint32_t placement_start) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Enter(SimulatedOp::kCreateMigDevice));
  ASSIGN_OR_RETURN(Gpu * gpu, FindGpu(gpu_uuid));
  const model::MigProfile* p = gpu->board->FindProfile(profile);
  if (p == nullptr) {
    return absl::NotFoundError(absl::StrCat("MIG profile ", profile, " is not offered by ",
                                            gpu->info.product_name, " ", gpu_uuid));
  }
  return CreateLocked(*gpu, *p, placement_start);
}

absl::Status SimulatedDeviceSource::DestroyMigDevice(absl::string_view mig_uuid) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Enter(SimulatedOp::kDestroyMigDevice));
  for (Gpu& gpu : gpus_) {
    for (const GpuInstance& gi : gpu.gis) {
      for (const ComputeInstance& ci : gi.cis) {
        if (ci.uuid == mig_uuid) {
          if (gpu.lost) {
            return NvmlStatus(nvml::NVML_ERROR_GPU_IS_LOST, absl::StrCat("GPU ", gpu.info.uuid));
          }
          return DestroyLocked(gpu, gi.id, ci.id);
        }
      }
    }
  }
  return NvmlStatus(nvml::NVML_ERROR_NOT_FOUND,
                    absl::StrCat("get handle of MIG device ", mig_uuid));
}

absl::Status SimulatedDeviceSource::DestroyMigInstance(absl::string_view gpu_uuid, uint32_t gi_id,
                                                       uint32_t ci_id) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Enter(SimulatedOp::kDestroyMigDevice));
  ASSIGN_OR_RETURN(Gpu * gpu, FindGpu(gpu_uuid));
  return DestroyLocked(*gpu, gi_id, ci_id);
}

absl::StatusOr<MigModeState> SimulatedDeviceSource::GetMigMode(absl::string_view gpu_uuid) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Enter(SimulatedOp::kGetMigMode));
  ASSIGN_OR_RETURN(Gpu * gpu, FindGpu(gpu_uuid));
  return MigModeState{gpu->current, gpu->pending};
}

absl::Status SimulatedDeviceSource::SetMigMode(absl::string_view gpu_uuid, bool enabled) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Enter(SimulatedOp::kSetMigMode));
  ASSIGN_OR_RETURN(Gpu * gpu, FindGpu(gpu_uuid));
  if (!enabled && !gpu->gis.empty()) {
    return NvmlStatus(nvml::NVML_ERROR_IN_USE,
                      absl::StrCat("disable MIG mode on ", gpu_uuid, ": ", gpu->gis.size(),
                                   " GPU instances exist"));
  }
  const model::MigMode mode = enabled ? model::MigMode::kEnabled : model::MigMode::kDisabled;
  gpu->pending = mode;
  // Hopper and later switch without a reset; Ampere keeps the change pending (§1.6).
  if (gpu->board->architecture_enum >= 9) {
    gpu->current = mode;
  }
  return absl::OkStatus();
}

absl::Status SimulatedDeviceSource::SetTimeSlice(absl::string_view gpu_uuid, TimeSlice interval) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Enter(SimulatedOp::kSetTimeSlice));
  const int value = static_cast<int>(interval);
  if (value < 0 || value > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("time-slice interval ", value, " is out of range 0..3"));
  }
  ASSIGN_OR_RETURN(Gpu * gpu, FindGpu(gpu_uuid));
  if (gpu->current == model::MigMode::kEnabled) {
    // The compute mode of a GPU in MIG mode is set per MIG device handle, not on the parent.
    return NvmlStatus(nvml::NVML_ERROR_NOT_SUPPORTED,
                      absl::StrCat("set time slice on ", gpu_uuid, ": the GPU is in MIG mode"));
  }
  gpu->time_slice = interval;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<HealthEvent>> SimulatedDeviceSource::WaitForEvent(
    absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Enter(SimulatedOp::kWaitForEvent));
  auto has_event = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !events_.empty(); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&has_event), timeout)) {
    return std::optional<HealthEvent>();
  }
  HealthEvent event = std::move(events_.front());
  events_.pop_front();
  return std::optional<HealthEvent>(std::move(event));
}

void SimulatedDeviceSource::FailNextCalls(SimulatedOp op, int count, absl::Status error) {
  absl::MutexLock lock(&mu_);
  if (error.ok()) {
    error = absl::UnknownError(absl::StrCat("injected failure of ", ToString(op)));
  }
  faults_[op] = Fault{count, std::move(error)};
}

absl::Status SimulatedDeviceSource::InjectXid(absl::string_view gpu_uuid, uint64_t xid,
                                              uint32_t gi_id, uint32_t ci_id) {
  absl::MutexLock lock(&mu_);
  for (const Gpu& gpu : gpus_) {
    if (gpu.info.uuid == gpu_uuid) {
      events_.push_back(
          HealthEvent{std::string(gpu_uuid), HealthEventKind::kXid, xid, gi_id, ci_id});
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(absl::StrCat("inject Xid: unknown GPU ", gpu_uuid));
}

absl::Status SimulatedDeviceSource::InjectGpuLost(absl::string_view gpu_uuid) {
  absl::MutexLock lock(&mu_);
  for (Gpu& gpu : gpus_) {
    if (gpu.info.uuid == gpu_uuid) {
      gpu.lost = true;
      events_.push_back(HealthEvent{std::string(gpu_uuid), HealthEventKind::kGpuLost, 79,
                                    kNoMigInstance, kNoMigInstance});
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(absl::StrCat("inject GPU lost: unknown GPU ", gpu_uuid));
}

absl::Status SimulatedDeviceSource::InjectGpuReset(absl::string_view gpu_uuid) {
  absl::MutexLock lock(&mu_);
  for (Gpu& gpu : gpus_) {
    if (gpu.info.uuid == gpu_uuid) {
      gpu.gis.clear();
      gpu.current = gpu.pending;
      gpu.time_slice = TimeSlice::kDefault;
      gpu.lost = false;
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(absl::StrCat("inject GPU reset: unknown GPU ", gpu_uuid));
}

std::optional<TimeSlice> SimulatedDeviceSource::TimeSliceForTest(absl::string_view gpu_uuid) {
  absl::MutexLock lock(&mu_);
  for (const Gpu& gpu : gpus_) {
    if (gpu.info.uuid == gpu_uuid) {
      return gpu.time_slice;
    }
  }
  return std::nullopt;
}

int SimulatedDeviceSource::CallCountForTest(SimulatedOp op) {
  absl::MutexLock lock(&mu_);
  return calls_[op];
}

}  // namespace dralens::driver::discovery
