// HealthMonitor: the health of every DRA device of the node (full GPUs and MIG devices, named as
// the slices name them), fed by the device source's health events (reference nvml-and-mig.md §6,
// dra-protocol.md §3 and §5.9).
//
// Rules:
//   - Every device starts HEALTHY.
//   - An Xid is critical unless it is on the NVIDIA drivers' ignore list (13, 31, 43, 45, 68,
//     109) or in options.additional_ignored_xids. A critical Xid makes the device UNHEALTHY and
//     taints it `gpu.dralens.dev/xid=<xid>:NoSchedule`; an ignored Xid leaves it HEALTHY but is
//     named in the message and tainted with effect None, as the NVIDIA DRA driver does.
//   - GPU lost makes the device UNHEALTHY and taints it `gpu.dralens.dev/gpu-lost:NoSchedule`
//     (no xid taint: the loss is the fault, its Xid 79 is only named in the message).
//   - Unmonitored (the device source could not register the GPU's health events) leaves the
//     device HEALTHY, names it in the message and taints it `gpu.dralens.dev/unmonitored` with
//     effect None, as the NVIDIA DRA driver does. It is GPU-wide.
//   - Attribution: an event without GI/CI (kNoMigInstance) is GPU-wide and applies to the GPU and
//     every MIG device on it, including MIG devices created later. An event with a GI applies
//     only to the MIG devices of that GI (and that CI, when the CI is given), as the device
//     plugin filters them. A GI/CI that matches no current MIG device is treated as GPU-wide:
//     the silicon of that GPU did fault, and dropping the event would hide it. A GpuLost event
//     is always GPU-wide. An empty gpu_uuid means every GPU. Events for a GPU that is not in the
//     inventory are logged and dropped.
//   - Faults stick: a device never returns to HEALTHY by itself (the NVIDIA driver clears its
//     taints only on restart, and an Xid is not followed by a "recovered" event). SetInventory
//     keeps the faults of GPUs and MIG devices (by UUID) that are still present, so a periodic
//     rediscovery or a MIG reconfiguration does not wipe them, and drops the faults of the ones
//     that left (a different GPU set is a different node state; a lost GPU leaves Discover).
//     ClearFaults() is the explicit reset; a restarted plugin starts with a new monitor.
//   - Taints per device are one per distinct (key, value), NoSchedule ones first, capped at
//     kMaxTaintsPerDevice (the 1.34 API limit) so a burst of Xids never makes a slice invalid.
//
// Change notification: Version() grows on every change of the device list, a device's health,
// message or taints. OnChange callbacks run after each change, outside the monitor's lock,
// one at a time; they must not call OnChange/RemoveOnChange.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "driver/discovery/health_events.h"
#include "src/common/clock.h"
#include "src/model/inventory.h"
#include "src/model/resource.h"

namespace dralens::driver::health {

inline constexpr char kXidTaintKey[] = "gpu.dralens.dev/xid";
inline constexpr char kGpuLostTaintKey[] = "gpu.dralens.dev/gpu-lost";
inline constexpr char kUnmonitoredTaintKey[] = "gpu.dralens.dev/unmonitored";
inline constexpr char kTaintEffectNoSchedule[] = "NoSchedule";
inline constexpr char kTaintEffectNone[] = "None";
inline constexpr size_t kMaxTaintsPerDevice = 4;

// Values match the KEP-4680 HealthStatus enum.
enum class DeviceHealthStatus { kUnknown = 0, kHealthy = 1, kUnhealthy = 2 };
absl::string_view ToString(DeviceHealthStatus status);

// Application-level Xids that both NVIDIA components ignore (reference nvml-and-mig.md §6.2).
bool IsIgnoredXid(uint64_t xid);

struct DeviceHealthState {
  std::string pool;
  std::string device;
  DeviceHealthStatus health = DeviceHealthStatus::kHealthy;
  std::string message;      // empty when nothing was recorded; not truncated here
  absl::Time last_updated;  // when this device appeared or its state last changed
  bool operator==(const DeviceHealthState&) const = default;
};

struct HealthMonitorOptions {
  std::string pool_name;  // the node name
  // Extra Xids treated as application errors (the NVIDIA driver's --additional-xids-to-ignore).
  std::set<uint64_t> additional_ignored_xids;
  // Mirrors SliceBuilderOptions::dynamic_mig: every GPU the slices offer whole
  // (slices::OffersFullGpu) is a full-GPU device, existing MIG devices are not devices. Otherwise a
  // GPU in MIG mode is tracked only through its MIG devices, as static MIG publishes it. The
  // abstract dynamic-MIG devices are not tracked.
  bool dynamic_mig = false;
  // How long one WaitForEvent call blocks; bounds how long Stop() takes.
  absl::Duration event_wait = absl::Seconds(1);
  // Pause after a failed WaitForEvent before the next one.
  absl::Duration error_backoff = absl::Seconds(1);
};

class HealthMonitor {
 public:
  HealthMonitor(HealthMonitorOptions options, common::Clock& clock);
  ~HealthMonitor();
  HealthMonitor(const HealthMonitor&) = delete;
  HealthMonitor& operator=(const HealthMonitor&) = delete;

