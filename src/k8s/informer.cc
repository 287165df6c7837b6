#include "src/k8s/informer.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/log.h"
#include "src/common/thread_name.h"

namespace dralens::k8s {
namespace {

constexpr absl::string_view kComponent = "informer";
// Consecutive watches that end at once without an event before the informer relists.
constexpr int kShortWatchesBeforeRelist = 3;

std::string ResourceVersionOf(const nlohmann::json& object) {
  if (!object.is_object()) {
    return "";
  }
  auto metadata = object.find("metadata");
  if (metadata == object.end() || !metadata->is_object()) {
    return "";
  }
  auto rv = metadata->find("resourceVersion");
  if (rv == metadata->end() || !rv->is_string()) {
    return "";
  }
  return rv->get<std::string>();
}

// resourceVersions are opaque, but every server dralens talks to (etcd-backed or embedded) uses
// increasing integers. A watch event older than what we have seen means the server lost its
// history (e.g. restarted with fresh storage); only a relist can be trusted then.
bool WentBackwards(const std::string& last, const std::string& next) {
  uint64_t a = 0;
  uint64_t b = 0;
  if (last.empty() || next.empty() || !absl::SimpleAtoi(last, &a) || !absl::SimpleAtoi(next, &b)) {
    return false;
  }
  return b < a;
}

// What a hash-only informer compares to tell a changed object from an unchanged one: its uid and
// resourceVersion, hashed. The API server changes the version on every write to the object, and
// the uid tells a re-created object apart even where a server that lost its storage hands out
// the same versions again. Equal pairs mean equal objects without walking the tree, which cost
// about a sixth of what parsing and decoding a 4.8 kB pod does. An object without a version
// falls back to its content.
uint64_t VersionHash(const nlohmann::json& object) {
  if (object.is_object()) {
    auto metadata = object.find("metadata");
    if (metadata != object.end() && metadata->is_object()) {
      auto rv = metadata->find("resourceVersion");
      if (rv != metadata->end() && rv->is_string() && !rv->get_ref<const std::string&>().empty()) {
        auto uid = metadata->find("uid");
        absl::string_view uid_text;
        if (uid != metadata->end() && uid->is_string()) {
          uid_text = uid->get_ref<const std::string&>();
        }
        return absl::HashOf(uid_text, absl::string_view(rv->get_ref<const std::string&>()));
      }
    }
  }
  return std::hash<nlohmann::json>{}(object);
}

}  // namespace

Informer::Informer(KubeClient& client, ResourceType type, InformerOptions options)
    : client_(client),
      type_(std::move(type)),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : common::RealClock()) {}

Informer::~Informer() { Stop(); }

void Informer::SetHandlers(InformerHandlers handlers) { handlers_ = std::move(handlers); }

void Informer::Start() {
  if (thread_ != nullptr) {
    return;
  }
  if (options_.metrics != nullptr) {
    options_.metrics->InitWatchRestarts(type_.plural);
  }
  thread_ = std::make_unique<std::thread>([this] {
    common::NameThisThread(absl::StrCat("w:", type_.plural));
    Run();
    absl::MutexLock lock(&mu_);
    done_ = true;
  });
}

void Informer::Stop() {
  stopping_.store(true);
  if (thread_ == nullptr) {
    return;
  }
  // Cancel repeatedly: a cancel that lands while a new watch is still connecting cannot abort
  // its socket yet, so keep trying until the thread has left.
  while (true) {
    cancel_.Cancel();
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&done_), absl::Milliseconds(20))) {
      break;
    }
  }
  if (thread_->joinable()) {
    thread_->join();
  }
}

bool Informer::WaitForSync(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!HasSynced() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  return HasSynced();
}

Informer::ObjectPtr Informer::Get(absl::string_view ns, absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = cache_.find(ObjectKey(ns, name));
  return it == cache_.end() ? nullptr : it->second;
}

std::vector<Informer::ObjectPtr> Informer::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<ObjectPtr> out;
  out.reserve(cache_.size());
  for (const auto& [key, object] : cache_) {
    out.push_back(object);
  }
  return out;
}

size_t Informer::Size() const {
  absl::MutexLock lock(&mu_);
  return options_.keep_objects ? cache_.size() : hashes_.size();
}

std::string Informer::LastResourceVersion() const {
  absl::MutexLock lock(&mu_);
  return resource_version_;
}

