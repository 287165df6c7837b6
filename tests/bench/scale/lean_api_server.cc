#include "tests/bench/scale/lean_api_server.h"

#include <sys/resource.h>
#include <time.h>
#include <zlib.h>

#include <algorithm>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/bench/scale/lean_http.h"

namespace dralens::bench::scale {
namespace {

using lean_http::Fail;
using lean_http::Index;
using lean_http::IsTrue;
using lean_http::kJson;
using lean_http::StatusBody;
using nlohmann::json;

// kube-apiserver compresses responses from this size on (APIResponseCompression).
constexpr size_t kGzipThreshold = 128 * 1024;
constexpr char kGzipMark[] = "X-Scale-Accepts-Gzip";

// gzip at level 1, kube-apiserver's level for response compression.
std::string GzipFast(const std::string& data) {
  z_stream stream{};
  deflateInit2(&stream, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&stream, data.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

std::string ContinueToken(uint64_t rv, size_t start) {
  return absl::WebSafeBase64Escape(json{{"rv", rv}, {"start", start}}.dump());
}

bool ParseContinue(const std::string& token, uint64_t* rv, size_t* start) {
  std::string decoded;
  if (!absl::WebSafeBase64Unescape(token, &decoded)) {
    return false;
  }
  json j = json::parse(decoded, nullptr, false);
  if (!j.is_object() || !j.contains("rv") || !j.contains("start") ||
      !j["rv"].is_number_unsigned() || !j["start"].is_number_unsigned()) {
    return false;
  }
  *rv = j["rv"].get<uint64_t>();
  *start = j["start"].get<size_t>();
  return true;
}

int64_t ReadStatusBytes(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, field)) {
      int64_t kib = 0;
      std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kib)) {
        return kib * 1024;
      }
    }
  }
  return 0;
}

}  // namespace

int64_t MonotonicNanos() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

LeanApiServer::LeanApiServer(LeanServerOptions options) : options_(std::move(options)) {}

LeanApiServer::~LeanApiServer() { Stop(); }

void LeanApiServer::Preload(Resource resource, json object) {
  std::lock_guard<std::mutex> lock(mu_);
  Store& store = stores_[Index(resource)];
  const uint64_t rv = ++rv_;
  staged_rv_ = rv_;
  object["metadata"]["resourceVersion"] = std::to_string(rv);
  Entry entry;
  entry.key = KeyOf(object);
  object.erase("kind");
  object.erase("apiVersion");
  entry.item = object.dump();
  store.index[entry.key] = store.entries.size();
  store.entries.push_back(std::move(entry));
  ++store.live;
}

void LeanApiServer::PrecompressPages(int64_t limit) {
  if (!options_.gzip) {
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (Resource r : kResources) {
    size_t start = 0;
    while (true) {
      size_t next = 0;
      std::string page = RenderPage(r, start, limit, rv_, &next);
      if (page.size() >= kGzipThreshold) {
        page_cache_[absl::StrCat(Index(r), ":", start, ":", limit, ":", rv_)] = {
            std::make_shared<const std::string>(GzipFast(page)), page.size(), next};
      }
      if (next == 0) {
        break;
      }
      start = next;
    }
  }
}

absl::Status LeanApiServer::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Store& store : stores_) {
      store.compacted_rv = rv_;
      store.modified_rv = rv_;
    }
  }
  server_ = std::make_unique<httplib::Server>();
  const int threads = std::max(8, options_.threads);
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_keep_alive_max_count(100000);
  server_->set_tcp_nodelay(true);
  server_->set_payload_max_length(256 << 20);
  // Compression is ours (LISTs only, level 1): httplib must not compress on its own, and
  // watch chunks would sit in zlib's buffer.
  server_->set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
    auto& r = const_cast<httplib::Request&>(req);
    if (absl::StrContains(r.get_header_value("Accept-Encoding"), "gzip")) {
      r.headers.emplace(kGzipMark, "1");
    }
    r.headers.erase("Accept-Encoding");
    return httplib::Server::HandlerResponse::Unhandled;
  });
  server_->Get(".*", [this](const httplib::Request& req, httplib::Response& res) {
    if (absl::StartsWith(req.path, "/bench/")) {
      Control(req, res);
    } else {
      Handle(req, res);
    }
  });
  server_->Post("/bench/.*",
                [this](const httplib::Request& req, httplib::Response& res) { Control(req, res); });
  port_ = options_.port == 0
              ? server_->bind_to_any_port(options_.address)
              : (server_->bind_to_port(options_.address, options_.port) ? options_.port : -1);
  if (port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.address));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return absl::OkStatus();
}