  // Starts the thread that feeds `source`'s events into Apply(). `source` must outlive Stop().
  // At most once.
  void Start(discovery::HealthEventSource& source);
  // Stops and joins the event thread (within about options.event_wait). Idempotent; also run by
  // the destructor.
  void Stop();

  // The devices to track. See the file comment for which faults survive.
  void SetInventory(const model::Inventory& inventory);
  // Records one health event.
  void Apply(const discovery::HealthEvent& event);
  // Forgets every recorded fault: all devices become HEALTHY.
  void ClearFaults();

  // Every device, GPUs by minor then MIG devices in inventory order. `version`, when given,
  // receives the Version() this snapshot belongs to.
  std::vector<DeviceHealthState> Snapshot(uint64_t* version = nullptr) const;
  // Taints of the devices that have any, by device name.
  std::map<std::string, std::vector<model::DeviceTaint>> Taints() const;
  uint64_t Version() const;

  // Registers a callback run after every change; returns its id.
  uint64_t OnChange(std::function<void()> callback);
  // After it returns the callback is not running and never runs again.
  void RemoveOnChange(uint64_t id);

 private:
  struct Fault {
    discovery::HealthEventKind kind = discovery::HealthEventKind::kXid;
    uint64_t xid = 0;
    absl::Time time;
  };
  struct Device {
    std::string name;
    std::string gpu_uuid;  // the GPU, or the MIG device's parent
    std::string mig_uuid;  // empty for a full GPU
    DeviceHealthState state;
    std::vector<model::DeviceTaint> taints;
  };

  bool IsCritical(uint64_t xid) const;
  // Adds `fault` to `faults` unless an equal one (kind, xid) is there. True when added.
  static bool AddFault(std::vector<Fault>& faults, Fault fault);
  // Recomputes every device from the fault records; true when anything changed.
  bool RecomputeLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RebuildDevicesLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifyChanged() ABSL_LOCKS_EXCLUDED(mu_, callbacks_mu_);
  void Run(discovery::HealthEventSource& source);

  const HealthMonitorOptions options_;
  common::Clock& clock_;

  mutable absl::Mutex mu_;
  model::Inventory inventory_ ABSL_GUARDED_BY(mu_);
  std::vector<Device> devices_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<Fault>> gpu_faults_ ABSL_GUARDED_BY(mu_);  // by GPU UUID
  std::map<std::string, std::vector<Fault>> mig_faults_ ABSL_GUARDED_BY(mu_);  // by MIG UUID
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;

  absl::Mutex callbacks_mu_;  // never held together with mu_
  std::map<uint64_t, std::function<void()>> callbacks_ ABSL_GUARDED_BY(callbacks_mu_);
  uint64_t next_callback_id_ ABSL_GUARDED_BY(callbacks_mu_) = 1;

  absl::Mutex thread_mu_;
  bool stopping_ ABSL_GUARDED_BY(thread_mu_) = false;
  std::thread thread_ ABSL_GUARDED_BY(thread_mu_);
};

}  // namespace dralens::driver::health
