#include "src/model/json.h"

#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/model/codec.h"
#include "tests/src/model/model_fixtures.h"

namespace dralens::model {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string ErrorOf(absl::string_view text, size_t max_bytes = kDefaultMaxJsonBytes,
                    int max_depth = kDefaultMaxJsonDepth) {
  absl::StatusOr<Json> j = ParseJson(text, max_bytes, max_depth);
  if (j.ok()) {
    return "OK";
  }
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(j.status().message());
}

TEST(ParseJsonTest, ParsesValidDocuments) {
  absl::StatusOr<Json> j = ParseJson(R"({"a": [1, -2, 3.5, "x", true, null, {"b": {}}]})");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["a"][1], -2);
  EXPECT_EQ((*j)["a"][6]["b"], Json::object());
  EXPECT_TRUE(ParseJson("0").ok());
  EXPECT_TRUE(ParseJson("\"\\u00e9\xc3\xa9\"").ok());
  EXPECT_TRUE(ParseJson(" [ ] \n").ok());
}

TEST(ParseJsonTest, RejectsDeepNestingWithoutRecursing) {
  constexpr int kDepth = 100000;
  const std::string arrays = std::string(kDepth, '[') + std::string(kDepth, ']');
  EXPECT_EQ(ErrorOf(arrays), "parse JSON: nesting deeper than 128 levels");
  std::string objects;
  for (int i = 0; i < kDepth; ++i) {
    objects += "{\"a\":";
  }
  objects += "1" + std::string(kDepth, '}');
  EXPECT_EQ(ErrorOf(objects), "parse JSON: nesting deeper than 128 levels");
  // Unterminated deep input fails the same way.
  EXPECT_EQ(ErrorOf(std::string(kDepth, '[')), "parse JSON: nesting deeper than 128 levels");
}

TEST(ParseJsonTest, DepthLimitIsExact) {
  auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_EQ(ErrorOf(nested(10), kDefaultMaxJsonBytes, 10), "OK");
  EXPECT_EQ(ErrorOf(nested(11), kDefaultMaxJsonBytes, 10),
            "parse JSON: nesting deeper than 10 levels");
  EXPECT_EQ(ErrorOf("{\"a\":{\"b\":[1]}}", kDefaultMaxJsonBytes, 3), "OK");
  EXPECT_EQ(ErrorOf("{\"a\":{\"b\":[[1]]}}", kDefaultMaxJsonBytes, 3),
            "parse JSON: nesting deeper than 3 levels");
}

TEST(ParseJsonTest, RejectsOversizeInputBeforeParsing) {
  const std::string huge = "\"" + std::string(50u << 20, 'a') + "\"";
  EXPECT_EQ(ErrorOf(huge, 10u << 20),
            "parse JSON: document of 52428802 bytes exceeds the limit of 10485760 bytes");
  EXPECT_EQ(ErrorOf("[1,2]", 5), "OK");
  EXPECT_THAT(ErrorOf("[1,2] ", 5), HasSubstr("exceeds the limit of 5 bytes"));
}

TEST(ParseJsonTest, RejectsInvalidUtf8) {
  EXPECT_THAT(ErrorOf("\"\xff\xfe\""), HasSubstr("UTF-8"));
  EXPECT_THAT(ErrorOf("{\"k\xc3\":1}"), HasSubstr("UTF-8"));
  EXPECT_THAT(ErrorOf("\"\xed\xa0\x80\""), HasSubstr("UTF-8"));  // UTF-16 surrogate
  EXPECT_THAT(ErrorOf("\"\\ud800\""), HasSubstr("surrogate"));
}

TEST(ParseJsonTest, RejectsDuplicateKeys) {
  EXPECT_EQ(ErrorOf(R"({"a":1,"a":2})"), "parse JSON: duplicate key \"a\" at depth 1");
  EXPECT_EQ(ErrorOf(R"({"a":{"b":1,"c":{},"b":[]}})"),
            "parse JSON: duplicate key \"b\" at depth 2");
  EXPECT_EQ(ErrorOf(R"([{"a":1},{"a":1}])"), "OK");  // Same key in sibling objects is fine.
}

