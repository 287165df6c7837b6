// Runner: one measured run of the real `dralens cluster` against scale_apiserver.
//
//   1. generates the fleet (claims, seed, epoch) for the truth, and starts scale_apiserver in
//      its own process with the same parameters and the chosen LIST order;
//   2. starts `dralens cluster --kubeconfig=...` and polls /readyz, then /metrics until a
//      scrape matches the truth (verify.h). "ready" is when that scrape has been read, measured
//      from three points: the exec of dralens, its first LIST request arriving at the server,
//      and the server having answered the last page of every resource's first LIST;
//   3. reads peak RSS (VmHWM) and RSS, times scrapes in classic text and OpenMetrics;
//   4. drives watch events per kind and then mixed (events.h). For every batch: stage at the
//      server, read dralens' CPU clock, release, wait until every watch stream of a touched
//      resource has been written past the batch and dralens has gone idle, read the CPU clock,
//      then verify a scrape against the truth. Only verified batches count; the CPU of
//      verification scrapes is not counted.
// A mismatch anywhere is printed as a diff and makes the run fail.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dralens::bench::scale {

struct RunOptions {
  int claims = 1000;
  uint64_t seed = 1;
  std::string order = "name";
  std::string dralens_binary;
  std::string server_binary;
  std::string work_dir;    // kubeconfig and logs
  std::string list_delay;  // scale_apiserver --list-delay, e.g. "resourceslices:3000"
  // The CPUs dralens may run on (sched_setaffinity before its exec); empty: any.
  std::vector<int> dralens_cpus;
  // Watch events the server keeps per resource (scale_apiserver --history); 0: its default.
  size_t server_history = 0;
  absl::Duration ready_timeout = absl::Seconds(300);
  int scrapes = 20;  // per format
  bool events = true;
  // Ready and the relist check accept a scrape that lacks some family (the check of a binary
  // that does not export every family yet); by default every family must be there.
  bool allow_missing_families = false;
  int events_per_kind = 2000;  // the most per kind; fewer when a batch would exceed the budget
  int mixed_events = 10000;
  double batch_cpu_budget_s = 10;  // the most dralens CPU one batch may take (estimated)
  bool measure_idle = true;        // 2 s of dralens' CPU at rest
  // Fails verification on purpose (the smoke test's check that a wrong truth is caught).
  bool corrupt_truth = false;
  bool verbose = true;  // progress lines on stdout
};

struct KindFigures {
  std::string kind;
  int events = 0;
  int batches = 0;
  double cpu_s = 0;   // dralens CPU over the verified batches
  double wall_s = 0;  // release to idle
  // dralens CPU over the verified batches by thread name (Child::ThreadCpuNanos): which threads
  // the events cost, and where a run that costs more than another spent it.
  std::map<std::string, double> thread_cpu_s;
  // Events of each kind in the verified batches: what a mixed figure is a mix of. At 1k claims
  // the mix settles into a steady state; at 100k 15,000 events touch a few per cent of the fleet.
  std::map<std::string, int> by_kind;
  bool ok = true;
};

struct Percentiles {
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
};

struct RunResult {
  int claims = 0;
  std::string order;
  bool ok = false;  // ready, and every verified figure matched
  bool ready = false;
  std::string failure;     // why not ok
  std::string verified;    // family summary of the first correct scrape
  int64_t list_bytes = 0;  // bytes of the first LISTs (uncompressed)
  double ready_from_exec_s = 0;
  double ready_from_first_list_s = 0;
  double ready_from_lists_answered_s = 0;
  double readyz_from_exec_s = 0;
  int wrong_scrapes_before_ready = 0;
  double claims_analysed_at_timeout = 0;
  double cpu_to_ready_s = 0;
  int64_t peak_rss_after_sync = 0;
  int64_t rss_after_sync = 0;
  int64_t peak_rss_end = 0;
  Percentiles scrape_text;
  Percentiles scrape_openmetrics;
  int64_t body_text = 0;
  int64_t body_openmetrics = 0;
  int64_t series = 0;
  double idle_cpu_per_s = 0;
  std::vector<KindFigures> kinds;  // per kind, then "mixed"
  double relist_s = 0;             // 410 Gone to relisted (and a correct scrape)
  int64_t relist_gone = 0;         // 410s the server sent
  std::string load_average;        // /proc/loadavg at the start and the end
  // The harness's own cost.
  double server_cpu_s = 0;
  int64_t server_peak_rss = 0;
  double server_setup_s = 0;
  double harness_cpu_s = 0;
  int64_t harness_peak_rss = 0;
};

RunResult RunOne(const RunOptions& options);

}  // namespace dralens::bench::scale
