// Opaque claim configuration for dralens (`resource.dralens.dev/v1beta1`): strict decoding of
// `GpuConfig` / `MigDeviceConfig` and resolution of the config that applies to one allocated
// device.
//
// Field shapes follow the NVIDIA GPU DRA driver (`resource.nvidia.com/v1beta1`, reference
// dra-protocol.md §5.4):
//
//   GpuConfig        {apiVersion, kind, sharing?: {strategy: TimeSlicing|MPS,
//                     timeSlicingConfig?: {interval?: Default|Short|Medium|Long},
//                     mpsConfig?: MpsConfig}}
//   MigDeviceConfig  {apiVersion, kind, sharing?: {strategy: TimeSlicing|MPS,
//                     mpsConfig?: MpsConfig}}
//   MpsConfig        {defaultActiveThreadPercentage?: int 1..100,
//                     defaultPinnedDeviceMemoryLimit?: quantity,
//                     defaultPerDevicePinnedMemoryLimit?: {<uuid or index>: quantity},
//                     multiUser?: bool}
//
// MIG devices cannot have their time-slice interval set (nvml-and-mig.md §7.5), so
// MigDeviceConfig has no `timeSlicingConfig` field: it is rejected as an unknown field. Its
// `TimeSlicing` strategy is accepted (as upstream does) and means the default scheduling of
// processes sharing the MIG device.
//
// Thread-safety: pure functions over value types.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "driver/discovery/device_source.h"
#include "nlohmann/json.hpp"
#include "src/common/quantity.h"
#include "src/model/device_type.h"
#include "src/model/resource.h"

namespace dralens::driver::sharing {

inline constexpr char kConfigApiVersion[] = "resource.dralens.dev/v1beta1";
inline constexpr char kGpuConfigKind[] = "GpuConfig";
inline constexpr char kMigDeviceConfigKind[] = "MigDeviceConfig";
// `opaque.parameters` is at most 10 KiB of raw JSON in resource.k8s.io/v1 (§4.3); measured on
// the compact serialization because the API server hands us parsed JSON.
inline constexpr size_t kMaxParametersBytes = 10 * 1024;

// "gpu" | "mig", as in the device `type` attribute (src/model/device_type.h).
using model::DeviceType;
using model::ParseDeviceType;
using model::ToString;

enum class ConfigKind { kGpuConfig, kMigDeviceConfig };
absl::string_view ToString(ConfigKind kind);

// kNone: no `sharing` block (or no config at all): the device is used exclusively.
enum class SharingMode { kNone, kTimeSlicing, kMps };
// "none" | "TimeSlicing" | "MPS".
absl::string_view ToString(SharingMode mode);

struct MpsConfig {
  std::optional<int> default_active_thread_percentage;                 // 1..100
  std::optional<common::Quantity> default_pinned_device_memory_limit;  // >= 1Mi
  std::map<std::string, common::Quantity>
      default_per_device_pinned_memory_limit;  // key: uuid or index
  std::optional<bool> multi_user;

  bool operator==(const MpsConfig&) const = default;
};

struct SharingConfig {
  SharingMode mode = SharingMode::kNone;
  // Only meaningful for kTimeSlicing; kDefault when unset (upstream default).
  discovery::TimeSlice interval = discovery::TimeSlice::kDefault;
  // Only meaningful for kMps; an empty MpsConfig when the block was omitted.
  MpsConfig mps;

  bool operator==(const SharingConfig&) const = default;
};

// A decoded GpuConfig or MigDeviceConfig.
struct DeviceConfig {
  ConfigKind kind = ConfigKind::kGpuConfig;
  SharingConfig sharing;

  bool operator==(const DeviceConfig&) const = default;
};

// Strictly decodes `opaque.parameters`. Errors are InvalidArgument and name the offending
// field by its JSON path, e.g.
//   "sharing.mpsConfig.defaultActiveThreadPercentage: must be 1..100, got 150"
//   "sharing.timeSlicingConfig.foo: unknown field"
// Rejected: parameters over kMaxParametersBytes, a non-object, a wrong apiVersion or kind, an
// unknown field at any level, a wrong JSON type, an unknown enum value, a number out of range,
// a bad quantity, a pinned memory limit below 1Mi, a per-device key that is neither a
// GPU-/MIG- UUID nor a device index, and a config block that does not match the strategy
// (TimeSlicing with mpsConfig, MPS with timeSlicingConfig).
absl::StatusOr<DeviceConfig> DecodeDeviceConfig(const nlohmann::json& parameters);

// The `sharing` block as it is written in parameters (null for kNone); the checkpoint stores
// decisions in this form. DecodeSharingBlock(EncodeSharing(s), kGpuConfig) == s for every s.
nlohmann::json EncodeSharing(const SharingConfig& sharing);
// Strict decoding of a `sharing` block under the rules of `kind`; null decodes to kNone.
absl::StatusOr<SharingConfig> DecodeSharingBlock(const nlohmann::json& block, ConfigKind kind);

// The device a config is resolved for.
struct AllocatedDevice {
  std::string request;  // the allocation result's request: "req" or "req/sub"
  DeviceType type = DeviceType::kGpu;
};

// Whether a config entry's `requests` list covers `request`. Empty covers every request. As the
// resource.k8s.io API documents, "req" covers "req" and all its subrequests "req/<any>", while
// "req/sub" covers only that subrequest.
bool ConfigAppliesToRequest(const std::vector<std::string>& requests, absl::string_view request);

// The config that applies to one allocated device of a claim, from the allocation's config
// list (`status.allocation.devices.config`).
//
// - Entries for other drivers (and entries without `opaque`) are skipped.
// - Every entry for `driver` is decoded, even one that does not apply to this device, so a bad
//   config fails the whole claim the same way for each device; errors name the entry, e.g.
//   "config[1] (FromClaim): sharing.strategy: ...".
// - Class entries come before claim entries (stable, whatever the list order), and a later entry
//   replaces the whole config chosen by an earlier one (no field merging), as upstream does.
// - A GpuConfig applies to gpu devices and a MigDeviceConfig to mig devices. An entry that names
//   this device's request but has the wrong kind is an error naming the kind, the device type
//   and the request. An entry with an empty `requests` list and the wrong kind is skipped, so
//   that a class can carry one GpuConfig and one MigDeviceConfig for all requests (upstream
//   behaves the same way).
// - When nothing applies, the default is a config of the device's kind without sharing
//   (exclusive use).
absl::StatusOr<DeviceConfig> ResolveDeviceConfig(
    const std::vector<model::DeviceAllocationConfiguration>& configs, absl::string_view driver,
    const AllocatedDevice& device);

}  // namespace dralens::driver::sharing
