// LeanApiServer: a read-only stand-in for kube-apiserver that serves a preloaded fleet at
// LIST speed, for the scale benchmark.
//
// The embedded server (src/sim/api_server) keeps every object as a JSON tree and renders each
// LIST page item by item; at 100k claims that is about 4 GB of memory and seconds of CPU per
// full LIST, on the same 2 cores as the process being measured. This one keeps each object
// as its serialized bytes and answers a page by concatenation.
//
// What it serves, with the real server's semantics where `dralens cluster` can tell:
//  - GET <collection>?limit=&continue= : paged LISTs in a fixed order chosen at preload (name,
//    random, pending-first, reverse); list metadata carries the resourceVersion and a continue
//    token; a token from before a change to that resource answers 410 Expired (as after
//    compaction), which clients answer with a fresh list;
//  - GET <collection>?watch=true&resourceVersion=&allowWatchBookmarks=&timeoutSeconds= : a
//    chunked stream of newline-delimited events after that resourceVersion; an older
//    resourceVersion than the kept history gets an ERROR event with a 410 Expired Status; a
//    newer one than the server's an ERROR 504 "Too large resource version"; BOOKMARKs every
//    bookmark interval when asked; the stream ends at timeoutSeconds;
//  - /version, and 404 with a Status body for anything else (no writes, no selectors: a
//    selector answers 400, so a client that needs one is noticed);
//  - gzip (level 1) on LIST responses over 128 KiB when the client accepts it, as
//    kube-apiserver's APIResponseCompression does; watch streams are never compressed.
// resourceVersion is one global counter. Changes enter only through Stage() and Release():
// the benchmark stages a batch (parsing and rendering happen then), and Release() publishes it
// at once, so the server does almost no work while the measured process handles the batch.
//
// Thread-safe.
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "tests/bench/scale/render.h"

namespace dralens::bench::scale {

struct LeanServerOptions {
  std::string address = "127.0.0.1";
  int port = 0;
  // Watch events kept per resource; a watch from before them gets 410 Gone.
  size_t history = 20000;
  absl::Duration bookmark_interval = absl::Seconds(60);
  bool gzip = true;
  int threads = 32;
  // Holds the first page of each LIST of these resources back this long, to choose which
  // resource a client finishes listing first.
  std::map<Resource, absl::Duration> list_delays;
};

// Monotonic nanoseconds (CLOCK_MONOTONIC), comparable across processes on one machine.
int64_t MonotonicNanos();

class LeanApiServer {
 public:
  explicit LeanApiServer(LeanServerOptions options);
  ~LeanApiServer();  // Stop()
  LeanApiServer(const LeanApiServer&) = delete;
  LeanApiServer& operator=(const LeanApiServer&) = delete;

  // Before Start(): adds an object (with kind and apiVersion) at the end of its resource's LIST
  // order; its resourceVersion is the next one.
  void Preload(Resource resource, nlohmann::json object);
  // Before Start(): renders and gzips the pages a client paging with `limit` will ask for.
  void PrecompressPages(int64_t limit);

  absl::Status Start();
  void Stop();
  int port() const { return port_; }

  // Parses and stages one change; it is invisible until Release(). `type` is ADDED, MODIFIED
  // or DELETED; `object` the object's new (for DELETED: last) state.
  absl::Status Stage(Resource resource, const std::string& type, nlohmann::json object);
  // Publishes every staged change in order; returns the newest resourceVersion.
  uint64_t Release();
  // Forgets the watch history and moves the resourceVersion on by one (as a write to another
  // type would): a watch resuming from any position up to now gets 410 Gone.
  void Compact();
  // Ends every open watch stream now.
  void DropWatches();
  // Counters and timings as JSON (see the .cc for the fields).
  nlohmann::json Stats();

 private:
  struct Entry {
    std::string key;
    std::string item;  // the object without kind/apiVersion, as a LIST item
    bool live = true;
  };
  struct Event {
    uint64_t rv;
    std::string line;  // {"type":...,"object":...}\n
  };
  struct Store {
    std::vector<Entry> entries;  // LIST order
    absl::flat_hash_map<std::string, size_t> index;
    size_t live = 0;
    uint64_t modified_rv = 0;  // last change (continue tokens from before it expire)
    std::deque<Event> history;
    uint64_t compacted_rv = 0;  // watches from before this get 410
    int64_t first_list_done_ns = 0;
    int64_t lists = 0;
    int64_t pages = 0;
  };
  struct Staged {
    Resource resource;
    std::string key;
    bool deleted;
    std::string item;
    Event event;
  };
  struct Watch {
    Resource resource;
    uint64_t cursor = 0;  // events up to here are written
    bool bookmarks = false;
    absl::Time deadline;
    absl::Time next_bookmark;
    int drop_generation = 0;
    std::deque<std::string> pending;
    bool finish_after_pending = false;
  };

  void Handle(const httplib::Request& req, httplib::Response& res);
  void List(Resource resource, const httplib::Request& req, httplib::Response& res);
  void StartWatch(Resource resource, const httplib::Request& req, httplib::Response& res);
  bool WatchStep(Watch& watch, httplib::DataSink& sink);
  void Control(const httplib::Request& req, httplib::Response& res);
  std::string RenderPage(Resource resource, size_t start, int64_t limit, uint64_t list_rv,
                         size_t* next) const;
  void RecordListDone(Resource resource, bool last_page, bool ok);

  const LeanServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Store stores_[kResourceCount];
  uint64_t rv_ = 1;         // published
  uint64_t staged_rv_ = 1;  // handed out to staged changes
  std::vector<Staged> staged_;
  std::vector<std::shared_ptr<Watch>> watches_;  // open streams
  int drop_generation_ = 0;
  bool stopping_ = false;
  struct CachedPage {
    std::shared_ptr<const std::string> gzipped;
    size_t raw_bytes = 0;
    size_t next = 0;  // where the next page starts; 0 for the last page
  };
  // (resource, start, limit, rv) -> page, dropped on any change
  absl::flat_hash_map<std::string, CachedPage> page_cache_;

  std::atomic<int64_t> first_list_ns_{0};
  std::atomic<int64_t> list_bytes_{0};
  std::atomic<int64_t> list_wire_bytes_{0};
  std::atomic<int64_t> watches_started_{0};
  std::atomic<int64_t> watches_open_{0};
  std::atomic<int64_t> gone_sent_{0};
  std::atomic<int64_t> bookmarks_sent_{0};
  std::atomic<int64_t> events_sent_{0};
  std::atomic<int64_t> expired_continues_{0};
  std::atomic<bool> client_accepts_gzip_{false};
};

}  // namespace dralens::bench::scale