void LeanApiServer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (server_ != nullptr) {
    server_->stop();
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

void LeanApiServer::Handle(const httplib::Request& req, httplib::Response& res) {
  if (req.path == "/version") {
    res.set_content(
        json{
            {"major", "1"}, {"minor", "34"}, {"gitVersion", "v1.34.2"}, {"platform", "linux/amd64"}}
            .dump(),
        kJson);
    return;
  }
  if (req.path == "/healthz" || req.path == "/readyz" || req.path == "/livez") {
    res.set_content("ok", "text/plain");
    return;
  }
  for (Resource r : kResources) {
    if (req.path != InfoOf(r).path) {
      continue;
    }
    if (!req.get_param_value("labelSelector").empty() ||
        !req.get_param_value("fieldSelector").empty()) {
      Fail(res, 400, "BadRequest", "the scale benchmark's API server serves no selectors");
      return;
    }
    if (IsTrue(req, "watch")) {
      StartWatch(r, req, res);
    } else {
      List(r, req, res);
    }
    return;
  }
  Fail(res, 404, "NotFound",
       absl::StrCat("the server could not find the requested resource (", req.path,
                    "): the scale benchmark's API server serves only cluster-wide LIST and WATCH "
                    "of the types dralens cluster reads"));
}

std::string LeanApiServer::RenderPage(Resource resource, size_t start, int64_t limit,
                                      uint64_t list_rv, size_t* next) const {
  const Store& store = stores_[Index(resource)];
  const ResourceInfo& info = InfoOf(resource);
  std::string items;
  int64_t count = 0;
  size_t i = start;
  for (; i < store.entries.size(); ++i) {
    const Entry& e = store.entries[i];
    if (!e.live) {
      continue;
    }
    if (limit > 0 && count == limit) {
      break;
    }
    if (count > 0) {
      items.push_back(',');
    }
    items.append(e.item);
    ++count;
  }
  while (i < store.entries.size() && !store.entries[i].live) {
    ++i;
  }
  *next = i < store.entries.size() ? i : 0;
  std::string body =
      absl::StrCat("{\"kind\":\"", info.kind, "List\",\"apiVersion\":\"", info.api_version,
                   "\",\"metadata\":{\"resourceVersion\":\"", list_rv, "\"");
  if (*next != 0) {
    absl::StrAppend(&body, ",\"continue\":\"", ContinueToken(list_rv, *next), "\"");
  }
  absl::StrAppend(&body, "},\"items\":[", items, "]}");
  return body;
}

void LeanApiServer::List(Resource resource, const httplib::Request& req, httplib::Response& res) {
  int64_t expected = 0;
  first_list_ns_.compare_exchange_strong(expected, MonotonicNanos());
  int64_t limit = 0;
  const std::string limit_text = req.get_param_value("limit");
  if (!limit_text.empty() && (!absl::SimpleAtoi(limit_text, &limit) || limit < 0)) {
    Fail(res, 400, "BadRequest", absl::StrCat("invalid limit \"", limit_text, "\""));
    return;
  }
  const std::string token = req.get_param_value("continue");
  const std::string rv_text = req.get_param_value("resourceVersion");
  if (auto delay = options_.list_delays.find(resource);
      token.empty() && delay != options_.list_delays.end()) {
    absl::SleepFor(delay->second);
  }
  const bool gzip = options_.gzip && req.has_header(kGzipMark);
  if (gzip) {
    client_accepts_gzip_.store(true);
  }
  std::shared_ptr<const std::string> body;
  bool compressed = false;
  size_t next = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    Store& store = stores_[Index(resource)];
    uint64_t list_rv = rv_;
    size_t start = 0;
    if (!token.empty()) {
      if (!rv_text.empty()) {
        Fail(res, 400, "BadRequest",
             "specifying resource version is not allowed when using "
             "continue");
        return;
      }
      if (!ParseContinue(token, &list_rv, &start) || list_rv > rv_) {
        Fail(res, 400, "BadRequest",
             "continue key is not valid: incorrect encoded start resourceVersion");
        return;
      }
      if (list_rv < store.modified_rv) {
        expired_continues_.fetch_add(1);
        Fail(res, 410, "Expired",
             "The provided continue parameter is too old to display a consistent list result. "
             "You can start a new list without the continue parameter.");
        return;
      }
    } else if (!rv_text.empty() && rv_text != "0") {
      uint64_t want = 0;
      if (!absl::SimpleAtoi(rv_text, &want)) {
        Fail(res, 400, "BadRequest", absl::StrCat("invalid resource version \"", rv_text, "\""));
        return;
      }
      if (want > rv_) {
        Fail(res, 504, "Timeout",
             absl::StrCat("Too large resource version: ", want, ", current: ", rv_));
        return;
      }
    }
    const std::string cache_key =
        absl::StrCat(Index(resource), ":", start, ":", limit, ":", list_rv);
    if (gzip) {
      if (auto it = page_cache_.find(cache_key); it != page_cache_.end()) {
        body = it->second.gzipped;
        compressed = true;
        next = it->second.next;
        list_bytes_.fetch_add(static_cast<int64_t>(it->second.raw_bytes));
      }
    }
    if (body == nullptr) {
      auto page = std::make_shared<std::string>(RenderPage(resource, start, limit, list_rv, &next));
      lock.unlock();
      if (gzip && page->size() >= kGzipThreshold) {
        list_bytes_.fetch_add(static_cast<int64_t>(page->size()));
        body = std::make_shared<const std::string>(GzipFast(*page));
        compressed = true;
      } else {
        list_bytes_.fetch_add(static_cast<int64_t>(page->size()));
        body = std::move(page);
      }
    }
  }
  list_wire_bytes_.fetch_add(static_cast<int64_t>(body->size()));
  if (compressed) {
    res.set_header("Content-Encoding", "gzip");
  }
  const bool last_page = next == 0;
  res.set_content_provider(
      body->size(), kJson,
      [body](size_t offset, size_t length, httplib::DataSink& sink) {
        return sink.write(body->data() + offset, length);
      },
      [this, resource, last_page](bool success) { RecordListDone(resource, last_page, success); });
}

