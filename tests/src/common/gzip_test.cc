#include "src/common/gzip.h"

#include <algorithm>
#include <cstdint>
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

TEST(GzipStreamTest, PiecesInflateBackToTheWholeInput) {
  std::string input;
  for (int i = 0; i < 50000; ++i) {
    absl::StrAppend(&input, "dralens_cluster_gpus{node=\"node-", i, "\",state=\"free\"} ", i % 8,
                    "\n");
  }
  std::string compressed;
  int pieces_out = 0;
  GzipStream gz([&](absl::string_view piece) {
    compressed.append(piece.data(), piece.size());
    ++pieces_out;
    return true;
  });
  // Written in uneven pieces, as a scrape renders them.
  for (size_t at = 0; at < input.size();) {
    const size_t n = std::min<size_t>(input.size() - at, 1 + (at % 70000));
    ASSERT_TRUE(gz.Write(absl::string_view(input).substr(at, n)).ok());
    at += n;
  }
  ASSERT_TRUE(gz.Finish().ok());
  EXPECT_GT(pieces_out, 1);  // handed on as zlib produced it, not held to the end
  EXPECT_EQ(testing::Gunzip(compressed), input);
  EXPECT_EQ(compressed, *Gzip(input));  // the same stream as the one-call form
  EXPECT_FALSE(gz.Write("more").ok());  // after Finish
}

TEST(GzipStreamTest, EmptyStreamIsAValidGzip) {
  std::string compressed;
  GzipStream gz([&](absl::string_view piece) {
    compressed.append(piece.data(), piece.size());
    return true;
  });
  ASSERT_TRUE(gz.Finish().ok());
  EXPECT_EQ(testing::Gunzip(compressed), "");
}

TEST(GzipStreamTest, AReceiverThatIsGoneFailsEveryLaterCall) {
  int calls = 0;
  GzipStream gz([&](absl::string_view) {
    ++calls;
    return false;
  });
  const std::string noise = [] {
    std::string s;
    uint32_t x = 1;
    for (int i = 0; i < 300000; ++i) {
      x = x * 1664525 + 1013904223;
      s.push_back(static_cast<char>(x >> 24));
    }
    return s;
  }();
  absl::Status s = gz.Write(noise);  // incompressible: zlib must hand bytes on
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(gz.Write("x").code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(gz.Finish().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace dralens::common
