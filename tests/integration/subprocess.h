// Subprocess: runs a program with its stdout and stderr captured, for tests that drive the real
// dralens binary. Output is collected on a background thread so the child never blocks.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"

namespace dralens::testing {

class Subprocess {
 public:
  // Starts `argv` with `env` added to (and overriding) the current environment.
  Subprocess(std::vector<std::string> argv, std::map<std::string, std::string> env = {});
  ~Subprocess();  // SIGKILL if still running

  // Waits up to `timeout` for `needle` to appear in stdout+stderr; returns whether it did.
  bool WaitForOutput(const std::string& needle, absl::Duration timeout);
  // Sends `sig`, then waits up to `timeout` for the exit; returns the exit code, 128+signal if
  // killed by a signal, or -1 on timeout.
  int Stop(int sig, absl::Duration timeout);
  // Waits for the process to exit on its own.
  int Wait(absl::Duration timeout);
  std::string Output();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  int out_fd_ = -1;
  std::thread reader_;
  std::mutex mu_;
  std::string output_;
};

// Runs to completion and returns {exit code, output}.
std::pair<int, std::string> RunToCompletion(std::vector<std::string> argv,
                                            std::map<std::string, std::string> env = {},
                                            absl::Duration timeout = absl::Seconds(30));

}  // namespace dralens::testing
