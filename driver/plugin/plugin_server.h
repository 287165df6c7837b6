// PluginServer: the two Unix-socket gRPC servers a DRA kubelet plugin runs (reference
// dra-protocol.md §1.2):
//   <plugins-dir>/<driver>/dra.sock        DRAPlugin v1 and v1beta1 (DraServiceV1/V1beta1)
//   <registry-dir>/<driver>-reg.sock       pluginregistration.Registration (RegistrationServer)
// Plain insecure gRPC, no TLS. Proto-free header: the composition root includes it without
// pulling in gRPC.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "driver/plugin/call_telemetry.h"
#include "driver/plugin/registration.h"
#include "driver/prepare/claim_handler.h"
#include "src/common/work_queue.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace dralens::driver::health {
class HealthServices;
}  // namespace dralens::driver::health

namespace dralens::driver::plugin {

class DraServiceV1;
class DraServiceV1beta1;
class QueuedDraServiceV1;
class QueuedDraServiceV1beta1;
class RegistrationServer;

struct PluginServerOptions {
  std::string driver_name;   // --driver-name, e.g. "gpu.dralens.dev"; no '/'
  std::string registry_dir;  // --kubelet-registry-dir
  std::string plugins_dir;   // --kubelet-plugins-dir; the driver owns <plugins_dir>/<driver>/
  // How long Stop() lets in-flight DRA calls finish before cancelling them.
  std::chrono::milliseconds shutdown_grace = std::chrono::seconds(5);
  // DRAResourceHealth v1alpha1 and v1 on dra.sock, advertised in supported_versions; null
  // serves neither. Not owned; must outlive the server.
  health::HealthServices* health = nullptr;
  // Worker threads that run NodePrepareResources/NodeUnprepareResources; calls beyond them
  // wait in a queue (queued_dra_service.h), so a burst of calls costs no threads.
  size_t call_workers = 64;
  // Calls the kubelet's connection may have open on dra.sock at once, queued and running
  // together (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); the kubelet's gRPC client holds any
  // more until one finishes. gRPC keeps about 13 kB per open call, so an unbounded burst of
  // 1,000 pods starting together cost 13 MB; this bounds it. Leaves room for the kubelet's
  // health stream. 0: unlimited.
  size_t max_open_calls = 128;
  // Runs after each successful registration by the kubelet (see RegistrationServer); may be
  // empty. Must not block.
  std::function<void()> on_registered;
};

// <registry_dir>/<driver>-reg.sock and <plugins_dir>/<driver>/dra.sock, made absolute (the
// kubelet needs an absolute endpoint, and the path must be the same in and out of the pod).
std::string RegistrationSocketPath(absl::string_view registry_dir, absl::string_view driver_name);
std::string DraSocketPath(absl::string_view plugins_dir, absl::string_view driver_name);

// Lifecycle, in this order (the kubelet dials the DRA endpoint as soon as it sees the
// registration socket, so that socket appears last and disappears first):
//   Start: create both directories (the driver's own one 0750); remove stale socket files left
//          by a previous run; serve dra.sock; serve <driver>-reg.sock; chmod both sockets 0600.
//          The chmod follows the bind, so for a moment the socket carries the process umask;
//          during that window access is limited by the directories' own permissions.
//   Stop:  remove the registration socket (this deregisters the plugin), stop the registration
//          server, stop the DRA server (in-flight calls get `shutdown_grace`, then their
//          contexts are cancelled; Stop still waits for handlers to return), remove dra.sock.
// Thread-safe: RegistrationStatus() may be called from any thread; Stop() is idempotent and
// also runs in the destructor. `handler` and the telemetry sinks must outlive the server.
class PluginServer {
 public:
  // `telemetry`: the per-call metrics and spans (call_telemetry.h).
  static absl::StatusOr<std::unique_ptr<PluginServer>> Start(const PluginServerOptions& options,
                                                             ClaimHandler& handler,
                                                             CallTelemetry telemetry);
  ~PluginServer();
  PluginServer(const PluginServer&) = delete;
  PluginServer& operator=(const PluginServer&) = delete;

  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // What the kubelet last said through NotifyRegistrationStatus (for /readyz).
  RegistrationState RegistrationStatus() const;

  const std::string& registration_socket_path() const { return registration_socket_path_; }
  const std::string& dra_socket_path() const { return dra_socket_path_; }

 private:
  PluginServer(const PluginServerOptions& options, ClaimHandler& handler, CallTelemetry telemetry);
  absl::Status StartServers() ABSL_LOCKS_EXCLUDED(mu_);

  const PluginServerOptions options_;
  const std::string registration_socket_path_;
  const std::string dra_socket_path_;
  std::unique_ptr<DraServiceV1> dra_v1_;
  std::unique_ptr<DraServiceV1beta1> dra_v1beta1_;
  std::unique_ptr<common::WorkQueue> workers_;  // stopped after the DRA server
  std::unique_ptr<QueuedDraServiceV1> queued_v1_;
  std::unique_ptr<QueuedDraServiceV1beta1> queued_v1beta1_;
  std::unique_ptr<RegistrationServer> registration_;
  absl::Mutex mu_;  // serializes Stop()
  std::unique_ptr<grpc::Server> dra_server_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::Server> registration_server_ ABSL_GUARDED_BY(mu_);
};
using PluginServerPtr = std::unique_ptr<PluginServer>;

}  // namespace dralens::driver::plugin
