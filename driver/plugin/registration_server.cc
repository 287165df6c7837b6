#include "driver/plugin/registration_server.h"

#include <utility>

#include "src/common/log.h"

namespace dralens::driver::plugin {

std::vector<std::string> SupportedVersions(bool with_health) {
  std::vector<std::string> versions = {kDraPluginV1, kDraPluginV1beta1};
  if (with_health) {
    versions.emplace_back(kResourceHealthV1alpha1);
    versions.emplace_back(kResourceHealthV1);
  }
  return versions;
}

RegistrationServer::RegistrationServer(RegistrationInfo info, std::function<void()> on_registered)
    : info_(std::move(info)), on_registered_(std::move(on_registered)) {}

grpc::Status RegistrationServer::GetInfo(grpc::ServerContext* /*context*/,
                                         const ::pluginregistration::InfoRequest* /*request*/,
                                         ::pluginregistration::PluginInfo* response) {
  response->set_type(kDraPluginType);
  response->set_name(info_.driver_name);
  response->set_endpoint(info_.endpoint);
  for (const std::string& version : info_.supported_versions) {
    response->add_supported_versions(version);
  }
  DLOG(kDebug, "plugin", "kubelet called GetInfo", {{"driver", info_.driver_name}});
  return grpc::Status::OK;
}

grpc::Status RegistrationServer::NotifyRegistrationStatus(
    grpc::ServerContext* /*context*/, const ::pluginregistration::RegistrationStatus* request,
    ::pluginregistration::RegistrationStatusResponse* /*response*/) {
  {
    absl::MutexLock lock(&mu_);
    state_.notified = true;
    state_.registered = request->plugin_registered();
    state_.error = request->error();
  }
  if (request->plugin_registered()) {
    DLOG(kInfo, "plugin", "registered with the kubelet",
         {{"driver", info_.driver_name}, {"endpoint", info_.endpoint}});
    if (on_registered_) {
      on_registered_();
    }
  } else {
    // The kubelet retries registration from GetInfo on; nothing to do here but say why.
    DLOG(kWarn, "plugin", "kubelet rejected registration",
         {{"driver", info_.driver_name}, {"error", request->error()}});
  }
  return grpc::Status::OK;
}

RegistrationState RegistrationServer::State() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

}  // namespace dralens::driver::plugin
