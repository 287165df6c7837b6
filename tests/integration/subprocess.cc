#include "tests/integration/subprocess.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/time/clock.h"

extern char** environ;

namespace dralens::testing {

Subprocess::Subprocess(std::vector<std::string> argv, std::map<std::string, std::string> env) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    std::abort();
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    std::string key = kv.substr(0, kv.find('='));
    if (env.count(key) == 0) {
      env_strings.push_back(kv);
    }
  }
  for (const auto& [k, v] : env) {
    env_strings.push_back(k + "=" + v);
  }
  std::vector<char*> cargv;
  for (std::string& a : argv) {
    cargv.push_back(a.data());
  }
  cargv.push_back(nullptr);
  std::vector<char*> cenv;
  for (std::string& e : env_strings) {
    cenv.push_back(e.data());
  }
  cenv.push_back(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    // The test process may block signals; the child starts clean.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  close(fds[1]);
  out_fd_ = fds[0];
  reader_ = std::thread([this] {
    char buf[4096];
    ssize_t n;
    while ((n = read(out_fd_, buf, sizeof(buf))) > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      output_.append(buf, static_cast<size_t>(n));
    }
  });
}

Subprocess::~Subprocess() {
  if (exit_code_ < 0 && pid_ > 0) {
    Stop(SIGKILL, absl::Seconds(10));
  }
  if (reader_.joinable()) {
    reader_.join();
  }
  if (out_fd_ >= 0) {
    close(out_fd_);
  }
}

bool Subprocess::WaitForOutput(const std::string& needle, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (output_.find(needle) != std::string::npos) {
        return true;
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

int Subprocess::Wait(absl::Duration timeout) {
  if (exit_code_ >= 0) {
    return exit_code_;
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (reader_.joinable()) {
        reader_.join();
      }
      return exit_code_;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return -1;
}

int Subprocess::Stop(int sig, absl::Duration timeout) {
  if (exit_code_ < 0) {
    kill(pid_, sig);
  }
  return Wait(timeout);
}

std::string Subprocess::Output() {
  std::lock_guard<std::mutex> lock(mu_);
  return output_;
}

std::pair<int, std::string> RunToCompletion(std::vector<std::string> argv,
                                            std::map<std::string, std::string> env,
                                            absl::Duration timeout) {
  Subprocess p(std::move(argv), std::move(env));
  int code = p.Wait(timeout);
  if (code < 0) {
    code = p.Stop(SIGKILL, absl::Seconds(5));
  }
  return {code, p.Output()};
}

}  // namespace dralens::testing
