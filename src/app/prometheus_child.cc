#include "src/app/prometheus_child.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "exporter/http/metrics_server.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "src/common/atomic_file.h"
#include "src/common/log.h"
#include "src/common/status.h"

namespace dralens::app {
namespace {

constexpr char kRulesLeaf[] = "alerts/dralens.rules.yaml";

// A YAML double-quoted scalar: JSON string syntax is valid YAML.
std::string Quote(absl::string_view s) { return nlohmann::json(std::string(s)).dump(); }

std::string PrometheusDuration(absl::Duration d) {
  const int64_t ms = absl::ToInt64Milliseconds(d);
  return ms % 1000 == 0 ? absl::StrCat(ms / 1000, "s") : absl::StrCat(ms, "ms");
}

bool IsReadableFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) && access(path.c_str(), R_OK) == 0;
}

// Binds host:0, reads the port the kernel chose and releases it. Prometheus takes the port a
// moment later; another process could take it in between, in which case Prometheus fails to
// listen and Start() reports its log.
absl::StatusOr<int> PickFreePort(const std::string& host) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("--prometheus-address: port 0 needs an IPv4 host, not \"", host, "\""));
  }
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("find a free port on ", host, ": ", std::strerror(err)));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace

std::string PrometheusConfigYaml(const PrometheusConfigOptions& options) {
  const std::string interval = PrometheusDuration(options.scrape_interval);
  std::string out = absl::StrCat(
      "# Written by `dralens demo --with-prometheus`; it lasts as long as the demo.\n"
      "global:\n"
      "  scrape_interval: ",
      interval, "\n  scrape_timeout: ", interval, "\n  evaluation_interval: ", interval, "\n");
  if (!options.rules_file.empty()) {
    absl::StrAppend(&out, "rule_files:\n  - ", Quote(options.rules_file), "\n");
  }
  auto job = [&](absl::string_view name, const std::vector<std::string>& targets) {
    // Prometheus asks for OpenMetrics first by default; exemplars only come that way.
    absl::StrAppend(&out, "  - job_name: ", Quote(name),
                    "\n    static_configs:\n      - targets:\n");
    for (const std::string& t : targets) {
      absl::StrAppend(&out, "          - ", Quote(t), "\n");
    }
    absl::StrAppend(&out, "        labels:\n          cluster: ", Quote(options.cluster_label),
                    "\n");
  };
  out += "scrape_configs:\n";
  if (!options.cluster_target.empty()) {
    job("dralens-cluster", {options.cluster_target});
  }
  if (!options.node_targets.empty()) {
    job("dralens-node", options.node_targets);
  }
  if (!options.dcgm_targets.empty()) {
    job("dcgm-exporter", options.dcgm_targets);
  }
  return out;
}

absl::StatusOr<std::string> FindAlertRules(const std::string& flag_value,
                                           const std::string& exe_dir,
                                           const std::string& source_dir) {
  if (!flag_value.empty()) {
    if (!IsReadableFile(flag_value)) {
      return absl::NotFoundError(
          absl::StrCat("--prometheus-rules: \"", flag_value, "\" is not a readable file"));
    }
    return std::filesystem::absolute(flag_value).string();
  }
  std::vector<std::string> candidates;
  if (!exe_dir.empty()) {
    candidates.push_back(absl::StrCat(exe_dir, "/../share/dralens/", kRulesLeaf));
  }
  if (!source_dir.empty()) {
    candidates.push_back(absl::StrCat(source_dir, "/", kRulesLeaf));
  }
  for (const std::string& c : candidates) {
    if (IsReadableFile(c)) {
      return std::filesystem::weakly_canonical(c).string();
    }
  }
  std::string looked;
  for (const std::string& c : candidates) {
    absl::StrAppend(&looked, looked.empty() ? "" : ", ", c);
  }
  return absl::NotFoundError(absl::StrCat("no alert rules found (looked at ", looked,
                                          "); pass --prometheus-rules=<file>"));
}

std::string ScrapeTarget(absl::string_view listen_host, int port) {
  const bool wildcard = listen_host.empty() || listen_host == "0.0.0.0" || listen_host == "::" ||
                        listen_host == "[::]";
  return absl::StrCat(wildcard ? "127.0.0.1" : std::string(listen_host), ":", port);
}