void Informer::ApplyHashed(const WatchEvent& event, const std::string& key, const std::string& rv) {
  const bool deleted = event.type == WatchEventType::kDeleted;
  const uint64_t version = deleted ? 0 : VersionHash(event.object);
  bool known = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = hashes_.find(key);
    known = it != hashes_.end();
    if (deleted) {
      if (known) {
        hashes_.erase(it);
      }
    } else if (known) {
      it->second.version = version;
    } else {
      hashes_.emplace(key, Seen{version, list_generation_});
    }
    resource_version_ = rv;
  }
  if (deleted) {
    if (known && handlers_.on_delete) {
      handlers_.on_delete(event.object);
    }
  } else if (known) {
    if (handlers_.on_update) {
      handlers_.on_update(nlohmann::json(), event.object);
    }
  } else if (handlers_.on_add) {
    handlers_.on_add(event.object);
  }
}

std::optional<absl::Time> Informer::StaleSince() const {
  absl::MutexLock lock(&mu_);
  return stale_since_;
}

void Informer::MarkStale() {
  absl::MutexLock lock(&mu_);
  if (!stale_since_.has_value()) {
    stale_since_ = clock_.Now();
  }
}

void Informer::MarkInStep() {
  absl::MutexLock lock(&mu_);
  stale_since_.reset();
}

void Informer::CountRestart(WatchRestartReason reason) {
  if (options_.metrics != nullptr) {
    options_.metrics->RecordWatchRestart(type_.plural, reason);
  }
}

absl::Duration Informer::Backoff() {
  absl::Duration d = options_.initial_backoff;
  for (int i = 1; i < failures_ && d < options_.max_backoff; ++i) {
    d *= 2;
  }
  d = std::min(d, options_.max_backoff);
  absl::BitGen gen;
  return d / 2 + absl::Uniform(gen, 0.0, 1.0) * (d / 2);
}

void Informer::SleepUnlessStopped(absl::Duration d) {
  // Sleep in slices so that Stop() is not held up by a long backoff.
  while (d > absl::ZeroDuration() && !stopping()) {
    const absl::Duration step = std::min(d, absl::Milliseconds(20));
    clock_.SleepFor(step);
    d -= step;
  }
}

void Informer::Run() {
  bool need_list = true;
  while (!stopping()) {
    if (need_list) {
      absl::Status listed = ListAndReconcile();
      ReleaseProjectionBuffers();  // a LIST page's parse buffers are megabytes
      if (!listed.ok()) {
        if (stopping()) {
          break;
        }
        MarkStale();
        ++failures_;
        absl::Duration delay = RetryAfter(listed).value_or(Backoff());
        DLOG(kWarn, kComponent, "list failed; backing off",
             {{"resource", type_.plural},
              {"error", listed.message()},
              {"delay", absl::FormatDuration(delay)}});
        SleepUnlessStopped(delay);
        continue;
      }
      MarkInStep();
      failures_ = 0;
      need_list = false;
    }
    absl::Duration delay = absl::ZeroDuration();
    need_list = WatchOnce(&delay) == Next::kRelist;
    SleepUnlessStopped(delay);
  }
}

ListOptions Informer::PagedListOptions() const {
  ListOptions list_options;
  list_options.label_selector = options_.label_selector;
  list_options.field_selector = options_.field_selector;
  list_options.limit = options_.page_size;
  list_options.projection = options_.projection;
  return list_options;
}

absl::Status Informer::ListAndReconcile() {
  if (!options_.keep_objects) {
    return ListPageByPage();
  }
  absl::StatusOr<ListResult> list =
      ListAll(client_, type_, options_.namespace_name, PagedListOptions());
  list_count_.fetch_add(1);
  if (!list.ok()) {
    return list.status();
  }
  absl::flat_hash_map<std::string, ObjectPtr> fresh;
  fresh.reserve(list->items.size());
  for (nlohmann::json& item : list->items) {
    std::string key = ObjectKey(item);
    if (key.empty()) {
      DLOG(kWarn, kComponent, "listed object without a name; skipped",
           {{"resource", type_.plural}});
      continue;
    }
    fresh[key] = std::make_shared<const nlohmann::json>(std::move(item));
  }

  std::vector<ObjectPtr> added;
  std::vector<std::pair<ObjectPtr, ObjectPtr>> updated;
  std::vector<ObjectPtr> deleted;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, old_object] : cache_) {
      if (!fresh.contains(key)) {
        deleted.push_back(old_object);
      }
    }
    for (const auto& [key, new_object] : fresh) {
      auto it = cache_.find(key);
      if (it == cache_.end()) {
        added.push_back(new_object);
      } else if (*it->second != *new_object) {
        updated.emplace_back(it->second, new_object);
      }
    }
    cache_ = std::move(fresh);
    resource_version_ = list->resource_version;
  }
  // Handlers run after the whole cache was swapped, so they see a consistent snapshot.
  for (const ObjectPtr& object : deleted) {
    if (handlers_.on_delete) {
      handlers_.on_delete(*object);
    }
  }
  for (const auto& [old_object, new_object] : updated) {
    if (handlers_.on_update) {
      handlers_.on_update(*old_object, *new_object);
    }
  }
  for (const ObjectPtr& object : added) {
    if (handlers_.on_add) {
      handlers_.on_add(*object);
    }
  }
  if (list_count_.load() > 1) {
    DLOG(kInfo, kComponent, "relisted",
         {{"resource", type_.plural},
          {"added", added.size()},
          {"updated", updated.size()},
          {"deleted", deleted.size()}});
  }
  synced_.store(true);
  return absl::OkStatus();
}

