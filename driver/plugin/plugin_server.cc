#include "driver/plugin/plugin_server.h"

#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "driver/health/health_service.h"
#include "driver/plugin/dra_service.h"
#include "driver/plugin/queued_dra_service.h"
#include "driver/plugin/registration_server.h"
#include "src/common/log.h"
#include "src/common/status.h"

namespace dralens::driver::plugin {
namespace {

namespace fs = std::filesystem;

constexpr mode_t kSocketMode = 0600;
constexpr fs::perms kDriverDirMode =
    fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec;  // 0750
// Registration calls are tiny; the kubelet itself waits at most 5 s for them.
constexpr auto kRegistrationShutdownGrace = std::chrono::seconds(1);

std::string Absolute(const fs::path& path) {
  std::error_code ec;
  fs::path absolute = fs::absolute(path, ec);
  return (ec ? path : absolute).lexically_normal().string();
}

absl::Status CheckSocketPathLength(const std::string& path) {
  constexpr size_t kMax = sizeof(sockaddr_un{}.sun_path) - 1;  // room for the NUL
  if (path.size() > kMax) {
    return absl::InvalidArgumentError(absl::StrCat("socket path ", path, " is ", path.size(),
                                                   " bytes; AF_UNIX allows at most ", kMax));
  }
  return absl::OkStatus();
}

absl::Status MakeDirectory(const std::string& dir, bool owned) {
  std::error_code ec;
  bool created = fs::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("create directory ", dir, ": ", ec.message()));
  }
  if (created && owned) {
    fs::permissions(dir, kDriverDirMode, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("chmod ", dir, ": ", ec.message()));
    }
  }
  return absl::OkStatus();
}

// A socket file left behind by a previous run (crash, kill -9) makes bind() fail, and a stale
// registration socket would make the kubelet dial a dead endpoint: remove whatever non-directory
// sits at `path`.
absl::Status RemoveStale(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? absl::OkStatus() : common::ErrnoStatus(errno, "lstat", path);
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is a directory, not a socket"));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return common::ErrnoStatus(errno, "remove stale socket", path);
  }
  DLOG(kInfo, "plugin", "removed stale socket file",
       {{"path", path}, {"was_socket", S_ISSOCK(st.st_mode) != 0}});
  return absl::OkStatus();
}

void RemoveSocket(const std::string& path) {
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    DLOG(kWarn, "plugin", "could not remove socket file",
         {{"path", path}, {"error", common::Message(common::ErrnoStatus(errno, "unlink"))}});
  }
}

// `max_streams` caps the calls one connection may have open at once (HTTP/2
// SETTINGS_MAX_CONCURRENT_STREAMS); 0 leaves gRPC's default, unlimited.
absl::StatusOr<std::unique_ptr<grpc::Server>> Serve(const std::string& path,
                                                    const std::vector<grpc::Service*>& services,
                                                    size_t max_streams = 0) {
  grpc::ServerBuilder builder;
  if (max_streams > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, static_cast<int>(max_streams));
  }
  builder.AddListeningPort(absl::StrCat("unix://", path), grpc::InsecureServerCredentials());
  for (grpc::Service* service : services) {
    builder.RegisterService(service);
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    return absl::UnavailableError(absl::StrCat("serve gRPC on unix://", path, ": bind failed"));
  }
  if (chmod(path.c_str(), kSocketMode) != 0) {
    absl::Status status = common::ErrnoStatus(errno, "chmod", path);
    server->Shutdown();
    server->Wait();
    return status;
  }
  return server;
}

void StopServer(grpc::Server& server, std::chrono::milliseconds grace) {
  server.Shutdown(std::chrono::system_clock::now() + grace);
  server.Wait();
}

}  // namespace

std::string RegistrationSocketPath(absl::string_view registry_dir, absl::string_view driver_name) {
  return Absolute(fs::path(std::string(registry_dir)) / absl::StrCat(driver_name, "-reg.sock"));
}

std::string DraSocketPath(absl::string_view plugins_dir, absl::string_view driver_name) {
  return Absolute(fs::path(std::string(plugins_dir)) / std::string(driver_name) / "dra.sock");
}

