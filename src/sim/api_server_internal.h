// The embedded API server's insides, shared by the files that implement it (private to
// src/sim/api_server*.cc; the public face is api_server.h):
//   api_server.cc          start and stop, discovery, routing a request to its verb
//   api_server_reads.cc    get and list, with selectors, paging and resourceVersion semantics
//   api_server_writes.cc   create, update, patch, delete and deletecollection
//   api_server_watch.cc    watch streams, bookmarks and the faults injected into them
//   api_server_errors.cc   metav1.Status failures, as the real server words them
//   api_server_objects.cc  object metadata, selector matching, generated names and uids, merge
//                          patch, and stored objects as their client sees them
//   api_server_sockets.cc  finding the accepted sockets cpp-httplib does not expose
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "src/sim/api_server.h"
#include "src/sim/resources.h"
#include "src/sim/selectors.h"
#include "src/sim/validation.h"

namespace dralens::sim::apiserver {

using nlohmann::json;
using ObjPtr = std::shared_ptr<const json>;

inline constexpr char kJson[] = "application/json";
inline constexpr char kMergePatch[] = "application/merge-patch+json";
inline constexpr char kJsonPatch[] = "application/json-patch+json";
inline constexpr size_t kMaxRequestBody = 3 * 1024 * 1024;  // kube-apiserver's default limit
inline constexpr int kGenerateNameAttempts = 8;
// Real servers time watches out after 30-60 min when the client gives no timeoutSeconds.
inline constexpr absl::Duration kDefaultWatchTimeout = absl::Minutes(30);
// How often an idle watch wakes to check for stop, drops, bookmarks and a vanished client.
inline constexpr absl::Duration kWatchPoll = absl::Milliseconds(50);

// ---------- errors (api_server_errors.cc) ----------

// A metav1.Status failure and its HTTP code.
struct ApiError {
  int code = 500;
  std::string reason;
  std::string message;
  json details;  // null when absent
};

json StatusJson(const ApiError& e);
// metav1.StatusDetails for `name` of `info` (its kind rather than its resource when asked).
json Details(const ResourceInfo& info, const std::string& name, bool kind_not_resource = false);
ApiError NotFound(const ResourceInfo& info, const std::string& name);
ApiError AlreadyExists(const ResourceInfo& info, const std::string& name);
ApiError Conflict(const ResourceInfo& info, const std::string& name, const std::string& why);
ApiError BadRequest(const std::string& message);
ApiError Expired(const std::string& message);
ApiError TooLargeResourceVersion(uint64_t want, uint64_t have);
ApiError GenericNotFound();
// 422 Invalid, or 400 when a field has the wrong JSON type (the real server cannot decode it).
ApiError InvalidError(const ResourceInfo& info, const std::string& name, const FieldErrors& errs);
std::string ReasonForCode(int code);

// ---------- objects (api_server_objects.cc) ----------

// The media type of a Content-Type header, lower case and without parameters.
std::string MediaType(const std::string& content_type);
// metadata.<key> when it is a string, else "".
std::string MetaString(const json& obj, const char* key);
std::string ObjectKey(const ResourceInfo& info, const std::string& ns, const std::string& name);
std::map<std::string, std::string> Labels(const json& obj);
// The value of a dotted field path as a field selector sees it ("" when absent).
std::string FieldValue(const json& obj, const std::string& path);
// generateName's five random characters.
std::string RandomSuffix(absl::BitGen& gen);
// A random (version 4) UUID.
std::string NewUid(absl::BitGen& gen);
// RFC 7386 JSON merge patch.
json MergePatch(const json& target, const json& patch);
// An object (or a list, or a Status) as the client of `info` sees it: stored objects of a
// resource with a second face are converted (src/sim/resources.h).
json ClientView(const ResourceInfo& info, const json& stored);

// ---------- sockets (api_server_sockets.cc) ----------

// Shuts down every connection accepted on `port` (idle keep-alive ones included).
void ShutdownAcceptedSockets(int port);
// The accepted socket on `port` whose peer is peer_ip:peer_port, or -1.
int FindAcceptedSocket(int port, const std::string& peer_ip, int peer_port);
// True when the peer has closed its side (EOF or error) of a connection we only write to.
bool PeerClosed(int fd);

// ---------- store ----------

enum class EventType { kAdded, kModified, kDeleted };

struct Event {
  uint64_t rv = 0;
  EventType type = EventType::kAdded;
  ObjPtr obj;   // the object after the change (for DELETED: its last state at the delete's RV)
  ObjPtr prev;  // the object before the change; null for ADDED
};

struct ResourceStore {
  std::map<std::string, ObjPtr> objects;  // ordered by key, as etcd lists them
  std::deque<Event> history;
  uint64_t compacted_rv = 0;  // watches and snapshots need rv >= this
};

// What a list or watch selects.
struct Filter {
  std::string ns;  // "" for all namespaces
  LabelSelector labels;
  FieldSelector fields;
  const ResourceInfo* info = nullptr;

