#include "tests/bench/scale/runner.h"

#include <httplib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "tests/bench/scale/child.h"
#include "tests/bench/scale/events.h"
#include "tests/bench/scale/fleet.h"
#include "tests/bench/scale/lean_api_server.h"
#include "tests/bench/scale/run.h"
#include "tests/bench/scale/truth.h"
#include "tests/bench/scale/verify.h"
#include "tests/testing/kubeconfig.h"

namespace dralens::bench::scale {
namespace {

using nlohmann::json;

constexpr char kTextAccept[] = "text/plain;version=0.0.4";
constexpr char kOpenMetricsAccept[] = "application/openmetrics-text;version=1.0.0";

double SelfCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec / 1e6;
}

// The 1-minute load average: the machine is shared, so every figure carries it.
std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  in >> one;
  return one;
}

Percentiles PercentilesOf(std::vector<double> ms) {
  Percentiles p;
  if (ms.empty()) {
    return p;
  }
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[std::min(ms.size() - 1, static_cast<size_t>(q * static_cast<double>(ms.size())))];
  };
  p.p50_ms = at(0.5);
  p.p99_ms = at(0.99);
  p.max_ms = ms.back();
  return p;
}

}  // namespace

ScaleRun::ScaleRun(const RunOptions& options) : o_(options) {
  r_.claims = o_.claims;
  r_.order = o_.order;
}

RunResult ScaleRun::Go() {
  Execute();
  Finish();
  return r_;
}

void ScaleRun::Log(const std::string& line) {
  if (o_.verbose) {
    std::printf("[%d %s] %s\n", o_.claims, o_.order.c_str(), line.c_str());
    std::fflush(stdout);
  }
}

void ScaleRun::Fail(const std::string& why) {
  if (r_.failure.empty()) {
    r_.failure = why;
  }
  r_.ok = false;
  Log(absl::StrCat("FAILED: ", why));
}

void ScaleRun::Execute() {
  r_.load_average = LoadAverage();
  harness_cpu0_ = SelfCpuSeconds();
  FleetOptions fleet_options;
  fleet_options.claims = o_.claims;
  fleet_options.seed = o_.seed;
  fleet_options.epoch = absl::FromUnixSeconds(absl::ToUnixSeconds(absl::Now()));
  fleet_ = Generate(fleet_options);
  if (!StartServer(fleet_options)) {
    return;
  }
  if (!StartDralens()) {
    return;
  }
  if (!WaitReady()) {
    return;
  }
  r_.ok = true;
  MeasureScrapes();
  if (o_.measure_idle) {
    MeasureIdle();
  }
  if (o_.events) {
    DriveEvents();
  }
}

bool ScaleRun::StartServer(const FleetOptions& fleet_options) {
  const std::string port_file = absl::StrCat(o_.work_dir, "/apiserver.port");
  std::remove(port_file.c_str());
  const int64_t t0 = MonotonicNanos();
  std::vector<std::string> argv = {
      o_.server_binary,
      absl::StrCat("--claims=", o_.claims),
      absl::StrCat("--seed=", o_.seed),
      absl::StrCat("--epoch=", absl::ToUnixSeconds(fleet_options.epoch)),
      absl::StrCat("--order=", o_.order),
      absl::StrCat("--port-file=", port_file)};
  if (!o_.list_delay.empty()) {
    argv.push_back(absl::StrCat("--list-delay=", o_.list_delay));
  }
  if (o_.server_history > 0) {
    argv.push_back(absl::StrCat("--history=", o_.server_history));
  }
  server_ = std::make_unique<Child>(argv, absl::StrCat(o_.work_dir, "/apiserver.log"));
  if (!server_->WaitForOutput("scale_apiserver ready", absl::Minutes(15))) {
    Fail(absl::StrCat("scale_apiserver did not start: ", server_->Output()));
    return false;
  }
  std::smatch m;
  const std::string out = server_->Output();
  if (!std::regex_search(out, m, std::regex("ready port=(\\d+)"))) {
    Fail("scale_apiserver printed no port");
    return false;
  }
  server_port_ = std::stoi(m[1]);
  r_.server_setup_s = (MonotonicNanos() - t0) / 1e9;
  control_ = std::make_unique<httplib::Client>("127.0.0.1", server_port_);
  control_->set_read_timeout(std::chrono::seconds(120));
  control_->set_keep_alive(true);
  Log(absl::StrFormat("api server up in %.1f s (%zu nodes, %zu GPUs, %zu claims, %zu pods)",
                      r_.server_setup_s, fleet_.nodes.size(), fleet_.gpus.size(),
                      fleet_.claims.size(), fleet_.pods.size()));
  return true;
}

