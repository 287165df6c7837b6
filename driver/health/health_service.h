// DRAResourceHealth (KEP-4680, reference dra-protocol.md §3): the server-streaming
// NodeWatchResources of `v1alpha1.DRAResourceHealth` (kubelet 1.34+) and `v1.DRAResourceHealth`
// (1.37+), both served from one HealthMonitor with the same semantics:
//   - on connect the full device list is sent at once;
//   - then the full list again after every monitor change and every heartbeat_interval of the
//     Clock without a send, so the kubelet's per-device timeout never expires while we watch;
//   - last_updated_time is the send time (unix seconds): every response vouches for the state
//     as of now, which is what the kubelet's staleness check needs;
//   - messages over 1024 bytes become 1021 bytes plus "..." (TruncateHealthMessage);
//   - a stream ends when the client cancels (CANCELLED), or on Shutdown() (UNAVAILABLE "plugin
//     shutting down"); after Shutdown() new streams are refused the same way.
//
// Time: the heartbeat is measured on the injected Clock, so a FakeClock drives it in tests. A
// stream notices changes and Shutdown() at once; it checks the Clock and client cancellation
// every poll_interval of real time (gRPC's sync API has no cancellation callback).
//
// Order: call Shutdown() before grpc::Server::Shutdown() (or give the server a deadline), and
// destroy HealthServices only after the server has stopped; the monitor must outlive it.
//
// Proto-free header: the composition root includes it without pulling in gRPC.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "driver/health/monitor.h"
#include "src/common/clock.h"

namespace grpc {
class Service;
class ServerBuilder;
}  // namespace grpc

namespace dralens::driver::health {

inline constexpr size_t kMaxHealthMessageLength = 1024;

// At most kMaxHealthMessageLength bytes: longer text becomes its first 1021 bytes plus "...".
// The cut backs up to a UTF-8 character boundary, since protobuf rejects invalid UTF-8 strings.
std::string TruncateHealthMessage(absl::string_view message);

struct HealthServiceOptions {
  absl::Duration heartbeat_interval = absl::Seconds(30);
  // health_check_timeout_seconds of every device; <= 0 lets the kubelet use its default.
  int64_t health_check_timeout_seconds = 0;
  // Real-time interval between checks for client cancellation and a due heartbeat.
  absl::Duration poll_interval = absl::Milliseconds(100);
};

class StreamHub;

class HealthServices {
 public:
  HealthServices(HealthMonitor& monitor, common::Clock& clock, HealthServiceOptions options = {});
  ~HealthServices();
  HealthServices(const HealthServices&) = delete;
  HealthServices& operator=(const HealthServices&) = delete;

  grpc::Service* v1alpha1();
  grpc::Service* v1();

  // Ends every open stream with UNAVAILABLE and refuses new ones. Idempotent; never blocks on
  // streams.
  void Shutdown();

  // Streams being served right now.
  int OpenStreams() const;

 private:
  class V1alpha1Service;
  class V1Service;
  std::unique_ptr<StreamHub> hub_;
  std::unique_ptr<V1alpha1Service> v1alpha1_;
  std::unique_ptr<V1Service> v1_;
};

// Registers both services on `builder`; `services` must outlive the built server.
void RegisterHealthServices(grpc::ServerBuilder& builder, HealthServices& services);

}  // namespace dralens::driver::health
