#include "driver/health/health_service.h"

#include <grpcpp/grpcpp.h>

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "driver/proto/dra-health/v1/api.grpc.pb.h"
#include "driver/proto/dra-health/v1alpha1/api.grpc.pb.h"
#include "src/common/log.h"

namespace dralens::driver::health {

std::string TruncateHealthMessage(absl::string_view message) {
  if (message.size() <= kMaxHealthMessageLength) {
    return std::string(message);
  }
  size_t cut = kMaxHealthMessageLength - 3;
  // Never split a multi-byte character: back up over continuation bytes (10xxxxxx).
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return absl::StrCat(message.substr(0, cut), "...");
}

// What both API versions share: waiting for changes, heartbeats, cancellation and shutdown.
class StreamHub {
 public:
  StreamHub(HealthMonitor& monitor, common::Clock& clock, HealthServiceOptions options)
      : monitor_(monitor), clock_(clock), options_(options) {
    subscription_ = monitor_.OnChange([this] {
      absl::MutexLock lock(&mu_);
      ++changes_;
    });
  }
  ~StreamHub() { monitor_.RemoveOnChange(subscription_); }

  void Shutdown() {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
  }

  int OpenStreams() const {
    absl::MutexLock lock(&mu_);
    return open_streams_;
  }

  // Serves one stream until cancellation or Shutdown. `Response` is the version's
  // NodeWatchResourcesResponse.
  template <typename Response>
  grpc::Status Watch(grpc::ServerContext& context, grpc::ServerWriter<Response>& writer,
                     absl::string_view api) {
    uint64_t seen = 0;
    {
      absl::MutexLock lock(&mu_);
      if (shutting_down_) {
        return ShuttingDown();
      }
      ++open_streams_;
      seen = changes_;
    }
    DLOG(kInfo, "health", "health stream opened", {{"api", api}, {"peer", context.peer()}});
    grpc::Status status = Serve(context, writer, seen);
    {
      absl::MutexLock lock(&mu_);
      --open_streams_;
    }
    DLOG(kInfo, "health", "health stream closed",
         {{"api", api}, {"code", static_cast<int>(status.error_code())}});
    return status;
  }

 private:
  static grpc::Status ShuttingDown() {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "plugin shutting down");
  }

  template <typename Response>
  grpc::Status Serve(grpc::ServerContext& context, grpc::ServerWriter<Response>& writer,
                     uint64_t seen) {
    absl::Time next_heartbeat;
    auto send = [&]() {
      Response response;
      const absl::Time now = clock_.Now();
      for (const DeviceHealthState& state : monitor_.Snapshot()) {
        auto* device = response.add_devices();
        device->mutable_device()->set_pool_name(state.pool);
        device->mutable_device()->set_device_name(state.device);
        // Our enum mirrors the proto's values.
        device->set_health(static_cast<decltype(device->health())>(state.health));
        device->set_last_updated_time(absl::ToUnixSeconds(now));
        device->set_health_check_timeout_seconds(options_.health_check_timeout_seconds);
        device->set_message(TruncateHealthMessage(state.message));
      }
      next_heartbeat = now + options_.heartbeat_interval;
      return writer.Write(response);
    };
    if (!send()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    }
    while (true) {
      bool changed = false;
      {
        absl::MutexLock lock(&mu_);
        auto woken = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return shutting_down_ || changes_ != seen;
        };
        mu_.AwaitWithTimeout(absl::Condition(&woken), options_.poll_interval);
        if (shutting_down_) {
          return ShuttingDown();
        }
        if (changes_ != seen) {
          seen = changes_;
          changed = true;
        }
      }
      if (context.IsCancelled()) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled");
      }
      if (changed || clock_.Now() >= next_heartbeat) {
        if (!send()) {
          return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
        }
      }
    }
  }

  HealthMonitor& monitor_;
  common::Clock& clock_;
  const HealthServiceOptions options_;
  uint64_t subscription_ = 0;

  mutable absl::Mutex mu_;
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  int open_streams_ ABSL_GUARDED_BY(mu_) = 0;
};

class HealthServices::V1alpha1Service final : public ::v1alpha1::DRAResourceHealth::Service {
 public:
  explicit V1alpha1Service(StreamHub& hub) : hub_(hub) {}
  grpc::Status NodeWatchResources(
      grpc::ServerContext* context, const ::v1alpha1::NodeWatchResourcesRequest* /*request*/,
      grpc::ServerWriter<::v1alpha1::NodeWatchResourcesResponse>* writer) override {
    return hub_.Watch(*context, *writer, "v1alpha1");
  }

 private:
  StreamHub& hub_;
};

class HealthServices::V1Service final : public ::v1::DRAResourceHealth::Service {
 public:
  explicit V1Service(StreamHub& hub) : hub_(hub) {}
  grpc::Status NodeWatchResources(
      grpc::ServerContext* context, const ::v1::NodeWatchResourcesRequest* /*request*/,
      grpc::ServerWriter<::v1::NodeWatchResourcesResponse>* writer) override {
    return hub_.Watch(*context, *writer, "v1");
  }

 private:
  StreamHub& hub_;
};

HealthServices::HealthServices(HealthMonitor& monitor, common::Clock& clock,
                               HealthServiceOptions options)
    : hub_(std::make_unique<StreamHub>(monitor, clock, options)),
      v1alpha1_(std::make_unique<V1alpha1Service>(*hub_)),
      v1_(std::make_unique<V1Service>(*hub_)) {}

HealthServices::~HealthServices() { Shutdown(); }

grpc::Service* HealthServices::v1alpha1() { return v1alpha1_.get(); }
grpc::Service* HealthServices::v1() { return v1_.get(); }

void HealthServices::Shutdown() { hub_->Shutdown(); }

int HealthServices::OpenStreams() const { return hub_->OpenStreams(); }

void RegisterHealthServices(grpc::ServerBuilder& builder, HealthServices& services) {
  builder.RegisterService(services.v1alpha1());
  builder.RegisterService(services.v1());
}

}  // namespace dralens::driver::health
