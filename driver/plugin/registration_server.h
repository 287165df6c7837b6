// RegistrationServer: the kubelet plugin-watcher side of a DRA driver
// (`pluginregistration.Registration`, reference dra-protocol.md §1). The kubelet finds the
// registration socket in its registry directory, calls GetInfo to learn where the DRA service
// listens and which versions it speaks, then reports the outcome with NotifyRegistrationStatus.
#pragma once

#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "driver/plugin/registration.h"
#include "driver/proto/pluginregistration/v1/api.grpc.pb.h"

namespace dralens::driver::plugin {

// Thread-safe: gRPC calls both methods from its own threads while State() is read by /readyz.
class RegistrationServer final : public ::pluginregistration::Registration::Service {
 public:
  // `on_registered` (may be empty) runs after every NotifyRegistrationStatus that reports a
  // successful registration, on the gRPC thread: a restarted kubelet registers the plugin again
  // and may have wiped its ResourceSlices meanwhile.
  explicit RegistrationServer(RegistrationInfo info, std::function<void()> on_registered = {});

  // pluginregistration::Registration::Service
  grpc::Status GetInfo(grpc::ServerContext* context,
                       const ::pluginregistration::InfoRequest* request,
                       ::pluginregistration::PluginInfo* response) override;
  grpc::Status NotifyRegistrationStatus(
      grpc::ServerContext* context, const ::pluginregistration::RegistrationStatus* request,
      ::pluginregistration::RegistrationStatusResponse* response) override;

  RegistrationState State() const;

 private:
  const RegistrationInfo info_;
  const std::function<void()> on_registered_;
  mutable absl::Mutex mu_;
  RegistrationState state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dralens::driver::plugin
