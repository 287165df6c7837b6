#include "src/sim/api_server.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/common/log.h"
#include "src/sim/api_server_internal.h"
#include "src/sim/tables.h"

namespace dralens::sim {

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
