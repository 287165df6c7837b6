#include "src/sim/api_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "src/common/log.h"
#include "src/sim/resources.h"
#include "src/sim/selectors.h"
#include "src/sim/tables.h"
#include "src/sim/validation.h"

namespace dralens::sim {
namespace {

using nlohmann::json;
using ObjPtr = std::shared_ptr<const json>;

constexpr char kJson[] = "application/json";
constexpr char kMergePatch[] = "application/merge-patch+json";
constexpr char kJsonPatch[] = "application/json-patch+json";
constexpr size_t kMaxRequestBody = 3 * 1024 * 1024;  // kube-apiserver's default limit
constexpr int kGenerateNameAttempts = 8;
// Real servers time watches out after 30-60 min when the client gives no timeoutSeconds.
constexpr absl::Duration kDefaultWatchTimeout = absl::Minutes(30);
// How often an idle watch wakes to check for stop, drops, bookmarks and a vanished client.
constexpr absl::Duration kWatchPoll = absl::Milliseconds(50);

// ---------- errors ----------

// A metav1.Status failure and its HTTP code.
struct ApiError {
  int code = 500;
  std::string reason;
  std::string message;
  json details;  // null when absent
};

json StatusJson(const ApiError& e) {
  json s = {{"kind", "Status"},    {"apiVersion", "v1"},   {"metadata", json::object()},
            {"status", "Failure"}, {"message", e.message}, {"reason", e.reason},
            {"code", e.code}};
  if (!e.details.is_null()) {
    s["details"] = e.details;
  }
  return s;
}

json Details(const ResourceInfo& info, const std::string& name, bool kind_not_resource = false) {
  json d = json::object();
  if (!name.empty()) {
    d["name"] = name;
  }
  if (!info.group.empty()) {
    d["group"] = info.group;
  }
  d["kind"] = kind_not_resource ? info.kind : info.plural;
  return d;
}

ApiError NotFound(const ResourceInfo& info, const std::string& name) {
  return {404, "NotFound", absl::StrCat(info.QualifiedResource(), " \"", name, "\" not found"),
          Details(info, name)};
}
ApiError AlreadyExists(const ResourceInfo& info, const std::string& name) {
  return {409, "AlreadyExists",
          absl::StrCat(info.QualifiedResource(), " \"", name, "\" already exists"),
          Details(info, name)};
}
ApiError Conflict(const ResourceInfo& info, const std::string& name, const std::string& why) {
  return {409, "Conflict",
          absl::StrCat("Operation cannot be fulfilled on ", info.QualifiedResource(), " \"", name,
                       "\": ", why),
          Details(info, name)};
}
ApiError BadRequest(const std::string& message) { return {400, "BadRequest", message, nullptr}; }
ApiError Expired(const std::string& message) { return {410, "Expired", message, nullptr}; }
ApiError TooLargeResourceVersion(uint64_t want, uint64_t have) {
  json details = {{"causes", json::array({{{"reason", "ResourceVersionTooLarge"},
                                           {"message", "Too large resource version"}}})},
                  {"retryAfterSeconds", 1}};
  return {504, "Timeout",
          absl::StrCat("Timeout: Too large resource version: ", want, ", current: ", have),
          details};
}
ApiError GenericNotFound() {
  return {404, "NotFound", "the server could not find the requested resource", json::object()};
}

ApiError InvalidError(const ResourceInfo& info, const std::string& name, const FieldErrors& errs) {
  bool type_errors = false;
  std::vector<std::string> parts;
  json causes = json::array();
  for (const FieldError& fe : errs) {
    type_errors = type_errors || fe.type == FieldError::Type::kTypeInvalid;
    parts.push_back(fe.ToString());
    causes.push_back({{"reason", fe.Reason()}, {"message", fe.message}, {"field", fe.field}});
  }
  std::string joined =
      parts.size() == 1 ? parts[0] : absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
  json details = Details(info, name, /*kind_not_resource=*/true);
  details["causes"] = causes;
  if (type_errors) {
    // The real server cannot even decode such a body: 400, naming the kind it expected.
    return {400, "BadRequest",
            absl::StrCat(info.kind, " in version \"", info.version, "\" cannot be handled as a ",
                         info.kind, ": ", joined),
            details};
  }
  return {422, "Invalid",
          absl::StrCat(info.QualifiedKind(), " \"", name, "\" is invalid: ", joined), details};
}

std::string ReasonForCode(int code) {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return code >= 500 ? "InternalError" : "BadRequest";
  }
}

// ---------- small helpers ----------

std::string MediaType(const std::string& content_type) {
  std::string t(absl::StripAsciiWhitespace(content_type.substr(0, content_type.find(';'))));
  absl::AsciiStrToLower(&t);
  return t;
}

std::string MetaString(const json& obj, const char* key) {
  if (!obj.is_object() || !obj.contains("metadata") || !obj["metadata"].is_object()) {
    return "";
  }
  const json& md = obj["metadata"];
  auto it = md.find(key);
  return it != md.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string ObjectKey(const ResourceInfo& info, const std::string& ns, const std::string& name) {
  return info.namespaced ? ns + "/" + name : name;
}

std::map<std::string, std::string> Labels(const json& obj) {
  std::map<std::string, std::string> out;
  if (obj.contains("metadata") && obj["metadata"].is_object() &&
      obj["metadata"].contains("labels") && obj["metadata"]["labels"].is_object()) {
    for (auto it = obj["metadata"]["labels"].begin(); it != obj["metadata"]["labels"].end(); ++it) {
      if (it->is_string()) {
        out[it.key()] = it->get<std::string>();
      }
    }
  }
  return out;
}

// The value of a dotted field path as a field selector sees it ("" when absent).
std::string FieldValue(const json& obj, const std::string& path) {
  const json* cur = &obj;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    if (!cur->is_object()) {
      return "";
    }
    auto it = cur->find(std::string(part));
    if (it == cur->end()) {
      return "";
    }
    cur = &*it;
  }
  if (cur->is_string()) {
    return cur->get<std::string>();
  }
  if (cur->is_boolean()) {
    return cur->get<bool>() ? "true" : "false";
  }
  if (cur->is_number()) {
    return cur->dump();
  }
  return "";
}

std::string RandomSuffix(absl::BitGen& gen) {
  // The alphabet of k8s.io/apimachinery/pkg/util/rand: no vowels, no confusable digits.
  static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  std::string s;
  for (int i = 0; i < 5; ++i) {
    s.push_back(kAlphabet[absl::Uniform<size_t>(gen, 0, sizeof(kAlphabet) - 1)]);
  }
  return s;
}

std::string NewUid(absl::BitGen& gen) {
  uint64_t hi = absl::Uniform<uint64_t>(gen);
  uint64_t lo = absl::Uniform<uint64_t>(gen);
  hi = (hi & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;  // version 4
  lo = (lo & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // RFC 4122 variant
  return absl::StrFormat("%08x-%04x-%04x-%04x-%012x", hi >> 32, (hi >> 16) & 0xffff, hi & 0xffff,
                         lo >> 48, lo & 0xffffffffffffULL);
}

// RFC 7386 JSON merge patch.
json MergePatch(const json& target, const json& patch) {
  if (!patch.is_object()) {
    return patch;
  }
  json result = target.is_object() ? target : json::object();
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    if (it->is_null()) {
      result.erase(it.key());
    } else {
      result[it.key()] = MergePatch(result.contains(it.key()) ? result[it.key()] : json(), *it);
    }
  }
  return result;
}

// ---------- sockets ----------
//
// cpp-httplib 0.11 does not expose connection sockets. Stop() must close idle keep-alive
// connections at once (their threads would otherwise wait out the keep-alive timeout) and
// watches must notice a client that went away, so we find our accepted sockets by their local
// port in /proc/self/fd. Linux-only, like the rest of the driver.

int LocalPort(int fd, sockaddr_storage* peer) {
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    return -1;
  }
  int port = -1;
  if (local.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  } else if (local.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
  } else {
    return -1;
  }
  int listening = 0;
  socklen_t optlen = sizeof(listening);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &optlen) != 0 || listening != 0) {
    return -1;
  }
  if (peer != nullptr) {
    socklen_t plen = sizeof(*peer);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(peer), &plen) != 0) {
      return -1;
    }
  }
  return port;
}