absl::StatusOr<std::unique_ptr<PrometheusChild>> PrometheusChild::Start(PrometheusOptions options) {
  if (access(options.binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--with-prometheus: ", options.binary,
                     " is not an executable (install Debian's prometheus package)"));
  }
  std::unique_ptr<PrometheusChild> child(new PrometheusChild());
  RETURN_IF_ERROR(exporter::SplitHostPort(options.listen_address, &child->host_, &child->port_));
  if (child->host_ == "0.0.0.0") {
    child->host_ = "127.0.0.1";  // SplitHostPort's reading of an empty host; keep it local
  }
  if (child->port_ == 0) {
    ASSIGN_OR_RETURN(child->port_, PickFreePort(child->host_));
  }
  const std::string listen = absl::StrCat(child->host_, ":", child->port_);
  child->url_ = absl::StrCat("http://", listen);
  child->config_path_ = absl::StrCat(options.dir, "/prometheus.yml");
  child->log_path_ = absl::StrCat(options.dir, "/prometheus.log");
  const std::string data = absl::StrCat(options.dir, "/data");
  std::error_code ec;
  std::filesystem::create_directories(data, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("create ", data, ": ", ec.message()));
  }
  RETURN_IF_ERROR_CTX(
      common::WriteFileAtomically(child->config_path_, PrometheusConfigYaml(options.config)),
      "write the Prometheus configuration");

  // Everything the child needs is built before fork(): after it, only async-signal-safe calls.
  std::vector<std::string> args = {
      options.binary,
      absl::StrCat("--config.file=", child->config_path_),
      absl::StrCat("--storage.tsdb.path=", data),
      absl::StrCat("--web.listen-address=", listen),
      "--enable-feature=exemplar-storage",
  };
  std::vector<char*> argv;
  for (std::string& a : args) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  const int log_fd = open(child->log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return absl::InternalError(absl::StrCat("open ", child->log_path_, ": ", std::strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(log_fd);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(err)));
  }
  if (pid == 0) {
    // The demo blocks SIGINT/SIGTERM in every thread for its own signal wait; the mask is
    // inherited, so clear it, or Prometheus could never be stopped by them.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // Its own process group: Ctrl-C in the terminal reaches the demo, which stops Prometheus
    // after the rest, in order. If the demo dies without that, the kernel sends SIGTERM.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) {
      _exit(127);  // the demo is already gone
    }
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
      dup2(devnull, STDIN_FILENO);
    }
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(log_fd);
  child->pid_ = pid;
  DLOG(kInfo, "prometheus", "started",
       {{"pid", absl::StrCat(pid)}, {"url", child->url_}, {"config", child->config_path_}});
  if (absl::Status ready = child->WaitReady(options.ready_timeout); !ready.ok()) {
    child->Stop(absl::Seconds(2));
    return ready;
  }
  return child;
}

absl::Status PrometheusChild::WaitReady(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  httplib::Client client(host_, port_);
  client.set_connection_timeout(1);
  client.set_read_timeout(2);
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      pid_ = -1;
      return absl::UnavailableError(
          absl::StrCat("Prometheus exited at start (",
                       WIFEXITED(status) ? absl::StrCat("exit code ", WEXITSTATUS(status))
                                         : absl::StrCat("signal ", WTERMSIG(status)),
                       "); the end of ", log_path_, ":\n", LogTail()));
    }
    if (auto res = client.Get("/-/ready"); res && res->status == 200) {
      return absl::OkStatus();
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "Prometheus was not ready at ", url_, " within ", absl::FormatDuration(timeout),
          "; the end of ", log_path_, ":\n", LogTail()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

std::string PrometheusChild::LogTail() const {
  std::ifstream in(log_path_);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  constexpr size_t kTail = 2000;
  return text.size() > kTail ? text.substr(text.size() - kTail) : text;
}

void PrometheusChild::Stop(absl::Duration grace) {
  if (pid_ <= 0) {
    return;
  }
  kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  int status = 0;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      DLOG(kWarn, "prometheus", "did not stop in time; killing it",
           {{"grace", absl::FormatDuration(grace)}});
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  DLOG(kInfo, "prometheus", "stopped", {{"pid", absl::StrCat(pid_)}});
  pid_ = -1;
}

PrometheusChild::~PrometheusChild() { Stop(); }

}  // namespace dralens::app