bool ScaleRun::StartDralens() {
  const std::string kubeconfig = absl::StrCat(o_.work_dir, "/kubeconfig");
  testing::WriteKubeconfig(kubeconfig, absl::StrCat("http://127.0.0.1:", server_port_));
  truth_ = ComputeTruth(fleet_);
  Corrupt(truth_);
  exec_ns_ = MonotonicNanos();
  dralens_ = std::make_unique<Child>(
      std::vector<std::string>{o_.dralens_binary, "cluster", "--kubeconfig=" + kubeconfig,
                               "--metrics-address=127.0.0.1:0"},
      absl::StrCat(o_.work_dir, "/dralens.log"), o_.dralens_cpus);
  // The metrics port is picked by the kernel; read it from /proc (cheaper than the log).
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline && metrics_port_ == 0 && dralens_->Running()) {
    metrics_port_ = dralens_->ListeningPort();
    if (metrics_port_ == 0) {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  if (metrics_port_ == 0) {
    Fail(absl::StrCat("dralens cluster opened no metrics port: ", dralens_->Output()));
    return false;
  }
  metrics_ = std::make_unique<httplib::Client>("127.0.0.1", metrics_port_);
  metrics_->set_read_timeout(std::chrono::seconds(300));
  metrics_->set_keep_alive(true);
  return true;
}

void ScaleRun::Corrupt(Truth& truth) const {
  if (!o_.corrupt_truth) {
    return;
  }
  for (FamilyTruth& family : truth.families) {
    if (family.mode == FamilyTruth::Mode::kSum && !family.values.empty()) {
      family.values.begin()->second += 1;
      return;
    }
  }
}

json ScaleRun::ServerStats() {
  httplib::Result res = control_->Get("/bench/stats");
  if (!res || res->status != 200) {
    return json::object();
  }
  return json::parse(res->body, nullptr, false);
}

// A scrape in the given format; its wall time in milliseconds.
std::optional<std::string> ScaleRun::Fetch(const char* accept, double* ms) {
  const int64_t t0 = MonotonicNanos();
  httplib::Result res = metrics_->Get("/metrics", {{"Accept", accept}});
  if (ms != nullptr) {
    *ms = (MonotonicNanos() - t0) / 1e6;
  }
  if (!res || res->status != 200) {
    return std::nullopt;
  }
  return std::move(res->body);
}

// Scrapes (classic text) and compares with the truth.
VerifyResult ScaleRun::Check(std::string* body) {
  VerifyResult result;
  std::optional<std::string> text = Fetch(kTextAccept, nullptr);
  if (!text.has_value()) {
    FamilyResult f;
    f.family = "/metrics";
    f.status = FamilyResult::Status::kMismatch;
    f.diff.push_back("scrape failed");
    result.families.push_back(f);
    return result;
  }
  absl::StatusOr<Scrape> parsed = ParseExposition(*text);
  if (!parsed.ok()) {
    FamilyResult f;
    f.family = "/metrics";
    f.status = FamilyResult::Status::kMismatch;
    f.diff.push_back(std::string(parsed.status().message()));
    result.families.push_back(f);
    return result;
  }
  last_claims_ = SumOf(*parsed, "dralens_cluster_claims");
  if (body != nullptr) {
    *body = std::move(*text);
  }
  VerifyResult v = Verify(*parsed, truth_);
  last_scrape_ = std::move(*parsed);
  return v;
}

bool ScaleRun::WaitReady() {
  const absl::Time deadline = absl::Now() + o_.ready_timeout;
  bool readyz = false;
  VerifyResult last;
  while (absl::Now() < deadline) {
    if (!dralens_->Running()) {
      Fail(absl::StrCat("dralens cluster exited: ", dralens_->Output()));
      return false;
    }
    if (!readyz) {
      httplib::Result res = metrics_->Get("/readyz");
      if (!res || res->status != 200) {
        absl::SleepFor(absl::Milliseconds(20));
        continue;
      }
      readyz = true;
      r_.readyz_from_exec_s = (MonotonicNanos() - exec_ns_) / 1e9;
    }
    const int64_t t0 = MonotonicNanos();
    std::string body;
    last = Check(&body);
    const int64_t t1 = MonotonicNanos();
    if (o_.allow_missing_families ? last.ok() : last.complete()) {
      // Kept for reading what else the binary exports (e.g. the per-device families).
      std::ofstream(absl::StrCat(o_.work_dir, "/metrics-at-ready.txt")) << body;
      r_.ready = true;
      r_.verified = last.Summary();
      r_.ready_from_exec_s = (t1 - exec_ns_) / 1e9;
      r_.cpu_to_ready_s = dralens_->CpuNanos() / 1e9;
      json stats = ServerStats();
      const int64_t first_list = stats.value("first_list_ns", int64_t{0});
      int64_t answered = 0;
      for (const auto& [plural, s] : stats["resources"].items()) {
        answered = std::max(answered, s.value("first_list_done_ns", int64_t{0}));
      }
      r_.list_bytes = stats.value("list_bytes", int64_t{0});
      r_.ready_from_first_list_s = (t1 - first_list) / 1e9;
      r_.ready_from_lists_answered_s = (t1 - answered) / 1e9;
      r_.peak_rss_after_sync = dralens_->StatusBytes("VmHWM:");
      r_.rss_after_sync = dralens_->StatusBytes("VmRSS:");
      Log(absl::StrFormat(
          "ready: %.2f s from exec, %.2f s from the first LIST, %.2f s after the LISTs were "
          "answered (/readyz at %.2f s, %d wrong scrapes before, %.2f s CPU); peak RSS %.0f "
          "MB, RSS %.0f MB; %s",
          r_.ready_from_exec_s, r_.ready_from_first_list_s, r_.ready_from_lists_answered_s,
          r_.readyz_from_exec_s, r_.wrong_scrapes_before_ready, r_.cpu_to_ready_s,
          r_.peak_rss_after_sync / 1e6, r_.rss_after_sync / 1e6, r_.verified));
      LogDeviceFamilies();
      return true;
    }
    ++r_.wrong_scrapes_before_ready;
    const double took_ms = (t1 - t0) / 1e6;
    absl::SleepFor(absl::Milliseconds(std::clamp(took_ms, 50.0, 1000.0)));
  }
  if (!readyz) {
    last = Check();  // not ready: how far did it get?
  }
  r_.claims_analysed_at_timeout = last_claims_;
  r_.list_bytes = ServerStats().value("list_bytes", int64_t{0});
  r_.peak_rss_end = dralens_->StatusBytes("VmHWM:");
  Fail(absl::StrFormat(
      "not ready after %.0f s (readyz %s, %.0f claims analysed, peak RSS %.0f "
      "MB)%s%s",
      absl::ToDoubleSeconds(o_.ready_timeout), readyz ? "200" : "not 200", last_claims_,
      r_.peak_rss_end / 1e6, readyz ? "; the last scrape differs from the truth:\n" : "",
      readyz ? last.Diff() : ""));
  return false;
}

// Sums of the per-device families, if the binary exports them, next to the physical truth:
// they count published devices (once per matching class), not GPUs.
void ScaleRun::LogDeviceFamilies() {
  auto by = [&](const char* family, const char* label) {
    std::map<std::string, double> sums;
    auto it = last_scrape_.samples.find(family);
    if (it != last_scrape_.samples.end()) {
      for (const Sample& sample : it->second) {
        auto l = sample.labels.find(label);
        sums[l == sample.labels.end() ? "" : l->second] += sample.value;
      }
    }
    std::string out;
    for (const auto& [key, value] : sums) {
      absl::StrAppend(&out, out.empty() ? "" : " ", key, "=", value);
    }
    return out;
  };
  auto truth = [](const std::map<std::string, int>& m) {
    std::string out;
    for (const auto& [key, value] : m) {
      absl::StrAppend(&out, out.empty() ? "" : " ", key, "=", value);
    }
    return out;
  };
  Log(absl::StrCat("physical truth: GPUs ", truth(truth_.gpus_by_state), "; stranded GPUs ",
                   truth(truth_.stranded_by_kind)));
  if (last_scrape_.Exports("dralens_cluster_pool_devices")) {
    Log(absl::StrCat("exported per-device family: dralens_cluster_pool_devices by state ",
                     by("dralens_cluster_pool_devices", "state"),
                     " (a device once per class it matches)"));
  }
}

void ScaleRun::MeasureScrapes() {
  std::vector<double> text_ms, om_ms;
  for (int i = 0; i < o_.scrapes; ++i) {
    double ms = 0;
    std::optional<std::string> body = Fetch(kTextAccept, &ms);
    if (body.has_value()) {
      text_ms.push_back(ms);
      r_.body_text = static_cast<int64_t>(body->size());
      if (i == 0) {
        r_.series = std::count(body->begin(), body->end(), '\n') -
                    static_cast<int64_t>(std::count(body->begin(), body->end(), '#'));
      }
    }
    body = Fetch(kOpenMetricsAccept, &ms);
    if (body.has_value()) {
      om_ms.push_back(ms);
      r_.body_openmetrics = static_cast<int64_t>(body->size());
    }
  }
  r_.scrape_text = PercentilesOf(text_ms);
  r_.scrape_openmetrics = PercentilesOf(om_ms);
  Log(absl::StrFormat(
      "scrape text p50 %.1f ms p99 %.1f ms (%.2f MB, ~%d series); OpenMetrics "
      "p50 %.1f ms p99 %.1f ms (%.2f MB)",
      r_.scrape_text.p50_ms, r_.scrape_text.p99_ms, r_.body_text / 1e6, static_cast<int>(r_.series),
      r_.scrape_openmetrics.p50_ms, r_.scrape_openmetrics.p99_ms, r_.body_openmetrics / 1e6));
}

void ScaleRun::MeasureIdle() {
  const int64_t c0 = dralens_->CpuNanos();
  absl::SleepFor(absl::Seconds(2));
  r_.idle_cpu_per_s = (dralens_->CpuNanos() - c0) / 2e9;
}

void ScaleRun::Finish() {
  if (dralens_ != nullptr) {
    if (r_.peak_rss_end == 0) {
      r_.peak_rss_end = dralens_->StatusBytes("VmHWM:");
    }
    metrics_.reset();
    dralens_->Stop(SIGTERM, absl::Seconds(60));
  }
  if (server_ != nullptr) {
    if (control_ != nullptr) {
      json stats = ServerStats();
      r_.server_cpu_s = stats.value("cpu_seconds", 0.0);
      r_.server_peak_rss = stats.value("hwm_bytes", int64_t{0});
    }
    // Close our keep-alive connections first: the server's workers wait on them otherwise.
    control_.reset();
    metrics_.reset();
    server_->Stop(SIGTERM, absl::Seconds(30));
  }
  r_.load_average += " -> " + LoadAverage();
  r_.harness_cpu_s = SelfCpuSeconds() - harness_cpu0_;
  r_.harness_peak_rss = SelfStatusBytes("VmHWM:");
}

RunResult RunOne(const RunOptions& options) { return ScaleRun(options).Go(); }

}  // namespace dralens::bench::scale
