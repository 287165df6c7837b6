#include "driver/sharing/mps.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "driver/prepare/cdi.h"
#include "src/common/status.h"

namespace dralens::driver::sharing {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Whole MiB, rounded down: the unit MPS limits are given in (`<N>M`). Decoding guarantees >= 1Mi.
int64_t ToMiB(const common::Quantity& q) { return q.Value() / kMiB; }

}  // namespace

absl::StatusOr<MpsPaths> MpsPathsFor(absl::string_view root, absl::string_view claim_uid) {
  if (root.empty() || root.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("MPS root \"", root, "\" must be an absolute path"));
  }
  RETURN_IF_ERROR_CTX(prepare::ValidateClaimUid(claim_uid), "MPS directories");
  while (root.size() > 1 && root.back() == '/') {
    root.remove_suffix(1);
  }
  MpsPaths paths;
  paths.claim_dir = absl::StrCat(root == "/" ? "" : root, "/", claim_uid);
  paths.pipe_dir = absl::StrCat(paths.claim_dir, "/pipe");
  paths.log_dir = absl::StrCat(paths.claim_dir, "/log");
  return paths;
}

std::optional<int64_t> PinnedMemoryLimitMiB(const MpsConfig& mps, const MpsDeviceRef& device) {
  const auto& per_device = mps.default_per_device_pinned_memory_limit;
  if (auto it = per_device.find(device.uuid); !device.uuid.empty() && it != per_device.end()) {
    return ToMiB(it->second);
  }
  if (device.host_index >= 0) {
    if (auto it = per_device.find(absl::StrCat(device.host_index)); it != per_device.end()) {
      return ToMiB(it->second);
    }
  }
  if (mps.default_pinned_device_memory_limit.has_value()) {
    return ToMiB(*mps.default_pinned_device_memory_limit);
  }
  return std::nullopt;
}

SharingContainerEdits MpsContainerEdits(const MpsPaths& paths, const MpsConfig& mps,
                                        const MpsDeviceRef& device) {
  SharingContainerEdits edits;
  edits.env.push_back(absl::StrCat("CUDA_MPS_PIPE_DIRECTORY=", kMpsContainerPipeDir));
  edits.env.push_back(absl::StrCat("CUDA_MPS_LOG_DIRECTORY=", kMpsContainerLogDir));
  if (mps.default_active_thread_percentage.has_value()) {
    edits.env.push_back(
        absl::StrCat("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=", *mps.default_active_thread_percentage));
  }
  if (std::optional<int64_t> mib = PinnedMemoryLimitMiB(mps, device)) {
    edits.env.push_back(
        absl::StrCat("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=", device.cuda_ordinal, "=", *mib, "M"));
  }
  edits.mounts.push_back({paths.pipe_dir, kMpsContainerPipeDir, {"rw", "nosuid", "nodev", "bind"}});
  edits.mounts.push_back({paths.log_dir, kMpsContainerLogDir, {"ro", "nosuid", "nodev", "bind"}});
  return edits;
}

MpsDaemonSettings MpsDaemonSettingsFor(const MpsDeviceRef& device, const MpsPaths& paths,
                                       const MpsConfig& mps) {
  MpsDaemonSettings s;
  s.device_uuid = device.uuid;
  s.paths = paths;
  s.active_thread_percentage = mps.default_active_thread_percentage;
  s.pinned_memory_limit_mib = PinnedMemoryLimitMiB(mps, device);
  s.multi_user = mps.multi_user.value_or(false);
  return s;
}

absl::Status UnavailableMpsControl::Start(const MpsDaemonSettings& settings) {
  return absl::FailedPreconditionError(
      absl::StrCat("MPS is not available on this node: no control daemon can be started for ",
                   settings.device_uuid));
}

absl::Status UnavailableMpsControl::Stop(absl::string_view /*device_uuid*/) {
  return absl::OkStatus();
}

absl::Status SimulatedMpsControl::Start(const MpsDaemonSettings& settings) {
  absl::MutexLock lock(&mu_);
  calls_.push_back({Call::Op::kStart, settings.device_uuid, settings});
  if (!next_start_error_.ok()) {
    return std::exchange(next_start_error_, absl::OkStatus());
  }
  auto it = std::find_if(running_.begin(), running_.end(), [&](const MpsDaemonSettings& r) {
    return r.device_uuid == settings.device_uuid;
  });
  if (it != running_.end()) {
    if (*it == settings) {
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "MPS control daemon for ", settings.device_uuid, " already runs with other settings"));
  }
  running_.push_back(settings);
  return absl::OkStatus();
}

absl::Status SimulatedMpsControl::Stop(absl::string_view device_uuid) {
  absl::MutexLock lock(&mu_);
  calls_.push_back({Call::Op::kStop, std::string(device_uuid), std::nullopt});
  std::erase_if(running_, [&](const MpsDaemonSettings& r) { return r.device_uuid == device_uuid; });
  return absl::OkStatus();
}

std::vector<SimulatedMpsControl::Call> SimulatedMpsControl::Calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

std::optional<MpsDaemonSettings> SimulatedMpsControl::Running(absl::string_view device_uuid) const {
  absl::MutexLock lock(&mu_);
  for (const MpsDaemonSettings& r : running_) {
    if (r.device_uuid == device_uuid) {
      return r;
    }
  }
  return std::nullopt;
}

void SimulatedMpsControl::FailNextStartForTest(absl::Status status) {
  absl::MutexLock lock(&mu_);
  next_start_error_ = std::move(status);
}

}  // namespace dralens::driver::sharing
