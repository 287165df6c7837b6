// Structured logging: one line per event, logfmt-style, easy for both people and Loki.
//
//   ts=2026-11-22T05:00:00.123Z level=info component=prepare msg="claim prepared" claim=ns/a
//   uid=...
//
// Usage:
//   DLOG(kInfo, "prepare", "claim prepared", {{"claim", key}, {"devices", n}});
// Values are formatted with absl::StrCat semantics; strings with spaces, quotes or '=' are quoted.
// Thread-safe: each event is written with one write(2) call.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dralens::common {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

absl::string_view ToString(LogLevel level);
// Parses "debug", "info", "warn" or "error".
bool ParseLogLevel(absl::string_view text, LogLevel* level);

// One key=value pair. Implicitly built from any value absl::StrCat accepts.
struct LogField {
  template <typename T>
  LogField(absl::string_view k, const T& v) : key(k), value(absl::StrCat(v)) {}
  LogField(absl::string_view k, bool v) : key(k), value(v ? "true" : "false") {}
  std::string key;
  std::string value;
};

// Formats one event as a single line (without the trailing newline). Pure; used by tests.
std::string FormatLogLine(absl::string_view timestamp, LogLevel level, absl::string_view component,
                          absl::string_view message, const std::vector<LogField>& fields);

// Process-wide settings. The default writes lines at info and above to stderr.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Redirects every line to `sink` (tests); nullptr restores stderr.
void SetLogSinkForTest(std::function<void(const std::string& line)> sink);

// Writes every line to the file at `path` as well (appending; created with mode 0600), and only
// lines at `terminal_level` and above to stderr. Replaces an earlier log file; the error names
// the file when it cannot be opened, and nothing changes then.
absl::Status SetLogFile(const std::string& path, LogLevel terminal_level);
// Closes the log file; every line goes to stderr again.
void CloseLogFile();

void Log(LogLevel level, absl::string_view component, absl::string_view message,
         const std::vector<LogField>& fields = {});

}  // namespace dralens::common

#define DLOG(level, component, message, ...)                                         \
  do {                                                                               \
    if (::dralens::common::LogLevel::level >= ::dralens::common::GetLogLevel()) {    \
      ::dralens::common::Log(::dralens::common::LogLevel::level, component, message, \
                             ##__VA_ARGS__);                                         \
    }                                                                                \
  } while (false)
