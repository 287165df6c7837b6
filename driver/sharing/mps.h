// MPS preparation pieces: per-claim host directories, the container edits of an MPS client and
// the control-daemon interface.
//
// Host layout under the MPS root (e.g. `<kubelet-plugins-dir>/<driver>/mps`):
//   <root>/<claimUID>/pipe   CUDA_MPS_PIPE_DIRECTORY of the daemon, bind-mounted into clients
//   <root>/<claimUID>/log    CUDA_MPS_LOG_DIRECTORY of the daemon (control.log, server.log)
// When several claims share a device through MPS, they all use the directories of the claim
// that started the daemon (SharingDecision::mps_owner_claim_uid).
//
// Mapping of SharingContainerEdits onto a CDI device's `containerEdits`:
//   env     → `env` (each entry already "KEY=VALUE")
//   mounts  → `mounts[]` {hostPath, containerPath, options}
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "driver/sharing/config.h"

namespace dralens::driver::sharing {

// Where clients see the daemon's directories; the CUDA defaults, so images need no settings.
inline constexpr char kMpsContainerPipeDir[] = "/tmp/nvidia-mps";
inline constexpr char kMpsContainerLogDir[] = "/var/log/nvidia-mps";

struct MpsPaths {
  std::string claim_dir;  // <root>/<claimUID>
  std::string pipe_dir;   // <root>/<claimUID>/pipe
  std::string log_dir;    // <root>/<claimUID>/log

  bool operator==(const MpsPaths&) const = default;
};

// The directories of `claim_uid` under `root`. InvalidArgument when `root` is not an absolute
// path or the claim UID could escape it (prepare::ValidateClaimUid: no '/', no "..", ...).
absl::StatusOr<MpsPaths> MpsPathsFor(absl::string_view root, absl::string_view claim_uid);

// One MPS device as seen by the node and by the client.
struct MpsDeviceRef {
  std::string uuid;      // GPU-... or MIG-...
  int host_index = -1;   // the node's device index, matched against index keys; -1 = none
  int cuda_ordinal = 0;  // the device's CUDA ordinal inside the container
};

// The pinned device memory limit for one device in whole MiB: a per-device entry keyed by its
// UUID wins over one keyed by its host index, which wins over the default. nullopt: no limit.
std::optional<int64_t> PinnedMemoryLimitMiB(const MpsConfig& mps, const MpsDeviceRef& device);

struct SharingMount {
  std::string host_path;
  std::string container_path;
  std::vector<std::string> options;

  bool operator==(const SharingMount&) const = default;
};

struct SharingContainerEdits {
  std::vector<std::string> env;  // "KEY=VALUE"
  std::vector<SharingMount> mounts;

  bool operator==(const SharingContainerEdits&) const = default;
};

// Edits for a container using `device` through the daemon whose directories are `paths`:
//   CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps, CUDA_MPS_LOG_DIRECTORY=/var/log/nvidia-mps,
//   CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<pct> when set,
//   CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=<cuda ordinal>=<N>M when a limit applies;
//   the pipe dir bind-mounted read-write and the log dir read-only.
// The client-side limits repeat the daemon's defaults (a client may only lower them), so a
// client started outside the daemon's defaults still gets the configured limits.
SharingContainerEdits MpsContainerEdits(const MpsPaths& paths, const MpsConfig& mps,
                                        const MpsDeviceRef& device);

// What a control daemon for one device is started with.
struct MpsDaemonSettings {
  std::string device_uuid;
  MpsPaths paths;
  std::optional<int> active_thread_percentage;
  std::optional<int64_t> pinned_memory_limit_mib;
  bool multi_user = false;

  bool operator==(const MpsDaemonSettings&) const = default;
};

MpsDaemonSettings MpsDaemonSettingsFor(const MpsDeviceRef& device, const MpsPaths& paths,
                                       const MpsConfig& mps);

// Starts and stops the MPS control daemon of a device.
//
// Thread-safety: implementations are safe to call from several threads. Both calls are
// idempotent because prepare and unprepare are retried after crashes.
class MpsControl {
 public:
  virtual ~MpsControl() = default;

  // Starts the daemon for `settings.device_uuid`. OK when it already runs with the same
  // settings; FailedPrecondition when it runs with different ones.
  virtual absl::Status Start(const MpsDaemonSettings& settings) = 0;
  // Stops the daemon of `device_uuid`; OK when none runs.
  virtual absl::Status Stop(absl::string_view device_uuid) = 0;
};
using MpsControlPtr = std::unique_ptr<MpsControl>;

// For nodes with no MPS daemon manager: every Start fails with FailedPrecondition ("MPS is not
// available on this node"), so MPS claims fail clearly instead of running without a daemon;
// Stop has nothing to stop.
class UnavailableMpsControl final : public MpsControl {
 public:
  // MpsControl
  absl::Status Start(const MpsDaemonSettings& settings) override;
  absl::Status Stop(absl::string_view device_uuid) override;
};

// Records what it is asked and keeps the set of running daemons; for tests and the demo.
class SimulatedMpsControl final : public MpsControl {
 public:
  struct Call {
    enum class Op { kStart, kStop };
    Op op = Op::kStart;
    std::string device_uuid;
    std::optional<MpsDaemonSettings> settings;  // set for kStart

    bool operator==(const Call&) const = default;
  };

  // MpsControl
  absl::Status Start(const MpsDaemonSettings& settings) override;
  absl::Status Stop(absl::string_view device_uuid) override;

  std::vector<Call> Calls() const;
  std::optional<MpsDaemonSettings> Running(absl::string_view device_uuid) const;
  // Makes the next Start fail with `status` (and not start anything).
  void FailNextStartForTest(absl::Status status);

 private:
  mutable absl::Mutex mu_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<MpsDaemonSettings> running_ ABSL_GUARDED_BY(mu_);
  absl::Status next_start_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dralens::driver::sharing
