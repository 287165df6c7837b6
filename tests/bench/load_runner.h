// A load of N workers at once, each timing its iterations after a shared warm-up, and the
// nearest-rank percentiles of what they timed.
#pragma once

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

namespace dralens::bench {

using Clock = std::chrono::steady_clock;

struct Summary {
  size_t count = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0;  // milliseconds
  double per_second = 0;                      // completed calls per second of wall time
};

// Nearest-rank percentiles.
inline Summary Summarize(std::vector<double> ms, double wall_seconds) {
  Summary s;
  s.count = ms.size();
  if (ms.empty()) {
    return s;
  }
  std::sort(ms.begin(), ms.end());
  auto at = [&](double p) {
    size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(ms.size())));
    return ms[std::clamp<size_t>(rank, 1, ms.size()) - 1];
  };
  s.p50 = at(0.50);
  s.p90 = at(0.90);
  s.p99 = at(0.99);
  s.max = ms.back();
  s.per_second = wall_seconds > 0 ? static_cast<double>(ms.size()) / wall_seconds : 0;
  return s;
}

inline double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// What one worker's iteration measured: the prepare (or its floor) and the unprepare (or its);
// for the floor also its two parts.
struct Sample {
  double prepare_ms = 0;
  double unprepare_ms = 0;
  double get_ms = 0;
  double writes_ms = 0;
};

struct LoadResult {
  Summary prepare;
  Summary unprepare;
  Summary get;
  Summary writes;
};

// Runs `threads` workers at once. Each does `warmup` untimed iterations, all meet, then each
// does up to `per_thread` timed ones, stopping early once `max_seconds` have passed.
inline LoadResult RunLoad(int threads, int warmup, int per_thread, double max_seconds,
                          const std::function<Sample(int worker)>& iteration) {
  std::vector<std::vector<Sample>> samples(threads);
  Clock::time_point start;
  Clock::time_point deadline;
  std::barrier sync(threads, [&]() noexcept {
    start = Clock::now();
    deadline = start + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(max_seconds));
  });
  std::vector<std::thread> workers;
  std::vector<Clock::time_point> ends(threads);
  for (int w = 0; w < threads; ++w) {
    workers.emplace_back([&, w] {
      for (int i = 0; i < warmup; ++i) {
        iteration(w);
      }
      sync.arrive_and_wait();
      samples[w].reserve(per_thread);
      for (int i = 0; i < per_thread && Clock::now() < deadline; ++i) {
        samples[w].push_back(iteration(w));
      }
      ends[w] = Clock::now();
    });
  }
  for (std::thread& t : workers) {
    t.join();
  }
  const double wall =
      std::chrono::duration<double>(*std::max_element(ends.begin(), ends.end()) - start).count();
  std::vector<double> prepare;
  std::vector<double> unprepare;
  std::vector<double> get;
  std::vector<double> writes;
  for (const std::vector<Sample>& per_worker : samples) {
    for (const Sample& s : per_worker) {
      prepare.push_back(s.prepare_ms);
      unprepare.push_back(s.unprepare_ms);
      get.push_back(s.get_ms);
      writes.push_back(s.writes_ms);
    }
  }
  return {Summarize(std::move(prepare), wall), Summarize(std::move(unprepare), wall),
          Summarize(std::move(get), wall), Summarize(std::move(writes), wall)};
}

}  // namespace dralens::bench