void LeanApiServer::RecordListDone(Resource resource, bool last_page, bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  Store& store = stores_[Index(resource)];
  ++store.pages;
  if (ok && last_page) {
    ++store.lists;
    if (store.first_list_done_ns == 0) {
      store.first_list_done_ns = MonotonicNanos();
    }
  }
}

absl::Status LeanApiServer::Stage(Resource resource, const std::string& type, json object) {
  if (type != "ADDED" && type != "MODIFIED" && type != "DELETED") {
    return absl::InvalidArgumentError(absl::StrCat("unknown event type '", type, "'"));
  }
  if (!object.is_object() || !object.contains("metadata") || !object["metadata"].is_object()) {
    return absl::InvalidArgumentError("event object has no metadata");
  }
  const ResourceInfo& info = InfoOf(resource);
  Staged s;
  s.resource = resource;
  s.key = KeyOf(object);
  s.deleted = type == "DELETED";
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.event.rv = ++staged_rv_;
  }
  object["kind"] = info.kind;
  object["apiVersion"] = info.api_version;
  object["metadata"]["resourceVersion"] = std::to_string(s.event.rv);
  s.event.line = json{{"type", type}, {"object", object}}.dump() + "\n";
  object.erase("kind");
  object.erase("apiVersion");
  s.item = object.dump();
  std::lock_guard<std::mutex> lock(mu_);
  staged_.push_back(std::move(s));
  return absl::OkStatus();
}

uint64_t LeanApiServer::Release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Staged& s : staged_) {
      Store& store = stores_[Index(s.resource)];
      auto it = store.index.find(s.key);
      if (s.deleted) {
        if (it != store.index.end() && store.entries[it->second].live) {
          store.entries[it->second].live = false;
          --store.live;
        }
      } else if (it == store.index.end()) {
        store.index[s.key] = store.entries.size();
        store.entries.push_back({s.key, std::move(s.item), true});
        ++store.live;
      } else {
        Entry& e = store.entries[it->second];
        if (!e.live) {
          ++store.live;
        }
        e.item = std::move(s.item);
        e.live = true;
      }
      store.modified_rv = s.event.rv;
      store.history.push_back(std::move(s.event));
      while (store.history.size() > options_.history) {
        store.compacted_rv = store.history.front().rv;
        store.history.pop_front();
      }
      rv_ = std::max(rv_, store.modified_rv);
    }
    staged_.clear();
    page_cache_.clear();
  }
  cv_.notify_all();
  std::lock_guard<std::mutex> lock(mu_);
  return rv_;
}

