#include "tests/bench/scale/child.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace dralens::bench::scale {
namespace {

int64_t ReadStatusBytes(const std::string& path, const char* field) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) {
      std::string digits;
      for (char c : line) {
        if (c >= '0' && c <= '9') {
          digits.push_back(c);
        }
      }
      int64_t kib = 0;
      return absl::SimpleAtoi(digits, &kib) ? kib * 1024 : 0;
    }
  }
  return 0;
}

}  // namespace

Child::Child(std::vector<std::string> argv, std::string log_path, std::vector<int> cpus)
    : log_path_(std::move(log_path)) {
  const int log = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  std::vector<char*> cargv;
  for (std::string& a : argv) {
    cargv.push_back(a.data());
  }
  cargv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) {
      _exit(127);  // the parent died before prctl took effect
    }
    if (log >= 0) {
      dup2(log, STDOUT_FILENO);
      dup2(log, STDERR_FILENO);
    }
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
      dup2(devnull, STDIN_FILENO);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (!cpus.empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int cpu : cpus) {
        CPU_SET(cpu, &set);
      }
      if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        dprintf(STDERR_FILENO, "sched_setaffinity: %s\n", strerror(errno));
        _exit(126);
      }
    }
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  if (log >= 0) {
    close(log);
  }
}

Child::~Child() {
  if (exit_code_ < 0 && pid_ > 0) {
    Stop(SIGKILL, absl::Seconds(10));
  }
}

bool Child::Running() {
  if (exit_code_ >= 0 || pid_ <= 0) {
    return false;
  }
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }
  return true;
}

int Child::Stop(int sig, absl::Duration timeout) {
  if (!Running()) {
    return exit_code_;
  }
  kill(pid_, sig);
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (!Running()) {
      return exit_code_;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return exit_code_;
}

std::string Child::Output() const {
  std::ifstream in(log_path_);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

bool Child::WaitForOutput(const std::string& needle, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (Output().find(needle) != std::string::npos) {
      return true;
    }
    if (!Running()) {
      return Output().find(needle) != std::string::npos;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

int64_t Child::CpuNanos() const {
  clockid_t clock;
  timespec ts{};
  if (clock_getcpuclockid(pid_, &clock) != 0 || clock_gettime(clock, &ts) != 0) {
    return -1;
  }
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::map<std::string, int64_t> Child::ThreadCpuNanos() const {
  std::map<std::string, int64_t> out;
  const std::string tasks = absl::StrCat("/proc/", pid_, "/task");
  DIR* dir = opendir(tasks.c_str());
  if (dir == nullptr) {
    return out;
  }
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') {
      continue;
    }
    std::ifstream comm(absl::StrCat(tasks, "/", entry->d_name, "/comm"));
    std::ifstream schedstat(absl::StrCat(tasks, "/", entry->d_name, "/schedstat"));
    std::string name;
    int64_t on_cpu = 0;
    if (std::getline(comm, name) && (schedstat >> on_cpu)) {
      out[name] += on_cpu;  // the first field: nanoseconds on a CPU
    }
  }
  closedir(dir);
  return out;
}

int64_t Child::StatusBytes(const char* field) const {
  return ReadStatusBytes(absl::StrCat("/proc/", pid_, "/status"), field);
}

int Child::ListeningPort() const {
  std::set<std::string> inodes;
  for (int fd = 0; fd < 1024; ++fd) {
    char target[256];
    const std::string link = absl::StrCat("/proc/", pid_, "/fd/", fd);
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    if (n > 9) {
      const std::string t(target, static_cast<size_t>(n));
      if (t.rfind("socket:[", 0) == 0) {
        inodes.insert(t.substr(8, t.size() - 9));
      }
    }
  }
  std::ifstream tcp(absl::StrCat("/proc/", pid_, "/net/tcp"));
  std::string line;
  std::getline(tcp, line);  // header
  while (std::getline(tcp, line)) {
    std::istringstream fields(line);
    std::string sl, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> sl >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >>
        inode;
    if (state == "0A" && inodes.count(inode) > 0) {  // 0A: LISTEN
      return static_cast<int>(std::stoul(local.substr(local.find(':') + 1), nullptr, 16));
    }
  }
  return 0;
}

int64_t SelfStatusBytes(const char* field) { return ReadStatusBytes("/proc/self/status", field); }

}  // namespace dralens::bench::scale