  bool Matches(const json& stored) const;
  bool HasSelectors() const { return !labels.Empty() || !fields.Empty(); }
};

// One open watch stream.
struct WatchState {
  Filter filter;
  uint64_t cursor = 0;     // every event of the resource with rv <= cursor has been handled
  uint64_t synced_rv = 0;  // the global RV up to which this stream is complete
  std::deque<std::string> pending;  // lines ready to write
  absl::Time deadline;
  bool bookmarks = false;
  absl::Time next_bookmark;
  uint64_t drop_generation = 0;
  int fd = -1;
  bool finish_after_pending = false;
  // Faults.
  bool drop_after_first = false;
  bool truncate_first = false;
};

// Parsed request target.
struct Target {
  const ResourceInfo* info = nullptr;
  std::string ns;
  std::string name;
  std::string subresource;
  bool collection() const { return name.empty(); }
};

inline bool IsTrue(const httplib::Request& req, const char* key) {
  std::string v = req.get_param_value(key);
  return v == "1" || v == "true";
}

}  // namespace dralens::sim::apiserver

namespace dralens::sim {

// The implementation's names, for the files that implement ApiServer::Impl.
using apiserver::AlreadyExists;
using apiserver::ApiError;
using apiserver::BadRequest;
using apiserver::ClientView;
using apiserver::Conflict;
using apiserver::Details;
using apiserver::Event;
using apiserver::EventType;
using apiserver::Expired;
using apiserver::FieldValue;
using apiserver::Filter;
using apiserver::FindAcceptedSocket;
using apiserver::GenericNotFound;
using apiserver::InvalidError;
using apiserver::IsTrue;
using apiserver::json;
using apiserver::kDefaultWatchTimeout;
using apiserver::kGenerateNameAttempts;
using apiserver::kJson;
using apiserver::kJsonPatch;
using apiserver::kMaxRequestBody;
using apiserver::kMergePatch;
using apiserver::kWatchPoll;
using apiserver::Labels;
using apiserver::MediaType;
using apiserver::MergePatch;
using apiserver::MetaString;
using apiserver::NewUid;
using apiserver::NotFound;
using apiserver::ObjectKey;
using apiserver::ObjPtr;
using apiserver::PeerClosed;
using apiserver::RandomSuffix;
using apiserver::ReasonForCode;
using apiserver::ResourceStore;
using apiserver::ShutdownAcceptedSockets;
using apiserver::StatusJson;
using apiserver::Target;
using apiserver::TooLargeResourceVersion;
using apiserver::WatchState;

class ApiServer::Impl {
 public:
  explicit Impl(ApiServerOptions options) : options_(std::move(options)) {
    clock_ = options_.clock != nullptr ? options_.clock : &common::RealClock();
    ParseVersion();
    absl::MutexLock l(&mu_);
    for (const ResourceInfo& r : AllResources()) {
      stores_[r.plural];  // every resource exists from the start, so compaction covers it
    }
  }
  ~Impl() { Stop(); }

  absl::Status Start();
  void Stop();
  int port() const { return port_; }
  const std::string& address() const { return options_.address; }

