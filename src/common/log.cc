#include "src/common/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace dralens::common {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_sink_mu;
std::function<void(const std::string&)>* g_sink = nullptr;  // guarded by g_sink_mu
int g_file = -1;                                            // guarded by g_sink_mu
LogLevel g_terminal_level = LogLevel::kDebug;               // guarded by g_sink_mu

// One write(2) per line keeps lines from interleaving across threads and processes.
void WriteAll(int fd, const std::string& line) {
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::write(fd, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    off += static_cast<size_t>(n);
  }
}

bool NeedsQuoting(absl::string_view v) {
  if (v.empty()) {
    return true;
  }
  for (char c : v) {
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || static_cast<unsigned char>(c) < 0x20) {
      return true;
    }
  }
  return false;
}

void AppendValue(std::string* out, absl::string_view v) {
  if (!NeedsQuoting(v)) {
    out->append(v.data(), v.size());
    return;
  }
  out->push_back('"');
  for (char c : v) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppend(out, "\\x", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

}  // namespace

absl::string_view ToString(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "unknown";
}

bool ParseLogLevel(absl::string_view text, LogLevel* level) {
  const std::string lower = absl::AsciiStrToLower(text);
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    if (lower == ToString(l)) {
      *level = l;
      return true;
    }
  }
  return false;
}

std::string FormatLogLine(absl::string_view timestamp, LogLevel level, absl::string_view component,
                          absl::string_view message, const std::vector<LogField>& fields) {
  std::string line = absl::StrCat("ts=", timestamp, " level=", ToString(level), " component=");
  AppendValue(&line, component);
  line.append(" msg=");
  AppendValue(&line, message);
  for (const LogField& f : fields) {
    line.push_back(' ');
    line.append(f.key);
    line.push_back('=');
    AppendValue(&line, f.value);
  }
  return line;
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

void SetLogSinkForTest(std::function<void(const std::string& line)> sink) {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  delete g_sink;
  g_sink = sink ? new std::function<void(const std::string&)>(std::move(sink)) : nullptr;
}

absl::Status SetLogFile(const std::string& path, LogLevel terminal_level) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("open log file ", path, ": ", std::strerror(errno)));
  }
  std::lock_guard<std::mutex> lock(g_sink_mu);
  if (g_file >= 0) {
    ::close(g_file);
  }
  g_file = fd;
  g_terminal_level = terminal_level;
  return absl::OkStatus();
}

void CloseLogFile() {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  if (g_file >= 0) {
    ::close(g_file);
  }
  g_file = -1;
  g_terminal_level = LogLevel::kDebug;
}

void Log(LogLevel level, absl::string_view component, absl::string_view message,
         const std::vector<LogField>& fields) {
  if (static_cast<int>(level) < g_level.load()) {
    return;
  }
  const std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  std::string line = FormatLogLine(ts, level, component, message, fields);
  std::lock_guard<std::mutex> lock(g_sink_mu);
  if (g_sink != nullptr) {
    (*g_sink)(line);
    return;
  }
  line.push_back('\n');
  if (g_file >= 0) {
    WriteAll(g_file, line);
  }
  if (g_file < 0 || level >= g_terminal_level) {
    WriteAll(STDERR_FILENO, line);
  }
}

}  // namespace dralens::common
