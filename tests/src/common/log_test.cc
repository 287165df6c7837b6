#include "src/common/log.h"

#include <string>
#include <vector>

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

}  // namespace
}  // namespace dralens::common