  void InjectFault(FaultRule rule) {
    absl::MutexLock l(&fault_mu_);
    faults_.push_back(std::move(rule));
  }
  void ClearFaults() {
    absl::MutexLock l(&fault_mu_);
    faults_.clear();
  }
  void DropWatches() {
    absl::MutexLock l(&mu_);
    ++drop_generation_;
    cv_.SignalAll();
  }
  void CompactHistory() {
    absl::MutexLock l(&mu_);
    for (auto& [name, rs] : stores_) {
      rs.history.clear();
      rs.compacted_rv = rv_;
    }
    cv_.SignalAll();
  }
  uint64_t ResourceVersion() const {
    absl::MutexLock l(&mu_);
    return rv_;
  }
  int OpenWatches() const { return open_watches_.load(); }

 private:
  void ParseVersion() {
    std::string v(absl::StripPrefix(options_.git_version, "v"));
    std::vector<std::string> parts = absl::StrSplit(v, absl::MaxSplits('.', 2));
    major_ = parts.empty() ? "1" : parts[0];
    minor_ = parts.size() > 1 ? parts[1] : "0";
    if (!absl::SimpleAtoi(minor_, &minor_number_)) {
      minor_number_ = 34;
    }
  }

  // Whether `r` is served: no feature gate, or its gate is on.
  bool Served(const ResourceInfo& r) const {
    return r.feature_gate.empty() || options_.feature_gates.count(r.feature_gate) > 0;
  }
  void Handle(const httplib::Request& req, httplib::Response& res);
  bool HandleNonResource(const httplib::Request& req, httplib::Response& res);
  std::optional<ApiError> ParseTarget(const std::string& path, Target* target);
  std::optional<FaultRule> TakeFault(const std::string& verb, const Target& target, bool watch);
  void ApplyFaultBeforeHandling(const FaultRule& fault, httplib::Response& res, bool* handled);
  void Truncate(httplib::Response& res);

  // Verbs. Each returns the response object or an error.
  using Result = std::pair<int, json>;
  std::optional<ApiError> Get(const Target& t, const httplib::Request& req, Result* out);
  std::optional<ApiError> List(const Target& t, const httplib::Request& req, Result* out);
  std::optional<ApiError> Create(const Target& t, const json& body, Result* out);
  std::optional<ApiError> CreateLocked(const Target& t, const json& body, Result* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<ApiError> Update(const Target& t, const json& body, Result* out);
  std::optional<ApiError> Patch(const Target& t, const httplib::Request& req, Result* out);
  std::optional<ApiError> Delete(const Target& t, const httplib::Request& req, Result* out);
  std::optional<ApiError> DeleteCollection(const Target& t, const httplib::Request& req,
                                           Result* out);
  void Watch(const Target& t, const httplib::Request& req, httplib::Response& res,
             const std::optional<FaultRule>& fault);

  std::optional<ApiError> ParseFilter(const Target& t, const httplib::Request& req, Filter* f);
  std::optional<ApiError> ParseBody(const ResourceInfo& info, const std::string& body, json* out);
  std::optional<ApiError> UpdateLocked(const Target& t, json body, Result* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes (or starts deleting) the object at `key`; `last_state` receives the object as it
  // was at the delete (or as it now is, when finalizers keep it).
  std::optional<ApiError> DeleteLocked(const ResourceInfo& info, const std::string& key,
                                       const json& options, Result* out, json* last_state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The objects of `info` as of `rv` (which must be >= the store's compacted_rv).
  std::map<std::string, ObjPtr> SnapshotLocked(const ResourceInfo& info, uint64_t rv)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EmitLocked(const ResourceInfo& info, EventType type, ObjPtr obj, ObjPtr prev)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool WatchStep(WatchState& w, httplib::DataSink& sink);
  std::string EventLine(const char* type, const json& obj) const;
  std::optional<std::string> FilterEvent(const WatchState& w, const ResourceInfo& info,
                                         const Event& ev) const;
  void SleepInterruptibly(absl::Duration d);

  ApiServerOptions options_;
  common::Clock* clock_;
  std::string major_;
  std::string minor_;
  int minor_number_ = 34;
  int port_ = 0;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> listener_done_{false};
  bool started_ = false;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  uint64_t rv_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, ResourceStore> stores_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t drop_generation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::BitGen gen_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> open_watches_{0};

  absl::Mutex fault_mu_;
  std::vector<FaultRule> faults_ ABSL_GUARDED_BY(fault_mu_);
};

}  // namespace dralens::sim
