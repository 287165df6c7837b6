// Child: a process the benchmark starts, with its output in a log file, and the measurements
// taken from outside: CPU clock, resident memory, listening port.
//
// The child gets SIGKILL when the benchmark dies (PR_SET_PDEATHSIG), so an interrupted run
// leaves no API server or dralens behind.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dralens::bench::scale {

class Child {
 public:
  // Starts `argv` with stdout and stderr written to `log_path` (truncated first). With `cpus`,
  // the child (and every thread it starts) may run only on those CPUs (sched_setaffinity).
  Child(std::vector<std::string> argv, std::string log_path, std::vector<int> cpus = {});
  ~Child();  // SIGKILL if still running
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  bool Running();
  // Sends `sig`, waits up to `timeout`, then SIGKILL. Returns the exit code, 128+signal when
  // killed by one.
  int Stop(int sig, absl::Duration timeout);
  // The log so far.
  std::string Output() const;
  // Waits until `needle` is in the log (false on timeout or exit).
  bool WaitForOutput(const std::string& needle, absl::Duration timeout);

  // CPU time of all its threads, exited ones included (clock_getcpuclockid); -1 when gone.
  int64_t CpuNanos() const;
  // CPU time of its live threads by thread name (/proc/<pid>/task/*/comm and schedstat), threads
  // of one name summed.
  std::map<std::string, int64_t> ThreadCpuNanos() const;
  // A field of /proc/<pid>/status in bytes, e.g. "VmHWM:" or "VmRSS:".
  int64_t StatusBytes(const char* field) const;
  // The TCP port it listens on (its first listening socket), 0 when none yet.
  int ListeningPort() const;

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string log_path_;
};

// A field of /proc/self/status in bytes.
int64_t SelfStatusBytes(const char* field);

}  // namespace dralens::bench::scale
