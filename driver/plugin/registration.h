// Registration values shared by RegistrationServer, PluginServer and the composition root.
// Proto-free: including it does not pull in gRPC.
#pragma once

#include <string>
#include <vector>

namespace dralens::driver::plugin {

// PluginInfo.type for DRA drivers.
inline constexpr char kDraPluginType[] = "DRAPlugin";
// supported_versions entries (dra-protocol.md §1.3). The node-service strings are not the
// full gRPC service names; the health-service strings are.
inline constexpr char kDraPluginV1[] = "v1.DRAPlugin";
inline constexpr char kDraPluginV1beta1[] = "v1beta1.DRAPlugin";
inline constexpr char kResourceHealthV1alpha1[] = "v1alpha1.DRAResourceHealth";
inline constexpr char kResourceHealthV1[] = "v1.DRAResourceHealth";

// The services to advertise, preferred first: the kubelet takes the first entry of this list
// that it supports, so v1 precedes v1beta1. Health services only when they are served.
std::vector<std::string> SupportedVersions(bool with_health);

// What GetInfo reports.
struct RegistrationInfo {
  std::string driver_name;                      // PluginInfo.name, e.g. "gpu.dralens.dev"
  std::string endpoint;                         // absolute dra.sock path, no "unix://"
  std::vector<std::string> supported_versions;  // see SupportedVersions()
};

// What the kubelet last told us through NotifyRegistrationStatus.
struct RegistrationState {
  bool notified = false;    // at least one NotifyRegistrationStatus arrived
  bool registered = false;  // the last one said plugin_registered
  std::string error;        // the last one's error ("" on success)
  bool operator==(const RegistrationState&) const = default;
};

}  // namespace dralens::driver::plugin