absl::Status Informer::ListPageByPage() {
  // Each entry remembers the list that last saw it, so what this list did not return is found
  // without a second set of every key.
  uint32_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    generation = ++list_generation_;
  }
  int64_t added = 0;
  int64_t updated = 0;
  absl::StatusOr<std::string> version =
      ListPaged(client_, type_, options_.namespace_name, PagedListOptions(),
                [&](std::vector<nlohmann::json>& items, bool) {
                  for (const nlohmann::json& item : items) {
                    std::string key = ObjectKey(item);
                    if (key.empty()) {
                      DLOG(kWarn, kComponent, "listed object without a name; skipped",
                           {{"resource", type_.plural}});
                      continue;
                    }
                    const uint64_t item_version = VersionHash(item);
                    bool is_new = false;
                    bool changed = false;
                    {
                      absl::MutexLock lock(&mu_);
                      auto [it, inserted] =
                          hashes_.try_emplace(std::move(key), Seen{item_version, generation});
                      is_new = inserted;
                      changed = !inserted && it->second.version != item_version;
                      it->second = Seen{item_version, generation};
                    }
                    if (is_new && handlers_.on_add) {
                      ++added;
                      handlers_.on_add(item);
                    } else if (changed && handlers_.on_update) {
                      ++updated;
                      handlers_.on_update(nlohmann::json(), item);
                    }
                  }
                  items.clear();  // this page's trees go now, not at the end of the list
                });
  list_count_.fetch_add(1);
  if (!version.ok()) {
    // The cache holds what the handlers were told; the next list finishes the job.
    return version.status();
  }
  std::vector<std::string> vanished;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = hashes_.begin(); it != hashes_.end();) {
      if (it->second.generation != generation) {
        vanished.push_back(it->first);
        hashes_.erase(it++);
      } else {
        ++it;
      }
    }
    resource_version_ = *std::move(version);
  }
  for (const std::string& key : vanished) {
    if (handlers_.on_delete) {
      const size_t slash = key.find('/');
      nlohmann::json metadata = {
          {"name", slash == std::string::npos ? key : key.substr(slash + 1)}};
      if (slash != std::string::npos) {
        metadata["namespace"] = key.substr(0, slash);
      }
      handlers_.on_delete(nlohmann::json{{"metadata", std::move(metadata)}});
    }
  }
  if (list_count_.load() > 1) {
    DLOG(kInfo, kComponent, "relisted",
         {{"resource", type_.plural},
          {"added", added},
          {"updated", updated},
          {"deleted", vanished.size()}});
  }
  synced_.store(true);
  return absl::OkStatus();
}

