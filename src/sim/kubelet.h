// The kubelet's side of DRA plugin registration, for `dralens demo` and tests: what the
// kubelet's plugin watcher does when a registration socket appears (dra-protocol.md §1.4).
//
//   1. dial the registration socket and call GetInfo with a 1 s deadline;
//   2. check the answer as the kubelet's DRA handler does: type "DRAPlugin", a driver name, an
//      absolute endpoint, and a supported_versions entry this kubelet speaks (the plugin's
//      list is walked in order and the first supported entry wins);
//   3. NotifyRegistrationStatus(true) with a 5 s deadline, or (false, reason) when step 2
//      failed.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dralens::sim {

struct RegisteredPlugin {
  std::string driver_name;
  std::string endpoint;         // the dra.sock path
  std::string service_version;  // the chosen entry, e.g. "v1.DRAPlugin"
};

// The services a 1.34+ kubelet speaks, in the order it prefers nothing: the plugin's order
// decides.
std::vector<std::string> KubeletSupportedServices();

// Registers the plugin behind `registration_socket` (a filesystem path). On a refusal the
// plugin is told why and the same reason is returned as FailedPrecondition; transport errors
// come back as Unavailable or DeadlineExceeded.
absl::StatusOr<RegisteredPlugin> RegisterPlugin(absl::string_view registration_socket);

}  // namespace dralens::sim
