#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/sim/api_server_internal.h"

namespace dralens::sim {

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

}  // namespace dralens::sim
