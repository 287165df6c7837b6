// ApiServer: the embedded stand-in for kube-apiserver, on loopback HTTP.
//
// Serves resource.k8s.io/v1 resourceslices, resourceclaims (+/status), deviceclasses, core/v1
// pods (+/status), nodes (+/status), namespaces (+/status) and coordination.k8s.io/v1 leases
// from an in-memory store, plus the discovery documents kubectl needs, with the real server's
// semantics for resourceVersion, generation, conflicts, generateName, selectors, paging and watch.
// Used by `dralens demo` and by tests. Writes are validated with the resource.k8s.io rules and
// rejected with proper metav1.Status bodies.
//
// Thread-safe. Start() returns once the port is bound and the accept loop runs.
//
// Semantics worth knowing, and where this server is knowingly less than the real one:
//  - resourceVersion is one global counter; a no-op update keeps the object's resourceVersion.
//  - PUT without metadata.resourceVersion is an unconditional update (as for the real built-in
//    types); PUT on a missing object is 404 except for leases, which it creates.
//  - Watches with selectors see events filtered by object state like the watch cache: an object
//    that stops matching arrives as DELETED, one that starts matching as ADDED.
//  - A resourceVersion newer than the server's (e.g. after a restart) answers 504 Timeout
//    "Too large resource version" (an ERROR event on watches), so clients relist.
//  - Namespaces are not required to exist; there is no garbage collection, no admission, and
//    pods are deleted at once (no kubelet-driven graceful deletion).
//  - Patches: application/merge-patch+json and application/json-patch+json only (strategic
//    merge and server-side apply answer 415).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "src/common/clock.h"

namespace dralens::sim {

// A fault the server injects into matching requests, for tests of client convergence.
struct FaultRule {
  enum class Kind {
    kStatus,           // answer with HTTP `code` and a metav1.Status body (e.g. 500, 503, 409)
    kTooManyRequests,  // answer 429 with `Retry-After: retry_after_seconds`
    kDropWatch,     // a matching watch is accepted, then closed after its first event (or at once)
    kGone,          // a matching watch gets an ERROR event with a 410 Expired Status
    kSlow,          // the response is delayed by `delay`
    kTruncateBody,  // the response body is cut in the middle (mid-object for watch streams)
  };
  Kind kind = Kind::kStatus;
  // "" matches any; else get|list|watch|create|update|patch|delete|deletecollection.
  std::string verb;
  // "" matches any resource request (never discovery or health endpoints); else a plural
  // resource name, e.g. "resourceslices" (which also matches its status subresource), or
  // "resourceclaims/status" for the subresource only. kDropWatch and kGone match watches only.
  std::string resource;
  int times = 1;                // how many matching requests it affects; -1 until ClearFaults()
  int code = 503;               // kStatus
  int retry_after_seconds = 1;  // kTooManyRequests
  absl::Duration delay = absl::ZeroDuration();  // kSlow
};

struct ApiServerOptions {
  std::string address = "127.0.0.1";
  int port = 0;  // 0 picks a free port
  // What /version reports; the minor version decides the 1.34 vs 1.35 slice rules.
  std::string git_version = "v1.34.0";
  // Watch events kept per resource for resuming watches; older resourceVersions get 410 Gone.
  size_t watch_history = 10000;
  // How often open watches that asked for bookmarks receive one.
  absl::Duration bookmark_interval = absl::Seconds(1);
  // Time source for creationTimestamp/deletionTimestamp; nullptr means the real clock. Watch
  // timeouts, bookmarks and kSlow delays always use real time (they pace sockets).
  common::Clock* clock = nullptr;
  // Worker threads serving connections; every open watch holds one.
  int threads = 128;
  // The DRAResourceClaimDeviceStatus feature gate (on by default since 1.33). Off, writes of
  // ResourceClaim status.devices are dropped without an error, as the real server's
  // dropDisabledFields does, unless the stored claim already has some.
  bool resource_claim_device_status = true;
  // Alpha APIs served only when their feature gate is named here, as on kube-apiserver:
  // "GenericWorkload" serves scheduling.k8s.io/v1alpha1 Workloads (gangs, Kubernetes 1.35).
  std::set<std::string> feature_gates = {};
};

class ApiServer {
 public:
  explicit ApiServer(ApiServerOptions options = {});
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds and starts serving on a background thread.
  absl::Status Start();
  // Closes every watch and stops serving. Idempotent.
  void Stop();

  int port() const;
  // "http://127.0.0.1:PORT"
  std::string url() const;

  void InjectFault(FaultRule rule);
  void ClearFaults();
  // Closes every open watch stream now; clients must resume from their last resourceVersion.
  void DropWatches();
  // Forgets the watch history: a watch from any earlier resourceVersion gets 410 Gone.
  void CompactHistory();

  // The newest resourceVersion handed out (the global counter), for tests.
  uint64_t ResourceVersionForTest() const;
  // How many watch streams are open right now, for tests.
  int OpenWatchesForTest() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dralens::sim
