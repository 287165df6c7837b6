// Informer: a list+watch cache of one resource type, keyed by "<namespace>/<name>".
//
// Lists (paged), then watches from the list's resourceVersion with bookmarks. The loop:
//   - stream ended (server timeout, dropped connection): resume from the last seen
//     resourceVersion (a very short watch without events backs off first, and after three in a
//     row the informer relists instead);
//   - 410 Gone (HTTP or ERROR event), a transport failure, a non-retryable error answer, or a
//     resourceVersion that goes backwards (the API server restarted with fresh storage): relist
//     and reconcile the cache, synthesising OnDelete for vanished objects, OnUpdate for changed
//     ones and OnAdd for new ones. The relist always wins over what was cached;
//   - 429 / 5xx: back off (exponential with jitter, or the server's Retry-After) and resume;
//   - a truncated or malformed event: the event is dropped, the watch restarts from the last good
//     resourceVersion. The cache is never left half-updated.
// Every restart is counted in dralens_kube_watch_restarts_total{resource,reason}.
//
// Handlers run on the informer's thread, in event order, after the cache was updated and
// without any informer lock held (they may call Get/List). Set them before Start().
// Get/List/HasSynced are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "src/common/clock.h"
#include "src/k8s/client.h"
#include "src/k8s/request_metrics.h"

namespace dralens::k8s {

struct InformerOptions {
  std::string namespace_name;  // "" : all namespaces (or a cluster-scoped type)
  std::string label_selector;
  std::string field_selector;
  int64_t page_size = 500;
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(30);
  // Server-side watch timeout, randomised in [t, 2t) per watch as client-go does.
  int watch_timeout_seconds = 300;
  // A watch that ends sooner than this without delivering an event counts as a failure (backs
  // off) rather than a normal expiry.
  absl::Duration min_watch_duration = absl::Seconds(1);
  // Clock for backoff sleeps; nullptr means the real clock. Not owned.
  common::Clock* clock = nullptr;
  // Restart counters; nullptr disables them. Not owned.
  const KubeRequestMetrics* metrics = nullptr;
  // True: the cache keeps every object, and Get/List serve them. False: it keeps each object's
  // key and a hash of its resourceVersion only (about 60 bytes an object instead of about eight
  // times its JSON), for consumers that hold their own compact state; a relist tells the
  // handlers about an object only when its resourceVersion changed. Then Get() returns nullptr,
  // List() nothing, on_update's old_object is null, and a list hands each page to the handlers
  // as it arrives, so that no more than a page of objects is ever held; objects that vanished
  // are deleted after the last page, with a stub that holds only metadata.name and namespace.
  bool keep_objects = true;
  // Null: objects whole. Else lists and watches parse only what the projection names (plus
  // whatever a client hands back beyond it), and handlers and the cache see those objects. It
  // must keep metadata.name, namespace, uid and resourceVersion, which the informer reads.
  std::shared_ptr<const Projection> projection;
};

struct InformerHandlers {
  std::function<void(const nlohmann::json& object)> on_add;
  std::function<void(const nlohmann::json& old_object, const nlohmann::json& new_object)> on_update;
  std::function<void(const nlohmann::json& object)> on_delete;
};

class Informer {
 public:
  using ObjectPtr = std::shared_ptr<const nlohmann::json>;

  // `client` must outlive the informer.
  Informer(KubeClient& client, ResourceType type, InformerOptions options = {});
  ~Informer();  // Stop()
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  // Before Start() only.
  void SetHandlers(InformerHandlers handlers);

  // Starts the list+watch thread. Call once.
  void Start();
  // Ends the watch and joins the thread; no handler runs after it returns. May wait for an
  // in-flight list request to finish. Idempotent. Not from a handler.
  void Stop();

  // True once the first list has been applied and its handlers have run.
  bool HasSynced() const { return synced_.load(); }
  // Waits (real time) until HasSynced() or `timeout`; returns HasSynced().
  bool WaitForSync(absl::Duration timeout);

  // The cached object, or nullptr (always, without keep_objects). `ns` is "" for
  // cluster-scoped types.
  ObjectPtr Get(absl::string_view ns, absl::string_view name) const;
  // A snapshot of every cached object (unordered; empty without keep_objects).
  std::vector<ObjectPtr> List() const;
  size_t Size() const;
  // Since when the cache may lag the server: set by the first failed list or watch (an error
  // answer, a transport failure, 410 Gone, a malformed stream), cleared by a list that succeeds
  // or a watch the server accepts. nullopt while in step (and before the first failure).
  std::optional<absl::Time> StaleSince() const;
  // The resourceVersion the next watch resumes from.
  std::string LastResourceVersion() const;
  // How many times the informer listed (1 after the initial list).
  int64_t ListCountForTest() const { return list_count_.load(); }

 private:
  enum class Next { kResume, kRelist };

  void Run();
  ListOptions PagedListOptions() const;
  absl::Status ListAndReconcile();
  // ListAndReconcile without keep_objects: page by page, against the hashes.
  absl::Status ListPageByPage();
  // A watch event without keep_objects: the hash moves, the handlers get the event's object.
  void ApplyHashed(const WatchEvent& event, const std::string& key, const std::string& rv);
  // One watch; decides how to continue and how long to wait first.
  Next WatchOnce(absl::Duration* delay);
  absl::Duration Backoff();
  void SleepUnlessStopped(absl::Duration d);
  bool stopping() const { return stopping_.load(); }
  void CountRestart(WatchRestartReason reason);
  void MarkStale();
  void MarkInStep();

  KubeClient& client_;
  const ResourceType type_;
  const InformerOptions options_;
  common::Clock& clock_;
  InformerHandlers handlers_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, ObjectPtr> cache_ ABSL_GUARDED_BY(mu_);
  // Without keep_objects: key -> the hash of the object's resourceVersion (of its content when it
  // has none), and the number of the list that last returned it.
  struct Seen {
    uint64_t version = 0;
    uint32_t generation = 0;
  };
  absl::flat_hash_map<std::string, Seen> hashes_ ABSL_GUARDED_BY(mu_);
  uint32_t list_generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::string resource_version_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Time> stale_since_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;

  std::atomic<bool> synced_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> list_count_{0};
  int failures_ = 0;             // informer thread only
  int short_empty_watches_ = 0;  // informer thread only
  WatchCancel cancel_;
  std::unique_ptr<std::thread> thread_;
};
using InformerPtr = std::unique_ptr<Informer>;

}  // namespace dralens::k8s
