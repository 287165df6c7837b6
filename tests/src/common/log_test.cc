#include "src/common/log.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::common {
namespace {

TEST(LogTest, FormatsOneLogfmtLine) {
  EXPECT_EQ(FormatLogLine("2026-01-01T00:00:00.000Z", LogLevel::kInfo, "prepare", "claim prepared",
                          {{"claim", "ns/a"}, {"devices", 2}, {"ok", true}}),
            "ts=2026-01-01T00:00:00.000Z level=info component=prepare msg=\"claim prepared\" "
            "claim=ns/a devices=2 ok=true");
}

TEST(LogTest, QuotesAndEscapesValuesThatNeedIt) {
  EXPECT_EQ(
      FormatLogLine("t", LogLevel::kError, "k8s", "x", {{"error", "a \"b\"\nc=d"}, {"e", ""}}),
      "ts=t level=error component=k8s msg=x error=\"a \\\"b\\\"\\nc=d\" e=\"\"");
}

TEST(LogTest, LevelFilterAndSink) {
  std::vector<std::string> lines;
  SetLogSinkForTest([&](const std::string& line) { lines.push_back(line); });
  SetLogLevel(LogLevel::kWarn);
  DLOG(kInfo, "test", "dropped");
  DLOG(kWarn, "test", "kept", {{"n", 1}});
  SetLogLevel(LogLevel::kInfo);
  SetLogSinkForTest(nullptr);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("level=warn component=test msg=kept n=1"), std::string::npos);
}

TEST(LogTest, ParsesLevels) {
  LogLevel l;
  EXPECT_TRUE(ParseLogLevel("DEBUG", &l));
  EXPECT_EQ(l, LogLevel::kDebug);
  EXPECT_FALSE(ParseLogLevel("verbose", &l));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

// The demo's terminal shows warnings and errors only; its log file gets every line.
TEST(LogTest, LogFileGetsEveryLineAndStderrOnlyThoseAtTheTerminalLevel) {
  const std::string path = ::testing::TempDir() + "/log_test_" + std::to_string(getpid()) + ".log";
  unlink(path.c_str());
  ASSERT_TRUE(SetLogFile(path, LogLevel::kWarn).ok());
  ::testing::internal::CaptureStderr();
  DLOG(kInfo, "test", "to the file only", {{"n", 1}});
  DLOG(kWarn, "test", "to both", {{"n", 2}});
  CloseLogFile();
  DLOG(kInfo, "test", "stderr again", {{"n", 3}});
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::string file = ReadFile(path);
  unlink(path.c_str());
  EXPECT_THAT(file,
              ::testing::HasSubstr("level=info component=test msg=\"to the file only\" n=1\n"));
  EXPECT_THAT(file, ::testing::HasSubstr("level=warn component=test msg=\"to both\" n=2\n"));
  EXPECT_THAT(file, ::testing::Not(::testing::HasSubstr("stderr again")));
  EXPECT_THAT(err, ::testing::Not(::testing::HasSubstr("to the file only")));
  EXPECT_THAT(err, ::testing::HasSubstr("msg=\"to both\" n=2\n"));
  EXPECT_THAT(err, ::testing::HasSubstr("msg=\"stderr again\" n=3\n"));
}

TEST(LogTest, LogFileThatCannotBeOpenedIsAnErrorAndStderrKeepsEveryLine) {
  const std::string path = ::testing::TempDir() + "/no-such-dir-for-log-test/demo.log";
  absl::Status s = SetLogFile(path, LogLevel::kError);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(path));
  ::testing::internal::CaptureStderr();
  DLOG(kInfo, "test", "still on stderr");
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), ::testing::HasSubstr("still on stderr"));
}

}  // namespace
}  // namespace dralens::common