void LeanApiServer::Compact() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // As if an object of another type had been written since: every watch position up to now
    // becomes too old, while a fresh LIST (at the new resourceVersion) can be watched from.
    rv_ = std::max(rv_, staged_rv_) + 1;
    staged_rv_ = rv_;
    for (Store& store : stores_) {
      store.history.clear();
      store.compacted_rv = rv_;
    }
    page_cache_.clear();
  }
  cv_.notify_all();
}

void LeanApiServer::DropWatches() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++drop_generation_;
  }
  cv_.notify_all();
}

json LeanApiServer::Stats() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double cpu = usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
                     usage.ru_stime.tv_usec / 1e6;
  json out = {{"rv", 0},
              {"now_ns", MonotonicNanos()},
              {"first_list_ns", first_list_ns_.load()},
              {"list_bytes", list_bytes_.load()},
              {"list_wire_bytes", list_wire_bytes_.load()},
              {"client_accepts_gzip", client_accepts_gzip_.load()},
              {"watches_started", watches_started_.load()},
              {"watches_open", watches_open_.load()},
              {"gone_sent", gone_sent_.load()},
              {"bookmarks_sent", bookmarks_sent_.load()},
              {"events_sent", events_sent_.load()},
              {"expired_continues", expired_continues_.load()},
              {"cpu_seconds", cpu},
              {"rss_bytes", ReadStatusBytes("VmRSS:")},
              {"hwm_bytes", ReadStatusBytes("VmHWM:")}};
  std::lock_guard<std::mutex> lock(mu_);
  out["rv"] = rv_;
  for (Resource r : kResources) {
    const Store& store = stores_[Index(r)];
    int open = 0;
    uint64_t delivered = UINT64_MAX;
    for (const auto& w : watches_) {
      if (w->resource == r) {
        ++open;
        delivered = std::min(delivered, w->cursor);
      }
    }
    out["resources"][InfoOf(r).plural] = {{"objects", store.live},
                                          {"lists", store.lists},
                                          {"pages", store.pages},
                                          {"first_list_done_ns", store.first_list_done_ns},
                                          {"open_watches", open},
                                          {"delivered_rv", open == 0 ? 0 : delivered},
                                          {"modified_rv", store.modified_rv}};
  }
  return out;
}

void LeanApiServer::Control(const httplib::Request& req, httplib::Response& res) {
  if (req.path == "/bench/stats") {
    res.set_content(Stats().dump(), kJson);
    return;
  }
  if (req.method != "POST") {
    Fail(res, 405, "MethodNotAllowed", "control endpoints other than /bench/stats are POST");
    return;
  }
  if (req.path == "/bench/stage") {
    // One change per line: "<TYPE> <plural> <object JSON>".
    int staged = 0;
    for (absl::string_view line : absl::StrSplit(req.body, '\n', absl::SkipEmpty())) {
      std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(' ', 2));
      if (parts.size() != 3) {
        Fail(res, 400, "BadRequest", "stage: want '<TYPE> <plural> <json>' per line");
        return;
      }
      std::optional<Resource> resource;
      for (Resource r : kResources) {
        if (parts[1] == InfoOf(r).plural) {
          resource = r;
        }
      }
      json object = json::parse(parts[2], nullptr, false);
      if (!resource.has_value() || object.is_discarded()) {
        Fail(res, 400, "BadRequest", absl::StrCat("stage: bad line ", staged + 1));
        return;
      }
      absl::Status s = Stage(*resource, std::string(parts[0]), std::move(object));
      if (!s.ok()) {
        Fail(res, 400, "BadRequest", std::string(s.message()));
        return;
      }
      ++staged;
    }
    res.set_content(json{{"staged", staged}}.dump(), kJson);
  } else if (req.path == "/bench/release") {
    res.set_content(json{{"rv", Release()}}.dump(), kJson);
  } else if (req.path == "/bench/compact") {
    Compact();
    res.set_content("{}", kJson);
  } else if (req.path == "/bench/drop-watches") {
    DropWatches();
    res.set_content("{}", kJson);
  } else {
    Fail(res, 404, "NotFound", absl::StrCat("no control endpoint ", req.path));
  }
}

}  // namespace dralens::bench::scale