std::vector<int> ProcessFds() {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) {
    return fds;
  }
  int self = dirfd(dir);
  while (dirent* ent = readdir(dir)) {
    int fd = 0;
    if (absl::SimpleAtoi(ent->d_name, &fd) && fd != self) {
      fds.push_back(fd);
    }
  }
  closedir(dir);
  return fds;
}

void ShutdownAcceptedSockets(int port) {
  for (int fd : ProcessFds()) {
    if (LocalPort(fd, nullptr) == port) {
      shutdown(fd, SHUT_RDWR);
    }
  }
}

int FindAcceptedSocket(int port, const std::string& peer_ip, int peer_port) {
  for (int fd : ProcessFds()) {
    sockaddr_storage peer{};
    if (LocalPort(fd, &peer) != port) {
      continue;
    }
    char buf[INET6_ADDRSTRLEN] = {};
    int pport = -1;
    if (peer.ss_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(&peer);
      inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
      pport = ntohs(in->sin_port);
    } else {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&peer);
      inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
      pport = ntohs(in6->sin6_port);
    }
    if (pport == peer_port && peer_ip == buf) {
      return fd;
    }
  }
  return -1;
}

// True when the peer has closed its side (EOF or error) of a connection we only write to.
bool PeerClosed(int fd) {
  if (fd < 0) {
    return false;
  }
  char c = 0;
  ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) {
    return true;
  }
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

// ---------- store ----------

enum class EventType { kAdded, kModified, kDeleted };

struct Event {
  uint64_t rv = 0;
  EventType type = EventType::kAdded;
  ObjPtr obj;   // the object after the change (for DELETED: its last state at the delete's RV)
  ObjPtr prev;  // the object before the change; null for ADDED
};

// An object (or a list, or a Status) as the client of `info` sees it: stored objects of a
// resource with a second face are converted (src/sim/resources.h).
json ClientView(const ResourceInfo& info, const json& stored) {
  if (info.from_storage == nullptr || !stored.is_object()) {
    return stored;
  }
  const std::string kind = stored.value("kind", std::string());
  if (kind == "Status") {
    return stored;
  }
  if (kind == info.ListKind() && stored.contains("items")) {
    json list = stored;
    for (json& item : list["items"]) {
      item = info.from_storage(item);
      item.erase("kind");
      item.erase("apiVersion");
    }
    return list;
  }
  return info.from_storage(stored);
}

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

  bool Matches(const json& stored) const {
    const json converted =
        info != nullptr && info->from_storage != nullptr ? info->from_storage(stored) : json();
    const json& obj = converted.is_null() ? stored : converted;
    if (!ns.empty() && MetaString(obj, "namespace") != ns) {
      return false;
    }
    if (!labels.Empty() && !labels.Matches(Labels(obj))) {
      return false;
    }
    if (!fields.Empty()) {
      std::map<std::string, std::string> values = {
          {"metadata.name", MetaString(obj, "name")},
          {"metadata.namespace", MetaString(obj, "namespace")}};
      for (const std::string& f : info->field_labels) {
        values[f] = FieldValue(obj, f);
      }
      if (!fields.Matches(values)) {
        return false;
      }
    }
    return true;
  }
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

bool IsTrue(const httplib::Request& req, const char* key) {
  std::string v = req.get_param_value(key);
  return v == "1" || v == "true";
}

}  // namespace

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

// ---------- lifecycle ----------

absl::Status ApiServer::Impl::Start() {
  if (started_) {
    return absl::FailedPreconditionError("ApiServer already started");
  }
  server_ = std::make_unique<httplib::Server>();
  int threads = std::max(8, options_.threads);
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(kMaxRequestBody);
  server_->set_keep_alive_max_count(1000);
  // Responses go out as a header write and a body write; without TCP_NODELAY the body waits
  // for the client's delayed ACK (about 40 ms on Linux loopback) on every request.
  server_->set_tcp_nodelay(true);
  // Compressed chunks would sit in zlib's buffer: watch events must go out as they happen, so
  // responses are never compressed (the request's Accept-Encoding is dropped before routing).
  server_->set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
    auto& mutable_req = const_cast<httplib::Request&>(req);
    mutable_req.headers.erase("Accept-Encoding");
    return httplib::Server::HandlerResponse::Unhandled;
  });
  auto handler = [this](const httplib::Request& req, httplib::Response& res) { Handle(req, res); };
  server_->Get(".*", handler);
  server_->Post(".*", handler);
  server_->Put(".*", handler);
  server_->Patch(".*", handler);
  server_->Delete(".*", handler);
  server_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        ApiError err{500, "InternalError", "Internal error occurred: " + what, nullptr};
        res.status = 500;
        res.set_content(StatusJson(err).dump(), kJson);
      });

  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.address);
    if (port_ < 0) {
      return absl::UnavailableError(absl::StrCat("bind ", options_.address, ":0 failed"));
    }
  } else {
    if (!server_->bind_to_port(options_.address, options_.port)) {
      return absl::UnavailableError(
          absl::StrCat("bind ", options_.address, ":", options_.port, " failed"));
    }
    port_ = options_.port;
  }
  listener_done_ = false;
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    listener_done_ = true;
  });
  // httplib's stop() is a no-op until the accept loop runs, so wait for it.
  while (!server_->is_running() && !listener_done_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  started_ = true;
  DLOG(kDebug, "sim", "api server started",
       {{"url", absl::StrCat("http://", options_.address, ":", port_)},
        {"version", options_.git_version}});
  return absl::OkStatus();
}

