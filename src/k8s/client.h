// KubeClient: the Kubernetes API verbs dralens uses, on raw JSON objects.
//
// Error mapping (every implementation follows it; the server's Status message is kept):
//   404 -> NotFound            409 AlreadyExists -> AlreadyExists   409 Conflict -> Aborted
//   410 -> OutOfRange (IsGone) 400/422 -> InvalidArgument           401 -> Unauthenticated
//   403 -> PermissionDenied    429 -> ResourceExhausted             5xx -> Unavailable
//   transport failure or a truncated/malformed body -> Unavailable  timeout -> DeadlineExceeded
// Statuses from HTTP answers carry the code (HttpStatusCode) and any Retry-After (RetryAfter).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "src/k8s/projection.h"

namespace dralens::k8s {

// Identifies one REST resource: /apis/<group>/<version>/[namespaces/<ns>/]<plural>.
struct ResourceType {
  std::string group;  // "" for the core group (/api/v1)
  std::string version;
  std::string plural;
  std::string kind;
  bool namespaced = false;

  // "resource.k8s.io/v1", or "v1" for the core group.
  std::string ApiVersion() const;
};

inline const ResourceType kResourceSlices{"resource.k8s.io", "v1", "resourceslices",
                                          "ResourceSlice", false};
inline const ResourceType kResourceClaims{"resource.k8s.io", "v1", "resourceclaims",
                                          "ResourceClaim", true};
inline const ResourceType kDeviceClasses{"resource.k8s.io", "v1", "deviceclasses", "DeviceClass",
                                         false};
inline const ResourceType kPods{"", "v1", "pods", "Pod", true};
inline const ResourceType kNodes{"", "v1", "nodes", "Node", false};
inline const ResourceType kNamespaces{"", "v1", "namespaces", "Namespace", false};
inline const ResourceType kLeases{"coordination.k8s.io", "v1", "leases", "Lease", true};
inline const ResourceType kEvents{"events.k8s.io", "v1", "events", "Event", true};
// Kubernetes 1.35, feature gate GenericWorkload: gangs (exporter/cluster/gangs.h).
inline const ResourceType kWorkloads{"scheduling.k8s.io", "v1alpha1", "workloads", "Workload",
                                     true};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  int64_t limit = 0;  // 0: no paging
  std::string continue_token;
  std::string resource_version;  // "" : most recent (consistent read)
  // Null: items whole. Else each item keeps at least what the projection names (projection.h);
  // a client may hand back more.
  std::shared_ptr<const Projection> projection;
};

struct ListResult {
  std::vector<nlohmann::json> items;
  std::string resource_version;  // metadata.resourceVersion of the list
  std::string continue_token;    // metadata.continue; empty on the last page
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // start after this version; "" : from now (synthetic ADDs)
  bool allow_bookmarks = true;
  int timeout_seconds = 0;  // server-side timeout; 0: server default
  // Client-side read timeout on the stream; zero derives one from timeout_seconds.
  absl::Duration read_timeout = absl::ZeroDuration();
  // Called once the server accepted the watch (HTTP 200), before any event; may be empty.
  std::function<void()> on_established;
  // As ListOptions::projection, for each event's object (ERROR events keep their whole Status).
  std::shared_ptr<const Projection> projection;
};

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark };
absl::string_view ToString(WatchEventType type);

struct WatchEvent {
  WatchEventType type;
  nlohmann::json object;
};

// Called once per event, in order, on the watching thread. Return false to end the watch.
using WatchEventCallback = std::function<bool(const WatchEvent&)>;

// WatchCancel: lets another thread end a blocking Watch() call. Thread-safe.
class WatchCancel {
 public:
  // Ends the watch (now or as soon as it starts). Idempotent. Does not wait.
  void Cancel();
  bool cancelled() const { return cancelled_.load(); }

  // For implementations: `abort` is called by Cancel() (and at once if already cancelled) to
  // break a blocking read; cleared with nullptr before the watch returns.
  void SetAbort(std::function<void()> abort);

 private:
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;
  std::function<void()> abort_ ABSL_GUARDED_BY(mu_);
};

struct DeleteOptions {
  std::string precondition_uid;
  std::string precondition_resource_version;
  std::optional<int64_t> grace_period_seconds;
  std::string propagation_policy;  // "", "Orphan", "Background", "Foreground"
};

// The API verbs. Implementations are thread-safe; each Watch uses its own connection.
class KubeClient {
 public:
  virtual ~KubeClient() = default;