TEST(ParseJsonTest, RejectsSyntaxErrorsAndTrailingContent) {
  for (const char* bad :
       {"", " ", "{", "[1,]", "{\"a\"}", "{\"a\":1,}", "[1] x", "{} {}", "nul", "01", "1.", "-",
        "'a'", "[1 2]", "{\"a\":1 \"b\":2}", "\"\x01\"", "/* comment */ 1", "NaN", "Infinity"}) {
    EXPECT_THAT(ErrorOf(bad), HasSubstr("parse JSON: ")) << bad;
    EXPECT_NE(ErrorOf(bad), "OK") << bad;
  }
}

TEST(ParseJsonTest, NumbersOutOfRange) {
  EXPECT_THAT(ErrorOf("1e400"), HasSubstr("number overflow"));
  EXPECT_THAT(ErrorOf("[-1e400]"), HasSubstr("number overflow"));
  // Big integers parse as doubles; the codec then rejects them for int64 fields.
  absl::StatusOr<Json> big = ParseJson("123456789012345678901234567890");
  ASSERT_TRUE(big.ok());
  EXPECT_TRUE(big->is_number_float());
  absl::StatusOr<ResourceSlice> s = DecodeText<ResourceSlice>(
      R"({"spec":{"pool":{"name":"p","generation":-9223372036854775809,"resourceSliceCount":1}}})");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("spec.pool.generation: expected integer in int64 range"));
  s = DecodeText<ResourceSlice>(
      R"({"spec":{"pool":{"name":"p","generation":-9223372036854775808,"resourceSliceCount":1}}})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->spec.pool.generation, std::numeric_limits<int64_t>::min());
}

TEST(ParseJsonTest, EveryTruncationOfAValidDocumentFails) {
  const std::string full = EncodeText(testing::FullClaim());
  ASSERT_TRUE(DecodeText<ResourceClaim>(full).ok());
  for (size_t len = 0; len < full.size(); ++len) {
    absl::StatusOr<ResourceClaim> c = DecodeText<ResourceClaim>(full.substr(0, len));
    ASSERT_FALSE(c.ok()) << "prefix of " << len << " bytes decoded";
  }
}

TEST(ParseJsonTest, HugeTruncatedStringGivesAShortMessage) {
  const std::string text = "{\"a\":\"" + std::string(1 << 20, 'x');
  const std::string message = ErrorOf(text);
  EXPECT_LT(message.size(), 400u);
}

// Deterministic byte mutations of a valid document: every result is a value or an error.
TEST(ParseJsonTest, MutatedDocumentsNeverCrash) {
  const std::string base = EncodeText(testing::FullSlice());
  std::mt19937 rng(42);
  const char kBytes[] = "{}[]\",:0123456789-+.eEtrufalsn\\ \xff\x80";
  int decoded_ok = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string doc = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % doc.size();
      switch (rng() % 3) {
        case 0:
          doc[pos] = kBytes[rng() % (sizeof(kBytes) - 1)];
          break;
        case 1:
          doc.erase(pos, 1 + rng() % 8);
          break;
        default:
          doc.insert(pos, 1, kBytes[rng() % (sizeof(kBytes) - 1)]);
      }
    }
    absl::StatusOr<ResourceSlice> s = DecodeText<ResourceSlice>(doc);
    if (s.ok()) {
      ++decoded_ok;
      // Whatever decoded must encode and decode again to the same value.
      absl::StatusOr<ResourceSlice> again = Decode<ResourceSlice>(Encode(*s));
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_TRUE(*again == *s);
    }
  }
  EXPECT_GT(decoded_ok, 0);
}

TEST(SerializeJsonTest, NeverThrowsOnInvalidUtf8) {
  Json j = {{"bad", std::string("\xff\xfe")}};
  EXPECT_EQ(SerializeJson(j), "{\"bad\":\"\xef\xbf\xbd\xef\xbf\xbd\"}");
  ResourceSlice s;
  s.metadata.name = "\xc3";
  absl::StatusOr<Json> reparsed = ParseJson(EncodeText(s));
  ASSERT_TRUE(reparsed.ok()) << reparsed.status();
}

}  // namespace
}  // namespace dralens::model