void ApiServer::Impl::Stop() {
  if (!started_) {
    return;
  }
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  server_->stop();
  // Idle keep-alive connections and in-flight watches hold pool threads: cut them now so the
  // accept loop's pool shuts down at once and the port is free for the next server.
  while (!listener_done_) {
    ShutdownAcceptedSockets(port_);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  thread_.join();
  server_.reset();
  started_ = false;
  DLOG(kDebug, "sim", "api server stopped", {{"port", port_}});
}

void ApiServer::Impl::SleepInterruptibly(absl::Duration d) {
  absl::Time until = absl::Now() + d;
  absl::MutexLock l(&mu_);
  while (!stopping_ && absl::Now() < until) {
    cv_.WaitWithDeadline(&mu_, until);
  }
}

// ---------- routing ----------

bool ApiServer::Impl::HandleNonResource(const httplib::Request& req, httplib::Response& res) {
  const std::string& path = req.path;
  if (path == "/healthz" || path == "/readyz" || path == "/livez") {
    res.set_content("ok", "text/plain; charset=utf-8");
    return true;
  }
  if (req.method != "GET") {
    return false;
  }
  json body;
  if (path == "/version") {
    body = {{"major", major_},
            {"minor", minor_},
            {"gitVersion", options_.git_version},
            {"gitCommit", "0000000000000000000000000000000000000000"},
            {"gitTreeState", "clean"},
            {"buildDate", "2025-01-01T00:00:00Z"},
            {"goVersion", "go1.24.0"},
            {"compiler", "gc"},
            {"platform", "linux/amd64"}};
  } else if (path == "/api") {
    body = {{"kind", "APIVersions"},
            {"versions", {"v1"}},
            {"serverAddressByClientCIDRs",
             {{{"clientCIDR", "0.0.0.0/0"},
               {"serverAddress", absl::StrCat(options_.address, ":", port_)}}}}};
  } else if (path == "/apis" ||
             (absl::StartsWith(path, "/apis/") && std::count(path.begin(), path.end(), '/') == 2)) {
    json groups = json::array();
    std::vector<std::string> seen;
    for (const ResourceInfo& r : AllResources()) {
      if (r.group.empty() || !Served(r) ||
          std::find(seen.begin(), seen.end(), r.group) != seen.end()) {
        continue;
      }
      seen.push_back(r.group);
      json gv = {{"groupVersion", r.ApiVersion()}, {"version", r.version}};
      groups.push_back({{"name", r.group}, {"versions", {gv}}, {"preferredVersion", gv}});
    }
    if (path == "/apis") {
      body = {{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", groups}};
    } else {
      std::string group = path.substr(6);
      for (json& g : groups) {
        if (g["name"] == group) {
          body = g;
          body["kind"] = "APIGroup";
          body["apiVersion"] = "v1";
        }
      }
      if (body.is_null()) {
        return false;
      }
    }
  } else {
    std::string group_version;
    if (path == "/api/v1") {
      group_version = "v1";
    } else if (absl::StartsWith(path, "/apis/") && std::count(path.begin(), path.end(), '/') == 3) {
      group_version = path.substr(6);
    } else {
      return false;
    }
    json resources = json::array();
    for (const ResourceInfo& r : AllResources()) {
      if (r.ApiVersion() != group_version || !Served(r)) {
        continue;
      }
      json entry = {
          {"name", r.plural},
          {"singularName", r.singular},
          {"namespaced", r.namespaced},
          {"kind", r.kind},
          {"verbs",
           {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}}};
      if (!r.short_names.empty()) {
        entry["shortNames"] = r.short_names;
      }
      if (!r.categories.empty()) {
        entry["categories"] = r.categories;
      }
      resources.push_back(entry);
      if (r.has_status) {
        resources.push_back({{"name", r.plural + "/status"},
                             {"singularName", ""},
                             {"namespaced", r.namespaced},
                             {"kind", r.kind},
                             {"verbs", {"get", "patch", "update"}}});
      }
    }
    if (resources.empty()) {
      return false;
    }
    body = {{"kind", "APIResourceList"},
            {"apiVersion", "v1"},
            {"groupVersion", group_version},
            {"resources", resources}};
  }
  // Plain application/json: clients asking for aggregated discovery or other renderings fall
  // back to these documents.
  res.set_content(body.dump(), kJson);
  return true;
}

std::optional<ApiError> ApiServer::Impl::ParseTarget(const std::string& path, Target* t) {
  std::vector<std::string> seg = absl::StrSplit(path, '/', absl::SkipEmpty());
  size_t i = 0;
  std::string group;
  std::string version;
  if (seg.size() >= 2 && seg[0] == "api") {
    version = seg[1];
    i = 2;
  } else if (seg.size() >= 3 && seg[0] == "apis") {
    group = seg[1];
    version = seg[2];
    i = 3;
  } else {
    return GenericNotFound();
  }
  std::vector<std::string> rest(seg.begin() + static_cast<long>(i), seg.end());
  // namespaces/{ns}/{resource}[/{name}[/{sub}]] unless the resource is namespaces itself.
  auto find = [this](const std::string& g, const std::string& v,
                     const std::string& plural) -> const ResourceInfo* {
    const ResourceInfo* info = FindResource(g, v, plural);
    return info != nullptr && Served(*info) ? info : nullptr;
  };
  const ResourceInfo* nested =
      rest.size() >= 3 && rest[0] == "namespaces" ? find(group, version, rest[2]) : nullptr;
  if (nested != nullptr && nested->namespaced) {
    const ResourceInfo* info = nested;
    if (rest.size() > 5) {
      return GenericNotFound();
    }
    t->info = info;
    t->ns = rest[1];
    t->name = rest.size() > 3 ? rest[3] : "";
    t->subresource = rest.size() > 4 ? rest[4] : "";
  } else if (!rest.empty()) {
    const ResourceInfo* info = find(group, version, rest[0]);
    if (info == nullptr || rest.size() > 3) {
      return GenericNotFound();
    }
    if (info->namespaced && rest.size() > 1) {
      return GenericNotFound();  // a namespaced object needs its namespace in the path
    }
    t->info = info;
    t->name = rest.size() > 1 ? rest[1] : "";
    t->subresource = rest.size() > 2 ? rest[2] : "";
  } else {
    return GenericNotFound();
  }
  if (!t->subresource.empty() && (t->subresource != "status" || !t->info->has_status)) {
    return GenericNotFound();
  }
  return std::nullopt;
}

std::optional<FaultRule> ApiServer::Impl::TakeFault(const std::string& verb, const Target& t,
                                                    bool watch) {
  absl::MutexLock l(&fault_mu_);
  std::string resource = t.info->plural;
  std::string with_sub = t.subresource.empty() ? resource : resource + "/" + t.subresource;
  for (auto it = faults_.begin(); it != faults_.end(); ++it) {
    FaultRule& f = *it;
    if (f.times == 0) {
      continue;
    }
    if (!f.verb.empty() && f.verb != verb) {
      continue;
    }
    if (!f.resource.empty() && f.resource != resource && f.resource != with_sub) {
      continue;
    }
    bool watch_only = f.kind == FaultRule::Kind::kDropWatch || f.kind == FaultRule::Kind::kGone;
    if (watch_only && !watch) {
      continue;
    }
    FaultRule taken = f;
    if (f.times > 0 && --f.times == 0) {
      faults_.erase(it);
    }
    return taken;
  }
  return std::nullopt;
}

void ApiServer::Impl::Truncate(httplib::Response& res) {
  auto body = std::make_shared<std::string>(std::move(res.body));
  res.body.clear();
  std::string type = res.get_header_value("Content-Type");
  res.headers.erase("Content-Type");
  res.set_content_provider(
      body->size(), type.empty() ? kJson : type, [body](size_t, size_t, httplib::DataSink& sink) {
        sink.write(body->data(), body->size() / 2);
        return false;  // abort: the client sees a short body and a closed connection
      });
}

void ApiServer::Impl::Handle(const httplib::Request& req, httplib::Response& res) {
  auto reply = [&res](int code, const json& body) {
    res.status = code;
    res.set_content(body.dump(), kJson);
  };
  auto fail = [&reply](const ApiError& e) { reply(e.code, StatusJson(e)); };
  try {
    if (!absl::StartsWith(req.path, "/api/") && !absl::StartsWith(req.path, "/apis/")) {
      if (!HandleNonResource(req, res)) {
        fail(GenericNotFound());
      }
      return;
    }
    if (HandleNonResource(req, res)) {
      return;
    }
    Target t;
    if (std::optional<ApiError> err = ParseTarget(req.path, &t)) {
      fail(*err);
      return;
    }
    const std::string& m = req.method;
    bool watch = m == "GET" && t.collection() && IsTrue(req, "watch");
    std::string verb;
    if (m == "GET") {
      verb = t.collection() ? (watch ? "watch" : "list") : "get";
    } else if (m == "POST") {
      verb = "create";
    } else if (m == "PUT") {
      verb = "update";
    } else if (m == "PATCH") {
      verb = "patch";
    } else if (m == "DELETE") {
      verb = t.collection() ? "deletecollection" : "delete";
    }
    bool allowed = (verb == "create" && t.collection() && t.subresource.empty()) ||
                   ((verb == "update" || verb == "patch") && !t.collection()) ||
                   (verb == "delete" && t.subresource.empty()) || (verb == "deletecollection") ||
                   verb == "get" || verb == "list" || verb == "watch";
    // The all-namespaces paths of namespaced resources only read.
    bool all_namespaces = t.info->namespaced && t.ns.empty();
    if (verb.empty() || !allowed || (all_namespaces && verb != "list" && verb != "watch")) {
      fail({405, "MethodNotAllowed",
            "the server does not allow this method on the requested resource", json::object()});
      return;
    }
    std::optional<FaultRule> fault = TakeFault(verb, t, watch);
    bool truncate = false;
    if (fault) {
      switch (fault->kind) {
        case FaultRule::Kind::kStatus: {
          ApiError e{fault->code, ReasonForCode(fault->code),
                     absl::StrCat("injected fault: HTTP ", fault->code), json::object()};
          fail(e);
          return;
        }
        case FaultRule::Kind::kTooManyRequests: {
          ApiError e{429,
                     "TooManyRequests",
                     "Too many requests, please try again later.",
                     {{"retryAfterSeconds", fault->retry_after_seconds}}};
          res.set_header("Retry-After", std::to_string(fault->retry_after_seconds));
          fail(e);
          return;
        }
        case FaultRule::Kind::kSlow:
          SleepInterruptibly(fault->delay);
          break;
        case FaultRule::Kind::kTruncateBody:
          truncate = !watch;
          break;
        case FaultRule::Kind::kDropWatch:
        case FaultRule::Kind::kGone:
          break;
      }
    }
    if (watch) {
      Watch(t, req, res, fault);
      return;
    }
    // Writes carry JSON (or a JSON patch) and nothing else.
    std::string media = MediaType(req.get_header_value("Content-Type"));
    if (verb == "create" || verb == "update") {
      if (media != kJson) {
        fail({415, "UnsupportedMediaType",
              absl::StrCat("the body of the request was in an unknown format - accepted media "
                           "types include: application/json"),
              json::object()});
        return;
      }
    }
    if (verb == "patch" && media != kMergePatch && media != kJsonPatch) {
      fail({415, "UnsupportedMediaType",
            absl::StrCat("the body of the request was in an unknown format - accepted media "
                         "types include: application/json-patch+json, "
                         "application/merge-patch+json"),
            json::object()});
      return;
    }
    if ((verb == "delete" || verb == "deletecollection") && !req.body.empty() && !media.empty() &&
        media != kJson) {
      fail({415, "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json",
            json::object()});
      return;
    }
    Result out;
    std::optional<ApiError> err;
    if (verb == "get") {
      err = Get(t, req, &out);
    } else if (verb == "list") {
      err = List(t, req, &out);
    } else if (verb == "create" || verb == "update") {
      json body;
      err = ParseBody(*t.info, req.body, &body);
      if (!err) {
        err = verb == "create" ? Create(t, body, &out) : Update(t, body, &out);
      }
    } else if (verb == "patch") {
      err = Patch(t, req, &out);
    } else if (verb == "delete") {
      err = Delete(t, req, &out);
    } else {
      err = DeleteCollection(t, req, &out);
    }
    if (err) {
      fail(*err);
    } else {
      json body = ClientView(*t.info, out.second);
      if (t.info->event_table && (verb == "get" || verb == "list") &&
          WantsTable(req.get_header_value("Accept"))) {
        body = EventTable(body, clock_->Now(), req.get_param_value("includeObject"));
      }
      reply(out.first, body);
    }
    if (truncate) {
      Truncate(res);
    }
  } catch (const json::exception& e) {
    fail(BadRequest(absl::StrCat("malformed request: ", e.what())));
  }
}

// ---------- reads ----------

std::optional<ApiError> ApiServer::Impl::ParseFilter(const Target& t, const httplib::Request& req,
                                                     Filter* f) {
  f->info = t.info;
  f->ns = t.info->namespaced ? t.ns : "";
  absl::StatusOr<LabelSelector> ls = LabelSelector::Parse(req.get_param_value("labelSelector"));
  if (!ls.ok()) {
    return BadRequest(std::string(ls.status().message()));
  }
  f->labels = *std::move(ls);
  absl::StatusOr<FieldSelector> fs = FieldSelector::Parse(req.get_param_value("fieldSelector"));
  if (!fs.ok()) {
    return BadRequest(std::string(fs.status().message()));
  }
  for (const FieldSelector::Term& term : fs->terms()) {
    const auto& labels = t.info->field_labels;
    if (term.field != "metadata.name" && term.field != "metadata.namespace" &&
        std::find(labels.begin(), labels.end(), term.field) == labels.end()) {
      return BadRequest(absl::StrCat("field label not supported: ", term.field));
    }
  }
  f->fields = *std::move(fs);
  return std::nullopt;
}

std::optional<ApiError> ApiServer::Impl::Get(const Target& t, const httplib::Request& req,
                                             Result* out) {
  absl::MutexLock l(&mu_);
  std::string rv_param = req.get_param_value("resourceVersion");
  uint64_t want = 0;
  if (!rv_param.empty() && rv_param != "0") {
    if (!absl::SimpleAtoi(rv_param, &want)) {
      return BadRequest(absl::StrCat("invalid resource version \"", rv_param, "\""));
    }
    if (want > rv_) {
      return TooLargeResourceVersion(want, rv_);
    }
  }
  ResourceStore& rs = stores_[t.info->plural];
  auto it = rs.objects.find(ObjectKey(*t.info, t.ns, t.name));
  if (it == rs.objects.end()) {
    return NotFound(*t.info, t.name);
  }
  *out = {200, *it->second};
  return std::nullopt;
}

std::map<std::string, ObjPtr> ApiServer::Impl::SnapshotLocked(const ResourceInfo& info,
                                                              uint64_t rv) {
  ResourceStore& rs = stores_[info.plural];
  std::map<std::string, ObjPtr> snap = rs.objects;
  for (auto it = rs.history.rbegin(); it != rs.history.rend() && it->rv > rv; ++it) {
    const json& ref = it->prev ? *it->prev : *it->obj;
    std::string key = ObjectKey(info, MetaString(ref, "namespace"), MetaString(ref, "name"));
    if (it->type == EventType::kAdded) {
      snap.erase(key);
    } else {
      snap[key] = it->prev;
    }
  }
  return snap;
}

std::optional<ApiError> ApiServer::Impl::List(const Target& t, const httplib::Request& req,
                                              Result* out) {
  Filter filter;
  if (auto err = ParseFilter(t, req, &filter)) {
    return err;
  }
  int64_t limit = 0;
  std::string limit_param = req.get_param_value("limit");
  if (!limit_param.empty() && !absl::SimpleAtoi(limit_param, &limit)) {
    return BadRequest(absl::StrCat("invalid limit \"", limit_param, "\""));
  }
  std::string rv_param = req.get_param_value("resourceVersion");
  std::string match = req.get_param_value("resourceVersionMatch");
  std::string cont = req.get_param_value("continue");
  if (!match.empty() && match != "Exact" && match != "NotOlderThan") {
    return BadRequest(absl::StrCat("resourceVersionMatch: Unsupported value: \"", match,
                                   "\": supported values: \"Exact\", \"NotOlderThan\""));
  }
  if (!match.empty() && rv_param.empty()) {
    return BadRequest("resourceVersionMatch is forbidden unless resourceVersion is provided");
  }
  if (match == "Exact" && rv_param == "0") {
    return BadRequest("resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"");
  }
  if (!cont.empty() && (!rv_param.empty() || !match.empty())) {
    return BadRequest("specifying resource version is not allowed when using continue");
  }

  absl::MutexLock l(&mu_);
  ResourceStore& rs = stores_[t.info->plural];
  uint64_t list_rv = rv_;
  std::string start_key;
  bool snapshot = false;
  if (!cont.empty()) {
    std::string decoded;
    json token;
    if (!absl::WebSafeBase64Unescape(cont, &decoded) ||
        (token = json::parse(decoded, nullptr, false)).is_discarded() || !token.is_object() ||
        token.value("v", "") != "meta.k8s.io/v1" || !token.contains("rv") ||
        !token["rv"].is_number_unsigned() || !token.contains("start") ||
        !token["start"].is_string()) {
      return BadRequest("continue key is not valid: incorrect encoded start resourceVersion");
    }
    list_rv = token["rv"].get<uint64_t>();
    start_key = token["start"].get<std::string>();
    if (list_rv < rs.compacted_rv || list_rv > rv_) {
      return Expired(
          "The provided continue parameter is too old to display a consistent list result. You "
          "can start a new list without the continue parameter, or use the continue token in "
          "this response to retrieve the remainder of the results. Continuing with the provided "
          "token results in an inconsistent list - objects that were created, modified, or "
          "deleted between the time the first chunk was returned and now may show up in the "
          "list.");
    }
    snapshot = list_rv != rv_;
  } else if (!rv_param.empty() && rv_param != "0") {
    uint64_t want = 0;
    if (!absl::SimpleAtoi(rv_param, &want)) {
      return BadRequest(absl::StrCat("invalid resource version \"", rv_param, "\""));
    }
    if (want > rv_) {
      return TooLargeResourceVersion(want, rv_);
    }
    if (match == "Exact") {
      if (want < rs.compacted_rv) {
        return Expired(
            absl::StrCat("too old resource version: ", want, " (", rs.compacted_rv, ")"));
      }
      list_rv = want;
      snapshot = want != rv_;
    }
  }
  std::map<std::string, ObjPtr> snap_storage;
  const std::map<std::string, ObjPtr>* objects = &rs.objects;
  if (snapshot) {
    snap_storage = SnapshotLocked(*t.info, list_rv);
    objects = &snap_storage;
  }
  json items = json::array();
  std::string last_key;
  bool more = false;
  int64_t remaining = 0;
  for (auto it = objects->lower_bound(start_key); it != objects->end(); ++it) {
    if (!filter.Matches(*it->second)) {
      continue;
    }
    if (limit > 0 && static_cast<int64_t>(items.size()) >= limit) {
      more = true;
      ++remaining;
      continue;
    }
    json item = *it->second;
    item.erase("kind");
    item.erase("apiVersion");
    items.push_back(std::move(item));
    last_key = it->first;
  }
  json md = {{"resourceVersion", std::to_string(list_rv)}};
  if (more) {
    json token = {{"v", "meta.k8s.io/v1"}, {"rv", list_rv}, {"start", last_key + '\0'}};
    md["continue"] = absl::WebSafeBase64Escape(token.dump());
    if (!filter.HasSelectors()) {
      md["remainingItemCount"] = remaining;
    }
  }
  *out = {200, json{{"kind", t.info->ListKind()},
                    {"apiVersion", t.info->ApiVersion()},
                    {"metadata", md},
                    {"items", items}}};
  return std::nullopt;
}

// ---------- writes ----------

std::optional<ApiError> ApiServer::Impl::ParseBody(const ResourceInfo& info,
                                                   const std::string& body, json* out) {
  json obj = json::parse(body, nullptr, false);
  if (obj.is_discarded()) {
    return BadRequest(absl::StrCat(info.kind, " in version \"", info.version,
                                   "\" cannot be handled as a ", info.kind,
                                   ": invalid JSON in request body"));
  }
  if (!obj.is_object()) {
    return BadRequest(absl::StrCat(info.kind, " in version \"", info.version,
                                   "\" cannot be handled as a ", info.kind,
                                   ": the request body must be a JSON object"));
  }
  // Missing kind/apiVersion default to the endpoint's, like the real decoder; wrong ones fail.
  if (!obj.contains("apiVersion") || obj["apiVersion"] == "") {
    obj["apiVersion"] = info.ApiVersion();
  }
  if (!obj.contains("kind") || obj["kind"] == "") {
    obj["kind"] = info.kind;
  }
  if (obj["apiVersion"] != info.ApiVersion()) {
    return BadRequest(absl::StrCat("the API version in the data (", obj["apiVersion"].dump(),
                                   ") does not match the expected API version (", info.ApiVersion(),
                                   ")"));
  }
  if (obj["kind"] != info.kind) {
    return BadRequest(absl::StrCat("the kind in the data (", obj["kind"].dump(),
                                   ") does not match the expected kind (", info.kind, ")"));
  }
  if (!obj.contains("metadata") || obj["metadata"].is_null()) {
    obj["metadata"] = json::object();
  }
  if (!obj["metadata"].is_object()) {
    return BadRequest(absl::StrCat(info.kind, " in version \"", info.version,
                                   "\" cannot be handled as a ", info.kind,
                                   ": metadata must be an object"));
  }
  for (const char* k : {"name", "generateName", "namespace", "resourceVersion", "uid"}) {
    if (obj["metadata"].contains(k) && obj["metadata"][k].is_null()) {
      obj["metadata"].erase(k);
    }
    if (obj["metadata"].contains(k) && !obj["metadata"][k].is_string()) {
      return BadRequest(absl::StrCat(info.kind, " in version \"", info.version,
                                     "\" cannot be handled as a ", info.kind, ": metadata.", k,
                                     " must be a string"));
    }
  }
  if (info.to_storage != nullptr) {
    obj = info.to_storage(obj);
  }
  *out = std::move(obj);
  return std::nullopt;
}

void ApiServer::Impl::EmitLocked(const ResourceInfo& info, EventType type, ObjPtr obj,
                                 ObjPtr prev) {
  ResourceStore& rs = stores_[info.plural];
  rs.history.push_back(Event{rv_, type, std::move(obj), std::move(prev)});
  while (rs.history.size() > std::max<size_t>(1, options_.watch_history)) {
    rs.compacted_rv = rs.history.front().rv;
    rs.history.pop_front();
  }
  cv_.SignalAll();
}

namespace {

// Server-owned metadata a client may not set.
void ClearSystemMetadata(json& md) {
  for (const char* k : {"uid", "creationTimestamp", "deletionTimestamp",
                        "deletionGracePeriodSeconds", "generation", "selfLink", "managedFields"}) {
    md.erase(k);
  }
}

void CopyIfPresent(const json& from, json& to, const char* key) {
  if (from.contains(key)) {
    to[key] = from[key];
  } else {
    to.erase(key);
  }
}

}  // namespace

std::optional<ApiError> ApiServer::Impl::Create(const Target& t, const json& body, Result* out) {
  absl::MutexLock l(&mu_);
  return CreateLocked(t, body, out);
}

std::optional<ApiError> ApiServer::Impl::CreateLocked(const Target& t, const json& body,
                                                      Result* out) {
  const ResourceInfo& info = *t.info;
  json obj = body;
  json& md = obj["metadata"];
  if (info.namespaced) {
    std::string ns = md.value("namespace", "");
    if (!ns.empty() && ns != t.ns) {
      return BadRequest(
          "the namespace of the provided object does not match the namespace sent on the "
          "request");
    }
    md["namespace"] = t.ns;
  } else {
    md.erase("namespace");
  }
  ClearSystemMetadata(md);
  md.erase("resourceVersion");
  std::string generate_name = md.value("generateName", "");
  if (generate_name.size() > 58) {
    generate_name.resize(58);  // maxGeneratedNameLength = 63 - 5
  }
  bool generated = md.value("name", "").empty() && !generate_name.empty();
  absl::Time now = clock_->Now();
  ApplyDefaults(info.object_kind, obj, now);
  if (info.has_status) {
    if (info.object_kind == ObjectKind::kPod) {
      obj["status"] = {{"phase", "Pending"}};
    } else if (info.plural == "namespaces") {
      obj["status"] = {{"phase", "Active"}};
    } else if (info.object_kind == ObjectKind::kResourceClaim) {
      obj["status"] = json::object();
    }
  }

  ResourceStore& rs = stores_[info.plural];
  for (int attempt = 0; generated && attempt < kGenerateNameAttempts; ++attempt) {
    md["name"] = generate_name + RandomSuffix(gen_);
    if (rs.objects.count(ObjectKey(info, t.ns, md["name"].get<std::string>())) == 0) {
      break;
    }
  }
  std::string name = md.value("name", "");
  ValidationOptions vopts{minor_number_, info.namespaced, info.name_is_dns_label};
  FieldErrors errs = ValidateCreate(info.object_kind, obj, vopts);
  if (!errs.empty()) {
    return InvalidError(info, name, errs);
  }
  std::string key = ObjectKey(info, t.ns, name);
  if (rs.objects.count(key) != 0) {
    return AlreadyExists(info, name);
  }
  ++rv_;
  md["uid"] = NewUid(gen_);
  md["creationTimestamp"] = FormatK8sTime(now);
  md["resourceVersion"] = std::to_string(rv_);
  if (info.tracks_generation) {
    md["generation"] = 1;
  }
  auto stored = std::make_shared<const json>(std::move(obj));
  rs.objects[key] = stored;
  EmitLocked(info, EventType::kAdded, stored, nullptr);
  *out = {201, *stored};
  return std::nullopt;
}

std::optional<ApiError> ApiServer::Impl::Update(const Target& t, const json& body, Result* out) {
  std::string name = MetaString(body, "name");
  if (name != t.name) {
    return BadRequest(absl::StrCat("the name of the object (", name,
                                   ") does not match the name on the URL (", t.name, ")"));
  }
  if (t.info->namespaced) {
    std::string ns = MetaString(body, "namespace");
    if (!ns.empty() && ns != t.ns) {
      return BadRequest(
          "the namespace of the provided object does not match the namespace sent on the "
          "request");
    }
  }
  absl::MutexLock l(&mu_);
  return UpdateLocked(t, body, out);
}

std::optional<ApiError> ApiServer::Impl::UpdateLocked(const Target& t, json body, Result* out) {
  const ResourceInfo& info = *t.info;
  ResourceStore& rs = stores_[info.plural];
  std::string key = ObjectKey(info, t.ns, t.name);
  auto it = rs.objects.find(key);
  if (it == rs.objects.end()) {
    if (info.allow_create_on_update && t.subresource.empty()) {
      return CreateLocked(t, body, out);
    }
    return NotFound(info, t.name);
  }
  ObjPtr old = it->second;
  const json& old_md = (*old)["metadata"];
  std::string body_rv = MetaString(body, "resourceVersion");
  if (!body_rv.empty() && body_rv != old_md.value("resourceVersion", "")) {
    return Conflict(info, t.name,
                    "the object has been modified; please apply your changes to the latest "
                    "version and try again");
  }
  std::string body_uid = MetaString(body, "uid");
  if (!body_uid.empty() && body_uid != old_md.value("uid", "")) {
    return Conflict(info, t.name,
                    absl::StrCat("Precondition failed: UID in precondition: ", body_uid,
                                 ", UID in object meta: ", old_md.value("uid", "")));
  }
  json next;
  bool status_write = t.subresource == "status";
  if (status_write) {
    // The status subresource takes only .status; everything else stays as stored.
    next = *old;
    if (body.contains("status") && !body["status"].is_null()) {
      next["status"] = body["status"];
    } else {
      next.erase("status");
    }
    const bool devices_in_use = old->contains("status") && (*old)["status"].is_object() &&
                                (*old)["status"].contains("devices");
    if (info.plural == "resourceclaims" && !options_.resource_claim_device_status &&
        !devices_in_use && next.contains("status") && next["status"].is_object()) {
      next["status"].erase("devices");  // the gate is off: the field is not stored
    }
  } else {
    next = std::move(body);
    json& md = next["metadata"];
    if (info.namespaced) {
      md["namespace"] = t.ns;
    }
    for (const char* k : {"uid", "creationTimestamp", "deletionTimestamp",
                          "deletionGracePeriodSeconds", "generation"}) {
      CopyIfPresent(old_md, md, k);
    }
    md.erase("selfLink");
    md.erase("managedFields");
    if (md.contains("generateName") && md["generateName"] == "") {
      md.erase("generateName");
    }
    if (info.has_status) {
      // Main-resource writes cannot change status.
      CopyIfPresent(*old, next, "status");
    }
    ApplyDefaults(info.object_kind, next, clock_->Now());
  }
  next["metadata"]["resourceVersion"] = old_md.value("resourceVersion", "");
  ValidationOptions vopts{minor_number_, info.namespaced, info.name_is_dns_label};
  FieldErrors errs = status_write ? ValidateStatusUpdate(info.object_kind, next, *old, vopts)
                                  : ValidateUpdate(info.object_kind, next, *old, vopts);
  if (!errs.empty()) {
    return InvalidError(info, t.name, errs);
  }
  if (next == *old) {
    *out = {200, *old};  // a no-op write keeps its resourceVersion, like etcd3's store
    return std::nullopt;
  }
  if (info.tracks_generation && !status_write) {
    json spec = next.contains("spec") ? next["spec"] : json();
    json old_spec = old->contains("spec") ? (*old)["spec"] : json();
    if (spec != old_spec) {
      next["metadata"]["generation"] = old_md.value("generation", 0) + 1;
    }
  }
  ++rv_;
  next["metadata"]["resourceVersion"] = std::to_string(rv_);
  auto stored = std::make_shared<const json>(std::move(next));
  it->second = stored;
  EmitLocked(info, EventType::kModified, stored, old);
  *out = {200, *stored};
  // The write that removes the last finalizer of a deleting object completes the delete.
  const json& md = (*stored)["metadata"];
  bool deleting = md.contains("deletionTimestamp") && !md["deletionTimestamp"].is_null();
  bool finalizers =
      md.contains("finalizers") && md["finalizers"].is_array() && !md["finalizers"].empty();
  if (deleting && !finalizers) {
    ++rv_;
    json gone = *stored;
    gone["metadata"]["resourceVersion"] = std::to_string(rv_);
    rs.objects.erase(it);
    EmitLocked(info, EventType::kDeleted, std::make_shared<const json>(std::move(gone)), stored);
  }
  return std::nullopt;
}

std::optional<ApiError> ApiServer::Impl::Patch(const Target& t, const httplib::Request& req,
                                               Result* out) {
  json patch = json::parse(req.body, nullptr, false);
  if (patch.is_discarded()) {
    return BadRequest("error decoding patch: invalid JSON");
  }
  bool merge = MediaType(req.get_header_value("Content-Type")) == kMergePatch;
  if (merge && !patch.is_object()) {
    return BadRequest("error decoding patch: a merge patch must be a JSON object");
  }
  if (!merge && !patch.is_array()) {
    return BadRequest("error decoding patch: a JSON patch must be an array of operations");
  }
  absl::MutexLock l(&mu_);
  ResourceStore& rs = stores_[t.info->plural];
  auto it = rs.objects.find(ObjectKey(*t.info, t.ns, t.name));
  if (it == rs.objects.end()) {
    return NotFound(*t.info, t.name);
  }
  const json current = ClientView(*t.info, *it->second);
  json patched;
  if (merge) {
    patched = MergePatch(current, patch);
  } else {
    try {
      patched = current.patch(patch);
    } catch (const json::exception& e) {
      return ApiError{
          422, "Invalid",
          absl::StrCat("the server rejected our request due to an error in our request: ",
                       e.what()),
          Details(*t.info, t.name, true)};
    }
  }
  if (!patched.is_object()) {
    return BadRequest("the patched object must be a JSON object");
  }
  // A patch may carry a resourceVersion as a precondition; the stored one is checked in the
  // update path. Identity cannot change.
  if (MetaString(patched, "name") != t.name ||
      (t.info->namespaced && MetaString(patched, "namespace") != t.ns)) {
    return BadRequest("metadata.name and metadata.namespace cannot be changed by a patch");
  }
  if (patched.value("kind", json()) != t.info->kind ||
      patched.value("apiVersion", json()) != t.info->ApiVersion()) {
    return BadRequest("kind and apiVersion cannot be changed by a patch");
  }
  if (t.info->to_storage != nullptr) {
    patched = t.info->to_storage(patched);
  }
  return UpdateLocked(t, std::move(patched), out);
}

std::optional<ApiError> ApiServer::Impl::DeleteLocked(const ResourceInfo& info,
                                                      const std::string& key, const json& options,
                                                      Result* out, json* last_state) {
  ResourceStore& rs = stores_[info.plural];
  auto it = rs.objects.find(key);
  ObjPtr old = it->second;
  const json& md = (*old)["metadata"];
  std::string name = md.value("name", "");
  if (options.contains("preconditions") && options["preconditions"].is_object()) {
    const json& pre = options["preconditions"];
    if (pre.contains("uid") && pre["uid"].is_string() &&
        pre["uid"].get<std::string>() != md.value("uid", "")) {
      return Conflict(
          info, name,
          absl::StrCat("Precondition failed: UID in precondition: ", pre["uid"].get<std::string>(),
                       ", UID in object meta: ", md.value("uid", "")));
    }
    if (pre.contains("resourceVersion") && pre["resourceVersion"].is_string() &&
        pre["resourceVersion"].get<std::string>() != md.value("resourceVersion", "")) {
      return Conflict(
          info, name,
          absl::StrCat("Precondition failed: ResourceVersion in precondition: ",
                       pre["resourceVersion"].get<std::string>(),
                       ", ResourceVersion in object meta: ", md.value("resourceVersion", "")));
    }
  }
  bool finalizers =
      md.contains("finalizers") && md["finalizers"].is_array() && !md["finalizers"].empty();
  if (finalizers) {
    if (md.contains("deletionTimestamp")) {
      *out = {200, *old};  // already terminating; finalizers decide when it goes
      *last_state = *old;
      return std::nullopt;
    }
    json next = *old;
    ++rv_;
    next["metadata"]["deletionTimestamp"] = FormatK8sTime(clock_->Now());
    next["metadata"]["deletionGracePeriodSeconds"] = 0;
    if (info.tracks_generation) {
      next["metadata"]["generation"] = md.value("generation", 0) + 1;
    }
    next["metadata"]["resourceVersion"] = std::to_string(rv_);
    auto stored = std::make_shared<const json>(std::move(next));
    it->second = stored;
    EmitLocked(info, EventType::kModified, stored, old);
    *out = {200, *stored};
    *last_state = *stored;
    return std::nullopt;
  }
  ++rv_;
  json gone = *old;
  gone["metadata"]["resourceVersion"] = std::to_string(rv_);
  auto stored = std::make_shared<const json>(std::move(gone));
  rs.objects.erase(it);
  EmitLocked(info, EventType::kDeleted, stored, old);
  *last_state = *stored;
  if (info.return_deleted_object) {
    *out = {200, *stored};
  } else {
    json details = Details(info, name);
    details["uid"] = md.value("uid", "");
    *out = {200, json{{"kind", "Status"},
                      {"apiVersion", "v1"},
                      {"metadata", json::object()},
                      {"status", "Success"},
                      {"details", details}}};
  }
  return std::nullopt;
}

namespace {

std::optional<ApiError> ParseDeleteOptions(const std::string& body, json* out) {
  *out = json::object();
  if (body.empty()) {
    return std::nullopt;
  }
  json opts = json::parse(body, nullptr, false);
  if (opts.is_discarded() || !opts.is_object()) {
    return BadRequest(
        "DeleteOptions in version \"v1\" cannot be handled as a DeleteOptions: "
        "invalid JSON");
  }
  if (opts.contains("kind") && opts["kind"] != "DeleteOptions") {
    return BadRequest(absl::StrCat("the kind in the data (", opts["kind"].dump(),
                                   ") does not match the expected kind (DeleteOptions)"));
  }
  if (opts.contains("gracePeriodSeconds") && !opts["gracePeriodSeconds"].is_null() &&
      (!opts["gracePeriodSeconds"].is_number_integer() ||
       opts["gracePeriodSeconds"].get<int64_t>() < 0)) {
    return BadRequest("gracePeriodSeconds must be a non-negative integer");
  }
  if (opts.contains("propagationPolicy") && !opts["propagationPolicy"].is_null()) {
    const json& p = opts["propagationPolicy"];
    if (p != "Orphan" && p != "Background" && p != "Foreground") {
      return ApiError{422, "Invalid",
                      "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported "
                      "value: " +
                          p.dump(),
                      nullptr};
    }
  }
  *out = std::move(opts);
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ApiServer::Impl::Delete(const Target& t, const httplib::Request& req,
                                                Result* out) {
  json options;
  if (auto err = ParseDeleteOptions(req.body, &options)) {
    return err;
  }
  absl::MutexLock l(&mu_);
  ResourceStore& rs = stores_[t.info->plural];
  std::string key = ObjectKey(*t.info, t.ns, t.name);
  if (rs.objects.count(key) == 0) {
    return NotFound(*t.info, t.name);
  }
  json last_state;
  return DeleteLocked(*t.info, key, options, out, &last_state);
}

std::optional<ApiError> ApiServer::Impl::DeleteCollection(const Target& t,
                                                          const httplib::Request& req,
                                                          Result* out) {
  Filter filter;
  if (auto err = ParseFilter(t, req, &filter)) {
    return err;
  }
  json options;
  if (auto err = ParseDeleteOptions(req.body, &options)) {
    return err;
  }
  options.erase("preconditions");
  absl::MutexLock l(&mu_);
  ResourceStore& rs = stores_[t.info->plural];
  std::vector<std::string> keys;
  for (const auto& [key, obj] : rs.objects) {
    if (filter.Matches(*obj)) {
      keys.push_back(key);
    }
  }
  json items = json::array();
  for (const std::string& key : keys) {
    Result one;
    json item;
    if (!DeleteLocked(*t.info, key, options, &one, &item)) {
      item.erase("kind");
      item.erase("apiVersion");
      items.push_back(std::move(item));
    }
  }
  *out = {200, json{{"kind", t.info->ListKind()},
                    {"apiVersion", t.info->ApiVersion()},
                    {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
                    {"items", items}}};
  return std::nullopt;
}

// ---------- watch ----------

std::string ApiServer::Impl::EventLine(const char* type, const json& obj) const {
  return json{{"type", type}, {"object", obj}}.dump() + "\n";
}

std::optional<std::string> ApiServer::Impl::FilterEvent(const WatchState& w,
                                                        const ResourceInfo& info,
                                                        const Event& ev) const {
  bool cur = w.filter.Matches(*ev.obj);
  switch (ev.type) {
    case EventType::kAdded:
      return cur ? std::optional<std::string>(EventLine("ADDED", ClientView(info, *ev.obj)))
                 : std::nullopt;
    case EventType::kDeleted:
      return cur ? std::optional<std::string>(EventLine("DELETED", ClientView(info, *ev.obj)))
                 : std::nullopt;
    case EventType::kModified: {
      bool prev = ev.prev != nullptr && w.filter.Matches(*ev.prev);
      if (cur && prev) {
        return EventLine("MODIFIED", ClientView(info, *ev.obj));
      }
      if (cur) {
        return EventLine("ADDED", ClientView(info, *ev.obj));
      }
      if (prev) {
        // Like the watch cache: an object that stops matching is DELETED for this watcher,
        // shown in its last matching state at the event's resourceVersion.
        json gone = ClientView(info, *ev.prev);
        gone["metadata"]["resourceVersion"] = std::to_string(ev.rv);
        return EventLine("DELETED", gone);
      }
      return std::nullopt;
    }
  }
  return std::nullopt;
}

void ApiServer::Impl::Watch(const Target& t, const httplib::Request& req, httplib::Response& res,
                            const std::optional<FaultRule>& fault) {
  auto fail = [&res](const ApiError& e) {
    res.status = e.code;
    res.set_content(StatusJson(e).dump(), kJson);
  };
  auto w = std::make_shared<WatchState>();
  if (auto err = ParseFilter(t, req, &w->filter)) {
    fail(*err);
    return;
  }
  std::string rv_param = req.get_param_value("resourceVersion");
  std::string match = req.get_param_value("resourceVersionMatch");
  bool send_initial = IsTrue(req, "sendInitialEvents");
  w->bookmarks = IsTrue(req, "allowWatchBookmarks");
  if (req.has_param("sendInitialEvents")) {
    if (match != "NotOlderThan") {
      fail(
          BadRequest("resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
                     "resourceVersionMatch to NotOlderThan"));
      return;
    }
    if (send_initial && !w->bookmarks) {
      fail(
          BadRequest("allowWatchBookmarks: Forbidden: sendInitialEvents requires setting "
                     "allowWatchBookmarks=true"));
      return;
    }
  } else if (!match.empty()) {
    fail(
        BadRequest("resourceVersionMatch is forbidden for watch unless sendInitialEvents is "
                   "provided"));
    return;
  }
  absl::Duration timeout = kDefaultWatchTimeout;
  std::string timeout_param = req.get_param_value("timeoutSeconds");
  if (!timeout_param.empty()) {
    int64_t secs = 0;
    if (!absl::SimpleAtoi(timeout_param, &secs) || secs < 0) {
      fail(BadRequest(absl::StrCat("invalid timeoutSeconds \"", timeout_param, "\"")));
      return;
    }
    if (secs > 0) {
      timeout = absl::Seconds(secs);
    }
  }
  absl::Time now = absl::Now();
  w->deadline = now + timeout;
  w->next_bookmark = now + options_.bookmark_interval;
  if (fault && fault->kind == FaultRule::Kind::kDropWatch) {
    w->drop_after_first = true;
  }
  if (fault && fault->kind == FaultRule::Kind::kTruncateBody) {
    w->truncate_first = true;
  }
  const ResourceInfo& info = *t.info;
  auto status_line = [this](const ApiError& e) { return EventLine("ERROR", StatusJson(e)); };
  {
    absl::MutexLock l(&mu_);
    ResourceStore& rs = stores_[info.plural];
    w->drop_generation = drop_generation_;
    if (fault && fault->kind == FaultRule::Kind::kGone) {
      w->pending.push_back(status_line(
          Expired(absl::StrCat("too old resource version: ", rv_param, " (", rv_, ")"))));
      w->finish_after_pending = true;
    } else if (rv_param.empty() || rv_param == "0" || send_initial) {
      uint64_t from = rv_;
      if (send_initial && !rv_param.empty() && rv_param != "0") {
        uint64_t want = 0;
        if (!absl::SimpleAtoi(rv_param, &want)) {
          fail(BadRequest(absl::StrCat("invalid resource version \"", rv_param, "\"")));
          return;
        }
        if (want > rv_) {
          w->pending.push_back(status_line(TooLargeResourceVersion(want, rv_)));
          w->finish_after_pending = true;
        }
      }
      if (!w->finish_after_pending && (rv_param.empty() || rv_param == "0" || send_initial)) {
        for (const auto& [key, obj] : rs.objects) {
          if (w->filter.Matches(*obj)) {
            w->pending.push_back(EventLine("ADDED", ClientView(info, *obj)));
          }
        }
        if (send_initial) {
          json bm = {{"kind", info.kind},
                     {"apiVersion", info.ApiVersion()},
                     {"metadata",
                      {{"resourceVersion", std::to_string(from)},
                       {"annotations", {{"k8s.io/initial-events-end", "true"}}}}}};
          w->pending.push_back(EventLine("BOOKMARK", bm));
        }
      }
      w->cursor = from;
      w->synced_rv = from;
    } else {
      uint64_t want = 0;
      if (!absl::SimpleAtoi(rv_param, &want)) {
        fail(BadRequest(absl::StrCat("invalid resource version \"", rv_param, "\"")));
        return;
      }
      if (want > rv_) {
        w->pending.push_back(status_line(TooLargeResourceVersion(want, rv_)));
        w->finish_after_pending = true;
      } else if (want < rs.compacted_rv) {
        w->pending.push_back(status_line(
            Expired(absl::StrCat("too old resource version: ", want, " (", rs.compacted_rv, ")"))));
        w->finish_after_pending = true;
      }
      w->cursor = want;
      w->synced_rv = want;
    }
  }
  w->fd = FindAcceptedSocket(port_, req.remote_addr, req.remote_port);
  open_watches_.fetch_add(1);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache, private");
  res.set_chunked_content_provider(
      kJson, [this, w](size_t, httplib::DataSink& sink) { return WatchStep(*w, sink); },
      [this](bool) { open_watches_.fetch_sub(1); });
}

bool ApiServer::Impl::WatchStep(WatchState& w, httplib::DataSink& sink) {
  auto write_pending = [&]() -> bool {
    while (!w.pending.empty()) {
      std::string line = std::move(w.pending.front());
      w.pending.pop_front();
      if (w.truncate_first) {
        sink.write(line.data(), line.size() / 2);
        return false;  // cut mid-object, then drop the connection
      }
      if (!sink.write(line.data(), line.size())) {
        return false;
      }
      if (w.drop_after_first) {
        w.pending.clear();
        w.finish_after_pending = true;
        return true;
      }
    }
    return true;
  };
  if (!write_pending()) {
    return false;
  }
  if (w.finish_after_pending || (w.drop_after_first && w.pending.empty())) {
    // A dropped watch closes after its first event, or at once when none is ready.
    sink.done();
    return true;
  }
  const ResourceInfo& info = *w.filter.info;
  bool finish = false;
  {
    absl::MutexLock l(&mu_);
    ResourceStore& rs = stores_[info.plural];
    auto has_news = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || drop_generation_ != w.drop_generation ||
             (!rs.history.empty() && rs.history.back().rv > w.cursor) || rs.compacted_rv > w.cursor;
    };
    absl::Time wake = std::min(absl::Now() + kWatchPoll, w.deadline);
    if (w.bookmarks) {
      wake = std::min(wake, w.next_bookmark);
    }
    while (!has_news() && absl::Now() < wake) {
      cv_.WaitWithDeadline(&mu_, wake);
    }
    if (stopping_ || drop_generation_ != w.drop_generation) {
      finish = true;
    } else if (rs.compacted_rv > w.cursor) {
      // The events this stream still needs are gone (it fell behind or history was compacted).
      w.pending.push_back(
          EventLine("ERROR", StatusJson(Expired(absl::StrCat("too old resource version: ", w.cursor,
                                                             " (", rs.compacted_rv, ")")))));
      w.finish_after_pending = true;
    } else {
      auto it = std::upper_bound(rs.history.begin(), rs.history.end(), w.cursor,
                                 [](uint64_t rv, const Event& e) { return rv < e.rv; });
      for (; it != rs.history.end(); ++it) {
        if (std::optional<std::string> line = FilterEvent(w, info, *it)) {
          w.pending.push_back(std::move(*line));
        }
        w.cursor = it->rv;
      }
      w.synced_rv = rv_;
    }
  }
  absl::Time now = absl::Now();
  if (!finish && !w.finish_after_pending && w.bookmarks && now >= w.next_bookmark) {
    json bm = {{"kind", info.kind},
               {"apiVersion", info.ApiVersion()},
               {"metadata", {{"resourceVersion", std::to_string(w.synced_rv)}}}};
    w.pending.push_back(EventLine("BOOKMARK", bm));
    w.next_bookmark = now + options_.bookmark_interval;
  }
  if (!finish) {
    if (!write_pending()) {
      return false;
    }
  }
  if (finish || w.finish_after_pending || now >= w.deadline) {
    sink.done();
    return true;
  }
  if (PeerClosed(w.fd)) {
    return false;
  }
  return true;
}

// ---------- public ----------

}  // namespace dralens::sim

namespace dralens::sim {

ApiServer::ApiServer(ApiServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
ApiServer::~ApiServer() = default;
absl::Status ApiServer::Start() { return impl_->Start(); }
void ApiServer::Stop() { impl_->Stop(); }
int ApiServer::port() const { return impl_->port(); }
std::string ApiServer::url() const {
  return absl::StrCat("http://", impl_->address(), ":", impl_->port());
}
void ApiServer::InjectFault(FaultRule rule) { impl_->InjectFault(std::move(rule)); }
void ApiServer::ClearFaults() { impl_->ClearFaults(); }
void ApiServer::DropWatches() { impl_->DropWatches(); }
void ApiServer::CompactHistory() { impl_->CompactHistory(); }
uint64_t ApiServer::ResourceVersionForTest() const { return impl_->ResourceVersion(); }
int ApiServer::OpenWatchesForTest() const { return impl_->OpenWatches(); }

}  // namespace dralens::sim
