#include <algorithm>
#include <deque>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tests/bench/scale/lean_api_server.h"
#include "tests/bench/scale/run.h"

namespace dralens::bench::scale {
namespace {

using nlohmann::json;

constexpr int kStageChunk = 2000;
// Quiet means less than this much CPU over the window below.
constexpr int64_t kIdleCpuNanos = 1000000;
constexpr absl::Duration kIdleWindow = absl::Milliseconds(50);

// "w:resourceclaims 12.1 us, w:pods 9.8 us, ...": each thread's CPU per event, the costliest
// first; threads under 1 % of the whole are left out.
std::string ByThread(const KindFigures& fig) {
  std::vector<std::pair<double, std::string>> threads;
  double total = 0;
  for (const auto& [name, s] : fig.thread_cpu_s) {
    threads.emplace_back(s, name);
    total += s;
  }
  std::sort(threads.rbegin(), threads.rend());
  std::string out;
  for (const auto& [s, name] : threads) {
    if (s >= 0.01 * total) {
      absl::StrAppend(&out, out.empty() ? "" : ", ", name,
                      absl::StrFormat(" %.1f us", 1e6 * s / fig.events));
    }
  }
  return out;
}

}  // namespace

// Waits until dralens' CPU clock stands still for kIdleWindow; returns the clock then.
int64_t ScaleRun::WaitIdle(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::deque<std::pair<absl::Time, int64_t>> samples;
  while (absl::Now() < deadline) {
    const absl::Time now = absl::Now();
    const int64_t cpu = dralens_->CpuNanos();
    samples.emplace_back(now, cpu);
    while (samples.size() > 1 && now - samples[1].first >= kIdleWindow) {
      samples.pop_front();
    }
    if (now - samples.front().first >= kIdleWindow &&
        cpu - samples.front().second < kIdleCpuNanos) {
      return samples.front().second;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return -1;
}

bool ScaleRun::WaitDelivered(const std::set<std::string>& plurals, uint64_t rv,
                             absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    json stats = ServerStats();
    bool all = stats.contains("resources");
    for (const std::string& plural : plurals) {
      const json& s = stats["resources"][plural];
      all = all && s.value("open_watches", 0) > 0 && s.value("delivered_rv", uint64_t{0}) >= rv;
    }
    if (all) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return false;
}

// Draws up to `n` events, sends them as one batch, and verifies the result. Adds the figures
// to `fig` when the batch verified.
bool ScaleRun::Batch(const std::function<std::optional<WatchEvent>()>& next, int n,
                     KindFigures& fig) {
  std::vector<std::string> lines;
  std::set<std::string> plurals;
  std::map<std::string, int> by_kind;
  for (int i = 0; i < n; ++i) {
    std::optional<WatchEvent> e = next();
    if (!e.has_value()) {
      break;
    }
    ++by_kind[ToString(e->kind)];
    plurals.insert(InfoOf(e->resource).plural);
    lines.push_back(absl::StrCat(e->type, " ", InfoOf(e->resource).plural, " ", e->object.dump()));
  }
  if (lines.empty()) {
    return true;
  }
  for (size_t i = 0; i < lines.size(); i += kStageChunk) {
    std::string body;
    for (size_t j = i; j < std::min(lines.size(), i + kStageChunk); ++j) {
      absl::StrAppend(&body, lines[j], "\n");
    }
    httplib::Result res = control_->Post("/bench/stage", body, "text/plain");
    if (!res || res->status != 200) {
      Fail(absl::StrCat("staging events failed: ", res ? res->body : "no answer"));
      return false;
    }
  }
  truth_ = ComputeTruth(fleet_);
  Corrupt(truth_);
  // A watch that falls further behind than the server's history relists, and a relist's CPU is
  // not the events' (a batch larger than --history of one resource can cause it).
  const int64_t lists0 = SumOver(ServerStats(), "lists");
  const std::map<std::string, int64_t> threads0 = dralens_->ThreadCpuNanos();
  const int64_t cpu0 = dralens_->CpuNanos();
  const int64_t t0 = MonotonicNanos();
  httplib::Result released = control_->Post("/bench/release", "", "text/plain");
  if (!released || released->status != 200) {
    Fail("release failed");
    return false;
  }
  const uint64_t rv = json::parse(released->body).value("rv", uint64_t{0});
  const absl::Duration timeout =
      std::max(absl::Seconds(120), absl::Seconds(20 * o_.batch_cpu_budget_s));
  if (!WaitDelivered(plurals, rv, timeout)) {
    Fail(absl::StrCat(fig.kind, ": the server could not deliver the batch to dralens' watches"));
    return false;
  }
  // CPU of verification scrapes that failed (the batch was not done yet) is not the batch's.
  int64_t failed_scrape_cpu = 0;
  std::map<std::string, int64_t> failed_scrape_threads;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const int64_t idle_cpu = WaitIdle(timeout);
    const int64_t t_idle = MonotonicNanos();
    if (idle_cpu < 0) {
      Fail(absl::StrCat(fig.kind, ": dralens did not go idle within ",
                        absl::FormatDuration(timeout)));
      return false;
    }
    const int64_t before = dralens_->CpuNanos();
    const std::map<std::string, int64_t> threads_before = dralens_->ThreadCpuNanos();
    VerifyResult v = Check();
    if (v.ok()) {
      if (const int64_t lists = SumOver(ServerStats(), "lists") - lists0; lists != 0) {
        Fail(absl::StrCat(fig.kind, " batch of ", lines.size(), " events: dralens relisted (",
                          lists,
                          " LIST requests) during the batch, so its CPU is not the "
                          "events'; a watch fell behind the server's history (send fewer events "
                          "per batch)"));
        return false;
      }
      fig.events += static_cast<int>(lines.size());
      ++fig.batches;
      for (const auto& [kind, count] : by_kind) {
        fig.by_kind[kind] += count;
      }
      fig.cpu_s += (idle_cpu - cpu0 - failed_scrape_cpu) / 1e9;
      fig.wall_s += (t_idle - t0) / 1e9;
      for (const auto& [name, nanos] : threads_before) {
        auto start = threads0.find(name);
        const int64_t spent =
            nanos - (start == threads0.end() ? 0 : start->second) - failed_scrape_threads[name];
        fig.thread_cpu_s[name] += spent / 1e9;
      }
      return true;
    }
    failed_scrape_cpu += dralens_->CpuNanos() - before;
    for (const auto& [name, nanos] : dralens_->ThreadCpuNanos()) {
      auto start = threads_before.find(name);
      failed_scrape_threads[name] += nanos - (start == threads_before.end() ? 0 : start->second);
    }
    if (attempt == 3) {
      fig.ok = false;
      Fail(absl::StrCat(fig.kind, " batch of ", lines.size(),
                        " events: the scrape differs from the truth:\n", v.Diff()));
      return false;
    }
    absl::SleepFor(absl::Seconds(1));
  }
  return false;
}

void ScaleRun::DriveEvents() {
  EventGenerator gen(fleet_, o_.seed);
  auto run_kind = [&](const std::string& name,
                      const std::function<std::optional<WatchEvent>()>& next, int limit,
                      int probe) -> bool {
    KindFigures fig;
    fig.kind = name;
    bool ok = Batch(next, std::min(probe, limit), fig);
    if (ok && fig.events > 0 && fig.events < limit) {
      const double per_event = std::max(fig.cpu_s / fig.events, 1e-7);
      const int more =
          std::min(limit - fig.events, static_cast<int>(o_.batch_cpu_budget_s / per_event));
      if (more > 0) {
        ok = Batch(next, more, fig);
      }
    }
    if (fig.events > 0) {
      Log(
          absl::StrFormat("%-10s %6d events in %d verified batches: %9.1f us CPU per event, "
                          "%8.0f events per CPU-second",
                          name, fig.events, fig.batches, 1e6 * fig.cpu_s / fig.events,
                          fig.cpu_s > 0 ? fig.events / fig.cpu_s : 0.0));
      Log(absl::StrCat(name, " CPU by thread: ", ByThread(fig)));
      if (fig.by_kind.size() > 1) {
        Log(absl::StrCat(
            name, " events by kind: ", absl::StrJoin(fig.by_kind, ", ", absl::PairFormatter(" "))));
      }
    } else if (ok) {
      Log(absl::StrCat(name, ": nothing eligible"));
    }
    r_.kinds.push_back(fig);
    return ok;
  };
  for (EventKind kind : kEventKinds) {
    if (!run_kind(
            ToString(kind), [&gen, kind] { return gen.Next(kind); }, o_.events_per_kind, 10)) {
      return;
    }
  }
  if (run_kind(
          "mixed", [&gen] { return gen.NextMixed(); }, o_.mixed_events, 50)) {
    WatchRestarts();
  }
}

int64_t ScaleRun::SumOver(const json& stats, const char* field) {
  int64_t sum = 0;
  if (stats.contains("resources")) {
    for (const auto& [plural, r] : stats["resources"].items()) {
      sum += r.value(field, int64_t{0});
    }
  }
  return sum;
}

bool ScaleRun::AllWatching(const json& stats) {
  if (!stats.contains("resources")) {
    return false;
  }
  for (const auto& [plural, r] : stats["resources"].items()) {
    if (r.value("open_watches", 0) < 1) {
      return false;
    }
  }
  return true;
}

// Dropped watches must resume from their resourceVersion without a LIST; a watch answered
// 410 Gone must relist, and no scrape in between may differ from the truth (nothing changed).
void ScaleRun::WatchRestarts() {
  const absl::Duration timeout = std::max(absl::Seconds(60), o_.ready_timeout);
  json before = ServerStats();
  const int64_t lists0 = SumOver(before, "lists");
  const int64_t watches0 = before.value("watches_started", int64_t{0});
  control_->Post("/bench/drop-watches", "", "text/plain");
  absl::Time deadline = absl::Now() + timeout;
  json now = ServerStats();
  while (
      absl::Now() < deadline &&
      (now.value("watches_started", int64_t{0}) < watches0 + kResourceCount || !AllWatching(now))) {
    absl::SleepFor(absl::Milliseconds(20));
    now = ServerStats();
  }
  VerifyResult v = Check();
  const int64_t lists1 = SumOver(now, "lists");
  if (!v.ok() || lists1 != lists0 || !AllWatching(now)) {
    Fail(absl::StrFormat("dropped watches: %s, %d LISTs, watching %s\n%s",
                         v.ok() ? "scrape ok" : "scrape differs", lists1 - lists0,
                         AllWatching(now) ? "again" : "not again", v.Diff()));
    return;
  }
  Log("dropped watches: all five resumed from their resourceVersion, no LIST, scrape ok");

  // 410 Gone: compact the history, then drop the streams.
  const int64_t t0 = MonotonicNanos();
  control_->Post("/bench/compact", "", "text/plain");
  control_->Post("/bench/drop-watches", "", "text/plain");
  deadline = absl::Now() + timeout;
  int scrapes = 0;
  int wrong = 0;
  std::string diff;
  while (absl::Now() < deadline) {
    now = ServerStats();
    const bool relisted = SumOver(now, "lists") >= lists1 + kResourceCount && AllWatching(now);
    VerifyResult check = Check();
    ++scrapes;
    if (!(o_.allow_missing_families ? check.ok() : check.complete())) {
      ++wrong;
      diff = check.Diff();
    }
    if (relisted) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  r_.relist_s = (MonotonicNanos() - t0) / 1e9;
  r_.relist_gone = now.value("gone_sent", int64_t{0});
  if (SumOver(now, "lists") < lists1 + kResourceCount || wrong > 0) {
    Fail(
        absl::StrFormat("410 Gone: %d LISTs after %.1f s, %d of %d scrapes differ from the "
                        "truth\n%s",
                        SumOver(now, "lists") - lists1, r_.relist_s, wrong, scrapes, diff));
    return;
  }
  Log(absl::StrFormat("410 Gone: relisted in %.2f s; all %d scrapes during the relist matched",
                      r_.relist_s, scrapes));
}

}  // namespace dralens::bench::scale
