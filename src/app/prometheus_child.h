// `dralens demo --with-prometheus`: a real Prometheus (Debian's `prometheus` package) started as
// a child process that scrapes the demo's cluster role and simulated nodes in OpenMetrics (so
// exemplars are kept) and evaluates the bundled alert rules.
//
// Everything it writes (its configuration, log and TSDB) lives in one directory the caller
// owns, normally the demo's temporary directory. The child gets SIGTERM when the demo stops,
// and also when the demo dies without stopping it (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dralens::app {

// What the generated prometheus.yml holds.
struct PrometheusConfigOptions {
  absl::Duration scrape_interval = absl::Seconds(2);
  std::string rules_file;                 // absolute path; empty: no rule_files entry
  std::string cluster_target;             // host:port of the cluster role, job dralens-cluster
  std::vector<std::string> node_targets;  // host:port of each node plugin, job dralens-node
  std::vector<std::string> dcgm_targets;  // host:port of dcgm-exporters, job dcgm-exporter
  // Added to every target, as a multi-cluster setup's relabelling would; the dashboards'
  // $cluster variable lists it.
  std::string cluster_label = "demo";
};

// The prometheus.yml text (YAML). Pure.
std::string PrometheusConfigYaml(const PrometheusConfigOptions& options);

// The alert rules to load: `flag_value` when set (it must be a readable file); otherwise the
// first of `<exe_dir>/../share/dralens/alerts/dralens.rules.yaml` (an installed binary) and
// `<source_dir>/alerts/dralens.rules.yaml` (a build tree) that exists. The error names every
// place looked at and the flag that overrides them.
absl::StatusOr<std::string> FindAlertRules(const std::string& flag_value,
                                           const std::string& exe_dir,
                                           const std::string& source_dir);

// A scrape target for a listening address: a wildcard host (0.0.0.0, [::], empty) becomes the
// loopback address.
std::string ScrapeTarget(absl::string_view listen_host, int port);

struct PrometheusOptions {
  std::string binary = "/usr/bin/prometheus";
  // host:port for --web.listen-address; port 0 picks a free port first.
  std::string listen_address = "127.0.0.1:9090";
  std::string dir;  // prometheus.yml, prometheus.log and data/ go here; must exist
  PrometheusConfigOptions config;
  // How long to wait for /-/ready before giving up.
  absl::Duration ready_timeout = absl::Seconds(60);
};

class PrometheusChild {
 public:
  // Writes the configuration, checks the binary, starts Prometheus and waits until it reports
  // ready. Errors say what failed and quote the end of Prometheus' log. Call it from a thread
  // that lives as long as the child should (the demo's main thread): the kernel's parent-death
  // signal follows the thread that forked, not the process.
  static absl::StatusOr<std::unique_ptr<PrometheusChild>> Start(PrometheusOptions options);
  ~PrometheusChild();  // Stop()
  PrometheusChild(const PrometheusChild&) = delete;
  PrometheusChild& operator=(const PrometheusChild&) = delete;

  // SIGTERM, then SIGKILL after `grace`; reaps the child. Idempotent.
  void Stop(absl::Duration grace = absl::Seconds(10));

  // e.g. http://127.0.0.1:9090
  const std::string& url() const { return url_; }
  const std::string& log_path() const { return log_path_; }
  const std::string& config_path() const { return config_path_; }

 private:
  PrometheusChild() = default;
  absl::Status WaitReady(absl::Duration timeout);
  std::string LogTail() const;

  pid_t pid_ = -1;
  std::string host_;
  int port_ = 0;
  std::string url_;
  std::string log_path_;
  std::string config_path_;
};

}  // namespace dralens::app
