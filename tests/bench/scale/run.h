// ScaleRun: one run of RunOne (runner.h): processes, ready time and scrapes in runner.cc,
// event batches and watch restarts in run_events.cc. Internal to the benchmark.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "tests/bench/scale/child.h"
#include "tests/bench/scale/events.h"
#include "tests/bench/scale/fleet.h"
#include "tests/bench/scale/runner.h"
#include "tests/bench/scale/truth.h"
#include "tests/bench/scale/verify.h"

namespace dralens::bench::scale {

class ScaleRun {
 public:
  explicit ScaleRun(const RunOptions& options);
  RunResult Go();

 private:
  void Log(const std::string& line);
  void Fail(const std::string& why);
  void Execute();
  bool StartServer(const FleetOptions& fleet_options);
  bool StartDralens();
  void Corrupt(Truth& truth) const;
  nlohmann::json ServerStats();
  // A scrape in the given format; its wall time in milliseconds.
  std::optional<std::string> Fetch(const char* accept, double* ms);
  // Scrapes (classic text) and compares with the truth.
  VerifyResult Check(std::string* body = nullptr);
  bool WaitReady();
  // Sums of the per-device families, if the binary exports them, next to the physical truth:
  // they count published devices (once per matching class), not GPUs.
  void LogDeviceFamilies();
  void MeasureScrapes();
  void MeasureIdle();
  // Waits until dralens' CPU clock stands still for kIdleWindow; returns the clock then.
  int64_t WaitIdle(absl::Duration timeout);
  bool WaitDelivered(const std::set<std::string>& plurals, uint64_t rv, absl::Duration timeout);
  // Draws up to `n` events, sends them as one batch, and verifies the result. Adds the figures
  // to `fig` when the batch verified.
  bool Batch(const std::function<std::optional<WatchEvent>()>& next, int n, KindFigures& fig);
  void DriveEvents();
  int64_t SumOver(const nlohmann::json& stats, const char* field);
  bool AllWatching(const nlohmann::json& stats);
  // Dropped watches must resume from their resourceVersion without a LIST; a watch answered
  // 410 Gone must relist, and no scrape in between may differ from the truth (nothing changed).
  void WatchRestarts();
  void Finish();

  RunOptions o_;
  RunResult r_;
  Fleet fleet_;
  Truth truth_;
  std::unique_ptr<Child> server_;
  std::unique_ptr<Child> dralens_;
  std::unique_ptr<httplib::Client> control_;
  std::unique_ptr<httplib::Client> metrics_;
  int server_port_ = 0;
  int metrics_port_ = 0;
  int64_t exec_ns_ = 0;
  double last_claims_ = 0;
  Scrape last_scrape_;
  double harness_cpu0_ = 0;
};

}  // namespace dralens::bench::scale
