// What the soak driver reads of the processes it runs: their RSS, the metrics port they log,
// samples of their /metrics, and a killer that sends SIGKILL the moment a node commits its
// checkpoint.
#pragma once

#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <string>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dralens::bench::soak {

inline int64_t RssKiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    int64_t kib = 0;
    if (absl::StartsWith(line, "VmRSS:") &&
        absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(line.substr(6)), " kB"),
                         &kib)) {
      return kib;
    }
  }
  return -1;
}

inline int MetricsPort(const std::string& output) {
  std::smatch m;
  std::string last;
  std::regex re(R"(serving metrics"? address=\S+ port=(\d+))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re);
       it != std::sregex_iterator(); ++it) {
    last = (*it)[1];
  }
  return last.empty() ? 0 : std::stoi(last);
}

inline double Scrape(int port, const std::string& series) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(5, 0);
  auto res = c.Get("/metrics");
  if (!res || res->status != 200) {
    return -1;
  }
  for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
    if (absl::StartsWith(line, series + " ")) {
      double v = 0;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) {
        return v;
      }
    }
  }
  return -1;
}

// The sum of every sample of `family` whose labels contain `label` ("" for all), or -1.
inline double ScrapeSum(int port, const std::string& family, const std::string& label) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(5, 0);
  auto res = c.Get("/metrics");
  if (!res || res->status != 200) {
    return -1;
  }
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
    if (!absl::StartsWith(line, family + "{") || !absl::StrContains(line, label)) {
      continue;
    }
    double v = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) {
      sum += v;
    }
  }
  return sum;
}

// Kills a process with SIGKILL, from a thread of its own, the moment it commits its checkpoint
// (the atomic rename into `dir`) for the (skip+1)th time by a prepare (an entry new or changed)
// or, with `unprepare`, by an unprepare (an entry gone): armed once the node serves, the kill
// lands inside the NodePrepareResources or NodeUnprepareResources call that wrote it, before
// its answer (after PrepareStarted, after PrepareCompleted, or after the entry went). Which
// call is chosen, since each workload step finishes runs before it starts new ones: the first
// write after a restart is nearly always an unprepare's.
class CheckpointKiller {
 public:
  ~CheckpointKiller() { Disarm(); }

  using States = std::map<std::string, std::string>;  // checkpoint: uid -> state

  // `read_states` reads the checkpoint's claims; it is called on the killer's thread.
  bool Arm(pid_t pid, const std::string& dir, bool unprepare, int skip,
           std::function<States()> read_states) {
    Disarm();
    fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd_ < 0 || inotify_add_watch(fd_, dir.c_str(), IN_MOVED_TO) < 0) {
      return false;
    }
    stop_ = false;
    fired_ = false;
    before_ = read_states();
    thread_ =
        std::thread([this, pid, unprepare, skip, read_states = std::move(read_states)]() mutable {
          alignas(inotify_event) char buf[4096];
          while (!stop_) {
            pollfd p{fd_, POLLIN, 0};
            if (poll(&p, 1, 20) <= 0) {
              continue;
            }
            const ssize_t n = read(fd_, buf, sizeof(buf));
            for (ssize_t i = 0; i < n;) {
              const auto* e = reinterpret_cast<const inotify_event*>(buf + i);
              if (e->len > 0 && std::string(e->name) == "checkpoint.json") {
                States now = read_states();
                const bool gone = UnpreparedSince(now);
                if (gone == unprepare && skip-- == 0) {
                  kill(pid, SIGKILL);
                  fired_ = true;
                  unprepare_ = gone;
                  return;
                }
                before_ = std::move(now);
              }
              i += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
            }
          }
        });
    return true;
  }

  // Stops watching; returns whether it killed.
  bool Disarm() {
    stop_ = true;
    if (thread_.joinable()) {
      thread_.join();
    }
    if (fd_ >= 0) {
      close(fd_);
      fd_ = -1;
    }
    return fired_;
  }

  // Whether the write it killed at was an unprepare's (an entry gone), not a prepare's (an entry
  // new or changed). Valid after Disarm() returned true.
  bool unprepare() const { return unprepare_; }

 private:
  bool UnpreparedSince(const States& now) const {
    return std::any_of(before_.begin(), before_.end(),
                       [&](const auto& e) { return now.count(e.first) == 0; });
  }

  int fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{true};
  std::atomic<bool> fired_{false};
  States before_;  // the checkpoint before the write it watches for
  bool unprepare_ = false;
};

}  // namespace dralens::bench::soak