Informer::Next Informer::WatchOnce(absl::Duration* delay) {
  WatchOptions watch_options;
  watch_options.label_selector = options_.label_selector;
  watch_options.field_selector = options_.field_selector;
  watch_options.resource_version = LastResourceVersion();
  watch_options.allow_bookmarks = true;
  watch_options.on_established = [this] { MarkInStep(); };
  watch_options.projection = options_.projection;
  if (options_.watch_timeout_seconds > 0) {
    absl::BitGen gen;
    watch_options.timeout_seconds =
        absl::Uniform(gen, options_.watch_timeout_seconds, 2 * options_.watch_timeout_seconds);
  }

  bool malformed = false;
  bool went_backwards = false;
  int64_t events = 0;
  const WatchEventCallback callback = [&](const WatchEvent& event) {
    const std::string rv = ResourceVersionOf(event.object);
    if (WentBackwards(LastResourceVersion(), rv)) {
      went_backwards = true;
      return false;
    }
    ++events;
    if (event.type == WatchEventType::kBookmark) {
      if (!rv.empty()) {
        absl::MutexLock lock(&mu_);
        resource_version_ = rv;
      }
      return !stopping();
    }
    std::string key = ObjectKey(event.object);
    if (key.empty() || rv.empty()) {
      malformed = true;
      return false;
    }
    if (!options_.keep_objects) {
      ApplyHashed(event, key, rv);
      return !stopping();
    }
    auto object = std::make_shared<const nlohmann::json>(event.object);
    ObjectPtr old_object;
    {
      absl::MutexLock lock(&mu_);
      auto it = cache_.find(key);
      if (it != cache_.end()) {
        old_object = it->second;
      }
      if (event.type == WatchEventType::kDeleted) {
        if (it != cache_.end()) {
          cache_.erase(it);
        }
      } else {
        cache_[key] = object;
      }
      resource_version_ = rv;
    }
    if (event.type == WatchEventType::kDeleted) {
      if (old_object != nullptr && handlers_.on_delete) {
        handlers_.on_delete(*object);
      }
    } else if (old_object != nullptr) {
      if (handlers_.on_update) {
        handlers_.on_update(*old_object, *object);
      }
    } else if (handlers_.on_add) {
      handlers_.on_add(*object);
    }
    return !stopping();
  };

  const absl::Time started = absl::Now();
  const absl::Status status =
      client_.Watch(type_, options_.namespace_name, watch_options, callback, &cancel_);
  if (stopping()) {
    return Next::kResume;
  }
  const std::vector<common::LogField> fields = {
      {"resource", type_.plural}, {"error", status.message()}, {"events", events}};
  if (went_backwards) {
    MarkStale();
    CountRestart(WatchRestartReason::kError);
    DLOG(kWarn, kComponent, "resourceVersion went backwards; relisting", fields);
    return Next::kRelist;
  }
  if (malformed) {
    MarkStale();
    CountRestart(WatchRestartReason::kError);
    ++failures_;
    *delay = Backoff();
    DLOG(kWarn, kComponent, "malformed watch event; restarting watch", fields);
    return Next::kResume;
  }
  if (status.ok()) {
    CountRestart(WatchRestartReason::kDropped);
    if (events == 0 && absl::Now() - started < options_.min_watch_duration) {
      // The server keeps closing at once: do not hammer it, and after a few such watches stop
      // relying on them to catch up: a list brings the cache up to date regardless.
      ++failures_;
      *delay = Backoff();
      if (++short_empty_watches_ >= kShortWatchesBeforeRelist) {
        short_empty_watches_ = 0;
        DLOG(kWarn, kComponent, "watches keep closing at once; relisting", fields);
        return Next::kRelist;
      }
    } else {
      failures_ = 0;
      short_empty_watches_ = 0;
    }
    return Next::kResume;
  }
  // Anything below is a failed watch: the cache lags until a list or an accepted watch.
  MarkStale();
  if (IsGone(status)) {
    CountRestart(WatchRestartReason::kGone);
    DLOG(kInfo, kComponent, "watch expired (410 Gone); relisting", fields);
    failures_ = 0;
    return Next::kRelist;
  }
  CountRestart(WatchRestartReason::kError);
  ++failures_;
  *delay = RetryAfter(status).value_or(Backoff());
  *delay = std::min(*delay, absl::Minutes(5));
  if (absl::IsDataLoss(status)) {
    // Truncated or malformed stream: events up to the last good one were applied.
    DLOG(kWarn, kComponent, "watch stream corrupted; restarting watch", fields);
    return Next::kResume;
  }
  if (absl::StrContains(status.message(), "Too large resource version")) {
    // We are ahead of the server: it lost state (restart, restore). Relist, as client-go does.
    DLOG(kWarn, kComponent, "resourceVersion unknown to the server; relisting", fields);
    return Next::kRelist;
  }
  const int code = HttpStatusCode(status);
  if (code == 429 || code >= 500) {
    DLOG(kWarn, kComponent, "watch refused by the server; backing off", fields);
    return Next::kResume;
  }
  // A transport failure (the server may have restarted and lost its history) or a 4xx answer
  // such as "too large resource version": only a relist is safe.
  DLOG(kWarn, kComponent, "watch failed; relisting", fields);
  return Next::kRelist;
}

}  // namespace dralens::k8s
