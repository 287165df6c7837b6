// LeanApiServer (lean_api_server.h): watch streams.
#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/bench/scale/lean_api_server.h"
#include "tests/bench/scale/lean_http.h"

namespace dralens::bench::scale {

using lean_http::Fail;
using lean_http::Index;
using lean_http::IsTrue;
using lean_http::kJson;
using lean_http::kWatchPoll;
using lean_http::StatusBody;

void LeanApiServer::StartWatch(Resource resource, const httplib::Request& req,
                               httplib::Response& res) {
  auto w = std::make_shared<Watch>();
  w->resource = resource;
  w->bookmarks = IsTrue(req, "allowWatchBookmarks");
  int64_t timeout_seconds = 1800;
  const std::string timeout_text = req.get_param_value("timeoutSeconds");
  if (!timeout_text.empty() &&
      (!absl::SimpleAtoi(timeout_text, &timeout_seconds) || timeout_seconds < 0)) {
    Fail(res, 400, "BadRequest", absl::StrCat("invalid timeoutSeconds \"", timeout_text, "\""));
    return;
  }
  if (timeout_seconds == 0) {
    timeout_seconds = 1800;
  }
  const absl::Time now = absl::Now();
  w->deadline = now + absl::Seconds(timeout_seconds);
  w->next_bookmark = now + options_.bookmark_interval;
  const std::string rv_text = req.get_param_value("resourceVersion");
  const ResourceInfo& info = InfoOf(resource);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Store& store = stores_[Index(resource)];
    w->drop_generation = drop_generation_;
    uint64_t want = 0;
    if (rv_text.empty() || rv_text == "0") {
      // Legacy "from now" watch: synthetic ADDED events for what exists.
      for (const Entry& e : store.entries) {
        if (e.live) {
          w->pending.push_back(absl::StrCat("{\"type\":\"ADDED\",\"object\":{\"kind\":\"",
                                            info.kind, "\",\"apiVersion\":\"", info.api_version,
                                            "\",", e.item.substr(1), "}\n"));
        }
      }
      want = rv_;
    } else if (!absl::SimpleAtoi(rv_text, &want)) {
      Fail(res, 400, "BadRequest", absl::StrCat("invalid resource version \"", rv_text, "\""));
      return;
    } else if (want > rv_) {
      w->pending.push_back(absl::StrCat(
          "{\"type\":\"ERROR\",\"object\":",
          StatusBody(504, "Timeout",
                     absl::StrCat("Too large resource version: ", want, ", current: ", rv_)),
          "}\n"));
      w->finish_after_pending = true;
    } else if (want < store.compacted_rv) {
      gone_sent_.fetch_add(1);
      w->pending.push_back(absl::StrCat("{\"type\":\"ERROR\",\"object\":",
                                        StatusBody(410, "Expired",
                                                   absl::StrCat("too old resource version: ", want,
                                                                " (", store.compacted_rv, ")")),
                                        "}\n"));
      w->finish_after_pending = true;
    }
    w->cursor = want;
    watches_.push_back(w);
  }
  watches_started_.fetch_add(1);
  watches_open_.fetch_add(1);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache, private");
  res.set_chunked_content_provider(
      kJson, [this, w](size_t, httplib::DataSink& sink) { return WatchStep(*w, sink); },
      [this, w](bool) {
        watches_open_.fetch_sub(1);
        std::lock_guard<std::mutex> lock(mu_);
        watches_.erase(std::remove(watches_.begin(), watches_.end(), w), watches_.end());
      });
}

bool LeanApiServer::WatchStep(Watch& w, httplib::DataSink& sink) {
  auto flush = [&]() -> bool {
    while (!w.pending.empty()) {
      const std::string& line = w.pending.front();
      if (!sink.write(line.data(), line.size())) {
        return false;
      }
      w.pending.pop_front();
    }
    return true;
  };
  if (!flush()) {
    return false;
  }
  if (w.finish_after_pending) {
    sink.done();
    return true;
  }
  const ResourceInfo& info = InfoOf(w.resource);
  bool finish = false;
  uint64_t cursor = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    Store& store = stores_[Index(w.resource)];
    auto news = [&] {
      return stopping_ || drop_generation_ != w.drop_generation ||
             (!store.history.empty() && store.history.back().rv > w.cursor) ||
             store.compacted_rv > w.cursor;
    };
    absl::Time wake = std::min(absl::Now() + kWatchPoll, w.deadline);
    if (w.bookmarks) {
      wake = std::min(wake, w.next_bookmark);
    }
    while (!news()) {
      const absl::Duration left = wake - absl::Now();
      if (left <= absl::ZeroDuration()) {
        break;
      }
      cv_.wait_for(lock, absl::ToChronoNanoseconds(left));
    }
    if (stopping_ || drop_generation_ != w.drop_generation) {
      finish = true;
    } else if (store.compacted_rv > w.cursor) {
      gone_sent_.fetch_add(1);
      w.pending.push_back(absl::StrCat(
          "{\"type\":\"ERROR\",\"object\":",
          StatusBody(
              410, "Expired",
              absl::StrCat("too old resource version: ", w.cursor, " (", store.compacted_rv, ")")),
          "}\n"));
      w.finish_after_pending = true;
    } else {
      auto it = std::upper_bound(store.history.begin(), store.history.end(), w.cursor,
                                 [](uint64_t rv, const Event& e) { return rv < e.rv; });
      for (; it != store.history.end(); ++it) {
        w.pending.push_back(it->line);
        events_sent_.fetch_add(1);
      }
      cursor = rv_;
    }
  }
  const absl::Time now = absl::Now();
  if (!finish && !w.finish_after_pending && w.bookmarks && now >= w.next_bookmark) {
    w.pending.push_back(absl::StrCat("{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"", info.kind,
                                     "\",\"apiVersion\":\"", info.api_version,
                                     "\",\"metadata\":{\"resourceVersion\":\"", cursor, "\"}}}\n"));
    bookmarks_sent_.fetch_add(1);
    w.next_bookmark = now + options_.bookmark_interval;
  }
  if (!finish && !flush()) {
    return false;
  }
  if (cursor != 0) {
    std::lock_guard<std::mutex> lock(mu_);
    w.cursor = cursor;  // written: the harness waits on this
  }
  if (finish || w.finish_after_pending || now >= w.deadline) {
    if (w.finish_after_pending && !flush()) {
      return false;
    }
    sink.done();
  }
  return true;
}

}  // namespace dralens::bench::scale