PluginServer::PluginServer(const PluginServerOptions& options, ClaimHandler& handler,
                           CallTelemetry telemetry)
    : options_(options),
      registration_socket_path_(RegistrationSocketPath(options.registry_dir, options.driver_name)),
      dra_socket_path_(DraSocketPath(options.plugins_dir, options.driver_name)),
      dra_v1_(std::make_unique<DraServiceV1>(handler, telemetry)),
      dra_v1beta1_(std::make_unique<DraServiceV1beta1>(handler, telemetry)),
      workers_(std::make_unique<common::WorkQueue>(
          options.call_workers,
          [calls = &telemetry.metrics](size_t waiting, size_t running) {
            calls->SetCalls(waiting, running);
          })),
      queued_v1_(std::make_unique<QueuedDraServiceV1>(*dra_v1_, *workers_)),
      queued_v1beta1_(std::make_unique<QueuedDraServiceV1beta1>(*dra_v1beta1_, *workers_)),
      registration_(std::make_unique<RegistrationServer>(
          RegistrationInfo{
              .driver_name = options.driver_name,
              .endpoint = dra_socket_path_,
              .supported_versions = SupportedVersions(/*with_health=*/options.health != nullptr),
          },
          options.on_registered)) {}

PluginServer::~PluginServer() { Stop(); }

absl::StatusOr<PluginServerPtr> PluginServer::Start(const PluginServerOptions& options,
                                                    ClaimHandler& handler,
                                                    CallTelemetry telemetry) {
  if (options.driver_name.empty() || absl::StrContains(options.driver_name, '/')) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid driver name \"", options.driver_name, "\""));
  }
  if (options.registry_dir.empty() || options.plugins_dir.empty()) {
    return absl::InvalidArgumentError("kubelet registry and plugins directories must be set");
  }
  PluginServerPtr server(new PluginServer(options, handler, telemetry));
  // On error the destructor stops whatever did start and removes its socket.
  RETURN_IF_ERROR_CTX(server->StartServers(), "start kubelet plugin");
  return server;
}

absl::Status PluginServer::StartServers() {
  RETURN_IF_ERROR(CheckSocketPathLength(dra_socket_path_));
  RETURN_IF_ERROR(CheckSocketPathLength(registration_socket_path_));
  RETURN_IF_ERROR(MakeDirectory(fs::path(dra_socket_path_).parent_path(), /*owned=*/true));
  RETURN_IF_ERROR(
      MakeDirectory(fs::path(registration_socket_path_).parent_path(), /*owned=*/false));
  // Registration socket first: the kubelet must not see a stale registration socket pointing
  // at a DRA socket that is about to be replaced.
  RETURN_IF_ERROR(RemoveStale(registration_socket_path_));
  RETURN_IF_ERROR(RemoveStale(dra_socket_path_));

  absl::MutexLock lock(&mu_);
  // The DRA service is up before the kubelet can learn about it.
  std::vector<grpc::Service*> dra_services = {queued_v1_.get(), queued_v1beta1_.get()};
  if (options_.health != nullptr) {
    dra_services.push_back(options_.health->v1alpha1());
    dra_services.push_back(options_.health->v1());
  }
  ASSIGN_OR_RETURN(dra_server_, Serve(dra_socket_path_, dra_services, options_.max_open_calls));
  ASSIGN_OR_RETURN(registration_server_, Serve(registration_socket_path_, {registration_.get()}));
  DLOG(kInfo, "plugin", "kubelet plugin serving",
       {{"driver", options_.driver_name},
        {"registration_socket", registration_socket_path_},
        {"dra_socket", dra_socket_path_}});
  return absl::OkStatus();
}

void PluginServer::Stop() {
  absl::MutexLock lock(&mu_);
  if (registration_server_ != nullptr) {
    // Removing the registration socket deregisters the plugin; do it before the DRA service
    // goes away so the kubelet stops routing calls to it first.
    RemoveSocket(registration_socket_path_);
    StopServer(*registration_server_, kRegistrationShutdownGrace);
    registration_server_.reset();
  }
  if (dra_server_ != nullptr) {
    // Health streams never end on their own; without this each would hold the server's
    // shutdown for the whole grace period.
    if (options_.health != nullptr) {
      options_.health->Shutdown();
    }
    StopServer(*dra_server_, options_.shutdown_grace);
    dra_server_.reset();
    workers_->Stop();  // every queued call has been finished or cancelled by now
    RemoveSocket(dra_socket_path_);
    DLOG(kInfo, "plugin", "kubelet plugin stopped", {{"driver", options_.driver_name}});
  }
}

RegistrationState PluginServer::RegistrationStatus() const { return registration_->State(); }

}  // namespace dralens::driver::plugin
