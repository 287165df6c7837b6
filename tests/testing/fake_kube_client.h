// FakeKubeClient: an in-memory KubeClient for unit tests, following the API server's semantics
// where the code under test depends on them:
//   - create: a name (or generateName), AlreadyExists on a taken name; uid, resourceVersion,
//     creationTimestamp and (for ResourceClaims) generation are set; the status of a type with
//     a status subresource is dropped, as the real server does;
//   - update: NotFound, Conflict on a stale resourceVersion or another uid; the "status"
//     subresource changes only .status, the main resource everything but .status; a write
//     that changes nothing keeps its resourceVersion;
//   - merge patch (RFC 7386), delete with preconditions, delete collection;
//   - list (label selectors of the form k=v[,k=v]) and watch (from "" with synthetic ADDED
//     events, or from a resourceVersion; Gone when that version is older than the history);
//   - errors carry the HTTP codes of KubeClient's error mapping.
// Faults: FailNext makes the next matching calls fail with a given status;
// SetDropClaimDeviceStatus makes ResourceClaim status writes drop status.devices, as a server
// with the DRAResourceClaimDeviceStatus feature gate off does.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "src/k8s/client.h"

namespace dralens::testing {

class FakeKubeClient final : public k8s::KubeClient {
 public:
  FakeKubeClient() = default;

  // KubeClient
  absl::StatusOr<nlohmann::json> Get(const k8s::ResourceType& type, absl::string_view ns,
                                     absl::string_view name) override;
  absl::StatusOr<k8s::ListResult> List(const k8s::ResourceType& type, absl::string_view ns,
                                       const k8s::ListOptions& options) override;
  absl::Status Watch(const k8s::ResourceType& type, absl::string_view ns,
                     const k8s::WatchOptions& options, const k8s::WatchEventCallback& callback,
                     k8s::WatchCancel* cancel) override;
  absl::StatusOr<nlohmann::json> Create(const k8s::ResourceType& type, absl::string_view ns,
                                        const nlohmann::json& object) override;
  absl::StatusOr<nlohmann::json> Update(const k8s::ResourceType& type, absl::string_view ns,
                                        const nlohmann::json& object,
                                        absl::string_view subresource) override;
  absl::StatusOr<nlohmann::json> MergePatch(const k8s::ResourceType& type, absl::string_view ns,
                                            absl::string_view name, const nlohmann::json& patch,
                                            absl::string_view subresource) override;
  absl::Status Delete(const k8s::ResourceType& type, absl::string_view ns, absl::string_view name,
                      const k8s::DeleteOptions& options) override;
  absl::Status DeleteCollection(const k8s::ResourceType& type, absl::string_view ns,
                                const k8s::ListOptions& options) override;

  // The next `times` calls of `verb` (get, list, watch, create, update, patch, delete,
  // deletecollection) on `resource` (a plural, or "<plural>/status" for the subresource only)
  // fail with `status` instead of running.
  void FailNext(const std::string& verb, const std::string& resource, absl::Status status,
                int times = 1);
  void SetDropClaimDeviceStatus(bool drop);
  // How many calls of `verb` on `resource` ("<plural>" counts the main resource and its
  // subresources, "<plural>/status" only the subresource) were made, faults included.
  int Calls(const std::string& verb, const std::string& resource) const;

 private:
  using Key = std::tuple<std::string, std::string, std::string>;  // plural, ns, name
  struct Event {
    uint64_t rv;
    std::string plural;
    std::string ns;
    k8s::WatchEventType type;
    nlohmann::json object;
  };
  struct Fault {
    std::string verb;
    std::string resource;
    absl::Status status;
    int times;
  };

  // Counts the call and returns the injected fault, if any.
  absl::Status Enter(const std::string& verb, const k8s::ResourceType& type,
                     absl::string_view subresource) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Emit(const std::string& plural, const std::string& ns, k8s::WatchEventType type,
            const nlohmann::json& object) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<nlohmann::json> WriteLocked(const k8s::ResourceType& type, const std::string& ns,
                                             nlohmann::json next, absl::string_view subresource)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<Key, nlohmann::json> objects_ ABSL_GUARDED_BY(mu_);
  uint64_t rv_ ABSL_GUARDED_BY(mu_) = 100;
  uint64_t uids_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
  std::vector<Fault> faults_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> calls_ ABSL_GUARDED_BY(mu_);  // "verb resource"
  bool drop_claim_device_status_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dralens::testing