  // `ns` is ignored (must be empty) for cluster-scoped types.
  virtual absl::StatusOr<nlohmann::json> Get(const ResourceType& type, absl::string_view ns,
                                             absl::string_view name) = 0;
  // One page. `ns` empty lists across all namespaces.
  virtual absl::StatusOr<ListResult> List(const ResourceType& type, absl::string_view ns,
                                          const ListOptions& options) = 0;
  // Blocks while the stream is open. Returns OK when the server ended the stream cleanly, the
  // callback returned false or `cancel` fired; a Gone status (IsGone) on HTTP 410 or an ERROR
  // event with code 410; other errors as mapped above (DataLoss for a truncated or malformed
  // event). ERROR events are never passed to the callback.
  virtual absl::Status Watch(const ResourceType& type, absl::string_view ns,
                             const WatchOptions& options, const WatchEventCallback& callback,
                             WatchCancel* cancel) = 0;
  // POST. With metadata.generateName and no name the server picks the name. Returns the stored
  // object. Never retried blindly (only when the server says it did not process it: 429, or 5xx
  // with Retry-After).
  virtual absl::StatusOr<nlohmann::json> Create(const ResourceType& type, absl::string_view ns,
                                                const nlohmann::json& object) = 0;
  // PUT of `object` (metadata.name and, for optimistic concurrency, metadata.resourceVersion).
  // `subresource` is "" or e.g. "status".
  virtual absl::StatusOr<nlohmann::json> Update(const ResourceType& type, absl::string_view ns,
                                                const nlohmann::json& object,
                                                absl::string_view subresource) = 0;
  // PATCH with application/merge-patch+json.
  virtual absl::StatusOr<nlohmann::json> MergePatch(const ResourceType& type, absl::string_view ns,
                                                    absl::string_view name,
                                                    const nlohmann::json& patch,
                                                    absl::string_view subresource) = 0;
  virtual absl::Status Delete(const ResourceType& type, absl::string_view ns,
                              absl::string_view name, const DeleteOptions& options) = 0;
  // Deletes every object matching the selectors in `options`.
  virtual absl::Status DeleteCollection(const ResourceType& type, absl::string_view ns,
                                        const ListOptions& options) = 0;
};
using KubeClientPtr = std::unique_ptr<KubeClient>;
using KubeClientSharedPtr = std::shared_ptr<KubeClient>;

// Lists page by page (options.limit per page; 0 means 500), handing each page's items to
// `on_page` as it arrives (it may move them away); `first` is true for the first page. If a
// continue token expires (410) the list restarts once without paging: `on_page` then gets
// `first` again, with every object, the ones it saw before included. Returns the list's
// resourceVersion.
using PageCallback = std::function<void(std::vector<nlohmann::json>& items, bool first)>;
absl::StatusOr<std::string> ListPaged(KubeClient& client, const ResourceType& type,
                                      absl::string_view ns, ListOptions options,
                                      const PageCallback& on_page);

// Every page of a list at once (ListPaged, collected).
absl::StatusOr<ListResult> ListAll(KubeClient& client, const ResourceType& type,
                                   absl::string_view ns, ListOptions options);

// GET, apply `mutate` to the object, PUT (to `subresource`, e.g. "status", when not empty);
// on 409 Conflict re-GET and retry, up to `max_attempts` PUTs. `mutate` may return a non-OK
// status to abort (returned as is). Returns the stored object.
absl::StatusOr<nlohmann::json> UpdateWithRetry(
    KubeClient& client, const ResourceType& type, absl::string_view ns, absl::string_view name,
    const std::function<absl::Status(nlohmann::json&)>& mutate, int max_attempts = 5,
    absl::string_view subresource = "");

// WatchStream: a Watch running on its own thread; Stop() ends it and waits for the thread.
class WatchStream {
 public:
  WatchStream(KubeClient& client, const ResourceType& type, std::string ns, WatchOptions options,
              WatchEventCallback callback);
  ~WatchStream();
  WatchStream(const WatchStream&) = delete;
  WatchStream& operator=(const WatchStream&) = delete;

  // Ends the watch and joins its thread. No callback runs after it returns. Must not be called
  // from the callback (return false there instead).
  void Stop();
  // Blocks until the watch ends on its own (or is stopped) and returns its status.
  absl::Status Wait();

 private:
  WatchCancel cancel_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status result_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<std::thread> thread_;
};

// Error predicates over the mapping above. Call them qualified (k8s::IsNotFound): absl's
// same-named IsNotFound/IsAlreadyExists are found by argument-dependent lookup and would make an
// unqualified call ambiguous (they are equivalent).
bool IsNotFound(const absl::Status& status);
bool IsAlreadyExists(const absl::Status& status);
bool IsConflict(const absl::Status& status);  // 409 Conflict (not AlreadyExists)
bool IsGone(const absl::Status& status);      // 410, including watch ERROR events
// The HTTP status code behind `status`, or 0 when it did not come from an HTTP answer.
int HttpStatusCode(const absl::Status& status);
// The server's Retry-After, if the answer carried one.
std::optional<absl::Duration> RetryAfter(const absl::Status& status);

// Builds the status for an HTTP answer: `code`, the metav1.Status `body` (its message is used
// when present) and the Retry-After header value ("" if absent).
absl::Status StatusFromHttp(int code, absl::string_view body, absl::string_view retry_after,
                            absl::string_view context);
// Builds the status for a metav1.Status object (e.g. from a watch ERROR event).
absl::Status StatusFromApiStatus(const nlohmann::json& status, absl::string_view context);

// "<ns>/<name>" or "<name>" for cluster-scoped objects: the informer cache key.
std::string ObjectKey(const nlohmann::json& object);
std::string ObjectKey(absl::string_view ns, absl::string_view name);

}  // namespace dralens::k8s
