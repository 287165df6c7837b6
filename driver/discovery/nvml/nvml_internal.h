// Helpers shared by the files of NvmlDeviceSource (one file per capability: discovery in
// nvml_device_source.cc, MIG in nvml_mig.cc, health events in nvml_events.cc, time-slicing in
// nvml_time_slice.cc, sysfs in nvml_sysfs.cc, NVLink in nvml_nvlink.cc). Not part of the public
// interface.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dralens::driver::discovery::nvml_internal {

inline constexpr char kComponent[] = "nvml";

// Whether an NVML status says the GPU fell off the bus (NVML_ERROR_GPU_IS_LOST).
bool IsGpuLost(const absl::Status& status);
// Whether an NVML status says the process may not use the GPU (NVML_ERROR_NO_PERMISSION): a GPU
// outside the container's device cgroup, or a MIG call without the MIG capability.
bool IsNoPermission(const absl::Status& status);
// A NUL-terminated NVML string buffer as std::string.
std::string CString(const char* buffer, size_t size);

// sysfs path of a PCI device: <sysfs_root>/bus/pci/devices/<bdf>, with `bdf` in the kernel's
// form (lower case, 4-digit domain, "0000:3b:00.0").
std::string SysfsPciDevice(absl::string_view sysfs_root, absl::string_view bdf);
// The host NUMA node of a PCI device from sysfs `numa_node`; nullopt when absent, unreadable or
// -1 (no NUMA affinity).
std::optional<int> SysfsNumaNode(absl::string_view sysfs_root, absl::string_view bdf);
// "pci<domain>:<bus>" of the root complex above a PCI device, from the sysfs device path
// (/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0); empty when unknown.
std::string SysfsPcieRoot(absl::string_view sysfs_root, absl::string_view bdf);

}  // namespace dralens::driver::discovery::nvml_internal
