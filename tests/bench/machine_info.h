// What machine a benchmark ran on, for its report: the CPU, the kernel, the filesystem under a
// path, and the connections a full accept queue turned away.
#pragma once

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace dralens::bench {

inline std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
    }
  }
  return "unknown";
}

// The mount holding `path` (longest mount point prefix): "ext4 on /dev/vda (/)".
inline std::string FilesystemOf(const std::string& path) {
  std::ifstream in("/proc/self/mounts");
  std::string line;
  std::string best_dir;
  std::string best;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() < 3) {
      continue;
    }
    const std::string& dir = f[1];
    bool under =
        path == dir || dir == "/" ||
        (absl::StartsWith(path, dir) && path.size() > dir.size() && path[dir.size()] == '/');
    if (under && dir.size() >= best_dir.size()) {
      best_dir = dir;
      best = absl::StrCat(f[2], " on ", f[0], " (", dir, ")");
    }
  }
  return best.empty() ? "unknown" : best;
}

inline void PrintMachine(const std::string& root) {
  utsname u{};
  uname(&u);
  std::printf("date:    %s\n",
              absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::Now(), absl::UTCTimeZone()).c_str());
  std::printf("machine: nproc=%ld, cpu=\"%s\", kernel %s %s\n", sysconf(_SC_NPROCESSORS_ONLN),
              CpuModel().c_str(), u.sysname, u.release);
  std::printf("temp:    %s, filesystem %s\n", root.c_str(), FilesystemOf(root).c_str());
}

// TcpExt ListenOverflows from /proc/net/netstat (machine-wide): connections a listener's full
// accept queue turned away, each one a SYN retried after a second or more.
inline int64_t ListenOverflows() {
  std::ifstream in("/proc/net/netstat");
  std::string names;
  std::string values;
  while (std::getline(in, names) && std::getline(in, values)) {
    if (!absl::StartsWith(names, "TcpExt:")) {
      continue;
    }
    std::vector<absl::string_view> n = absl::StrSplit(names, ' ');
    std::vector<absl::string_view> v = absl::StrSplit(values, ' ');
    for (size_t i = 1; i < n.size() && i < v.size(); ++i) {
      int64_t count = 0;
      if (n[i] == "ListenOverflows" && absl::SimpleAtoi(v[i], &count)) {
        return count;
      }
    }
  }
  return 0;
}

}  // namespace dralens::bench
