#include "src/sim/kubelet.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "driver/proto/pluginregistration/v1/api.grpc.pb.h"

namespace dralens::sim {
namespace {

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  const std::string message = absl::StrCat(what, ": ", s.error_message());
  switch (s.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(message);
    case grpc::StatusCode::UNIMPLEMENTED:
      return absl::UnimplementedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

std::unique_ptr<grpc::ClientContext> Deadline(std::chrono::milliseconds timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  return context;
}

// What the kubelet's DRA handler would refuse, or "" when the plugin is acceptable.
std::string Validate(const ::pluginregistration::PluginInfo& info, std::string* chosen) {
  if (info.type() != "DRAPlugin") {
    return absl::StrCat("no handler registered for plugin type \"", info.type(), "\"");
  }
  if (info.name().empty()) {
    return "plugin name is empty";
  }
  if (info.endpoint().empty() || info.endpoint().front() != '/') {
    return absl::StrCat("endpoint \"", info.endpoint(), "\" is not an absolute path");
  }
  const std::vector<std::string> ours = KubeletSupportedServices();
  for (const std::string& offered : info.supported_versions()) {
    if (std::find(ours.begin(), ours.end(), offered) != ours.end()) {
      *chosen = offered;
      return "";
    }
  }
  return absl::StrCat("none of the plugin's services [",
                      absl::StrJoin(info.supported_versions(), ", "),
                      "] is supported; this kubelet speaks [", absl::StrJoin(ours, ", "), "]");
}

}  // namespace

std::vector<std::string> KubeletSupportedServices() {
  return {"v1.DRAPlugin", "v1beta1.DRAPlugin"};
}

absl::StatusOr<RegisteredPlugin> RegisterPlugin(absl::string_view registration_socket) {
  auto stub = ::pluginregistration::Registration::NewStub(grpc::CreateChannel(
      absl::StrCat("unix://", registration_socket), grpc::InsecureChannelCredentials()));
  ::pluginregistration::PluginInfo info;
  grpc::Status s = stub->GetInfo(Deadline(std::chrono::seconds(1)).get(), {}, &info);
  if (!s.ok()) {
    return FromGrpc(s, absl::StrCat("GetInfo on ", registration_socket));
  }
  RegisteredPlugin plugin{info.name(), info.endpoint(), ""};
  const std::string refusal = Validate(info, &plugin.service_version);
  ::pluginregistration::RegistrationStatus status;
  status.set_plugin_registered(refusal.empty());
  status.set_error(refusal);
  ::pluginregistration::RegistrationStatusResponse response;
  s = stub->NotifyRegistrationStatus(Deadline(std::chrono::seconds(5)).get(), status, &response);
  if (!s.ok()) {
    return FromGrpc(s, absl::StrCat("NotifyRegistrationStatus on ", registration_socket));
  }
  if (!refusal.empty()) {
    return absl::FailedPreconditionError(refusal);
  }
  return plugin;
}

}  // namespace dralens::sim
