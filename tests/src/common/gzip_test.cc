#include "src/common/gzip.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/gunzip.h"

namespace dralens::common {
namespace {

TEST(GzipTest, InflatesBackToTheInput) {
  std::string input;
  for (int i = 0; i < 2000; ++i) {
    absl::StrAppend(&input, "dralens_device_info{device=\"gpu-", i, "\"} 1\n");
  }
  absl::StatusOr<std::string> gz = Gzip(input);
  ASSERT_TRUE(gz.ok()) << gz.status();
  ASSERT_GT(gz->size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>((*gz)[0]), 0x1f);  // gzip magic
  EXPECT_EQ(static_cast<unsigned char>((*gz)[1]), 0x8b);
  EXPECT_LT(gz->size(), input.size() / 5);
  EXPECT_EQ(testing::Gunzip(*gz), input);
}

TEST(GzipTest, RoundTripsLargeAndEmptyInput) {
  const std::string text(100000, 'x');
  absl::StatusOr<std::string> compressed = Gzip(text);
  ASSERT_TRUE(compressed.ok());
  EXPECT_LT(compressed->size(), 1000u);
  EXPECT_EQ(testing::Gunzip(*compressed), text);
  absl::StatusOr<std::string> empty = Gzip("");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(testing::Gunzip(*empty), "");
}

}  // namespace
}  // namespace dralens::common
