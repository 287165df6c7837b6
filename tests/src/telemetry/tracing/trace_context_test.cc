#include "src/telemetry/tracing/trace_context.h"

#include <set>
#include <string>

#include "gtest/gtest.h"
#include "src/telemetry/tracing/sha256.h"

namespace dralens::telemetry {
namespace {

constexpr char kTraceHex[] = "0af7651916cd43dd8448eb211c80319c";
constexpr char kSpanHex[] = "b7ad6b7169203331";
constexpr char kValid[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

std::string Hex(const Sha256Digest& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : digest) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xF]);
  }
  return out;
}

TEST(Sha256Test, MatchesKnownDigests) {
  // FIPS 180-2 examples and padding edges (55, 56, 64 and 119 bytes), checked with sha256sum.
  EXPECT_EQ(Hex(Sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex(Sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(Sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(Hex(Sha256(std::string(55, 'x'))),
            "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072");
  EXPECT_EQ(Hex(Sha256(std::string(56, 'x'))),
            "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e");
  EXPECT_EQ(Hex(Sha256(std::string(64, 'x'))),
            "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c");
  EXPECT_EQ(Hex(Sha256(std::string(119, 'x'))),
            "000b48d4edf0fa7bee3c6236ecd2785baa5db4eeb8bb54341b029e0d9fa5fb0c");
}

TEST(TraceIdTest, HexRoundTripAndValidity) {
  std::optional<TraceId> id = TraceId::FromHex(kTraceHex);
  ASSERT_TRUE(id.has_value());
  EXPECT_TRUE(id->IsValid());
  EXPECT_EQ(id->ToHex(), kTraceHex);
  EXPECT_EQ(id->bytes()[0], 0x0a);
  EXPECT_EQ(id->bytes()[15], 0x9c);

  EXPECT_FALSE(TraceId().IsValid());
  EXPECT_EQ(TraceId().ToHex(), std::string(32, '0'));
  std::optional<TraceId> zero = TraceId::FromHex(std::string(32, '0'));
  ASSERT_TRUE(zero.has_value());
  EXPECT_FALSE(zero->IsValid());

  EXPECT_FALSE(TraceId::FromHex("0AF7651916CD43DD8448EB211C80319C").has_value());
  EXPECT_FALSE(TraceId::FromHex("0af7651916cd43dd8448eb211c80319").has_value());
  EXPECT_FALSE(TraceId::FromHex("0af7651916cd43dd8448eb211c80319cc").has_value());
  EXPECT_FALSE(TraceId::FromHex("0af7651916cd43dd8448eb211c80319g").has_value());
}

TEST(SpanIdTest, HexRoundTripAndValidity) {
  std::optional<SpanId> id = SpanId::FromHex(kSpanHex);
  ASSERT_TRUE(id.has_value());
  EXPECT_TRUE(id->IsValid());
  EXPECT_EQ(id->ToHex(), kSpanHex);
  EXPECT_FALSE(SpanId().IsValid());
  EXPECT_FALSE(SpanId::FromHex("B7AD6B7169203331").has_value());
  EXPECT_FALSE(SpanId::FromHex("b7ad6b716920333").has_value());
}

TEST(TraceparentTest, ParsesTheW3cExample) {
  std::optional<SpanContext> context = ParseTraceparent(kValid);
  ASSERT_TRUE(context.has_value());
  EXPECT_EQ(context->trace_id.ToHex(), kTraceHex);
  EXPECT_EQ(context->span_id.ToHex(), kSpanHex);
  EXPECT_EQ(context->trace_flags, 0x01);
  EXPECT_TRUE(context->IsSampled());
  EXPECT_TRUE(context->remote);
  EXPECT_TRUE(context->IsValid());
}

TEST(TraceparentTest, SampledBitIsBitZeroOnly) {
  std::optional<SpanContext> unsampled =
      ParseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00");
  ASSERT_TRUE(unsampled.has_value());
  EXPECT_FALSE(unsampled->IsSampled());
  std::optional<SpanContext> other_bits =
      ParseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-02");
  ASSERT_TRUE(other_bits.has_value());
  EXPECT_FALSE(other_bits->IsSampled());
  EXPECT_EQ(other_bits->trace_flags, 0x02);
  std::optional<SpanContext> both =
      ParseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03");
  ASSERT_TRUE(both.has_value());
  EXPECT_TRUE(both->IsSampled());
}

TEST(TraceparentTest, RejectsInvalidHeaders) {
  const char* const kInvalid[] = {
      "",
      "00",
      // Uppercase anywhere.
      "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
      "00-0af7651916cd43dd8448eb211c80319c-B7AD6B7169203331-01",
      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0A",
      "0A-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
      // Version ff is forbidden.
      "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
      // All-zero ids.
      "00-00000000000000000000000000000000-b7ad6b7169203331-01",
      "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
      // Wrong lengths.
      "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
      "00-0af7651916cd43dd8448eb211c80319cc-b7ad6b7169203331-01",
      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1",
      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-011",
      // Version 00 takes no extra fields.
      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
      // Wrong separators and non-hex.
      "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
      "00-0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331-01",
      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331_01",
      "00-0af7651916cd43dd8448eb211c80319z-b7ad6b7169203331-01",
      "0g-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
      " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
      // A future version must still separate extra fields with a dash.
      "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x",
  };
  for (const char* header : kInvalid) {
    EXPECT_FALSE(ParseTraceparent(header).has_value()) << "\"" << header << "\"";
  }
}

TEST(TraceparentTest, FutureVersionParsesThePrefix) {
  std::optional<SpanContext> plain =
      ParseTraceparent("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->trace_id.ToHex(), kTraceHex);

  std::optional<SpanContext> extra =
      ParseTraceparent("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-the-future");
  ASSERT_TRUE(extra.has_value());
  EXPECT_EQ(extra->trace_id.ToHex(), kTraceHex);
  EXPECT_EQ(extra->span_id.ToHex(), kSpanHex);
  EXPECT_TRUE(extra->IsSampled());
}

TEST(TraceparentTest, FormatRoundTrips) {
  std::optional<SpanContext> context = ParseTraceparent(kValid);
  ASSERT_TRUE(context.has_value());
  EXPECT_EQ(FormatTraceparent(*context), kValid);

  SpanContext unsampled{.trace_id = *TraceId::FromHex(kTraceHex),
                        .span_id = *SpanId::FromHex(kSpanHex),
                        .trace_flags = 0,
                        .remote = false};
  EXPECT_EQ(FormatTraceparent(unsampled),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00");
  // A future version is re-emitted as 00 without its extra fields.
  std::optional<SpanContext> future =
      ParseTraceparent("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x");
  ASSERT_TRUE(future.has_value());
  EXPECT_EQ(FormatTraceparent(*future), kValid);
}

TEST(TraceIdFromClaimUidTest, FixedVectors) {
  // printf 'dralens.claim/%s' "$uid" | sha256sum | cut -c1-32
  EXPECT_EQ(TraceIdFromClaimUid("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0").ToHex(),
            "117d33e025ab6cb25d8ec1628ac7199c");
  EXPECT_EQ(TraceIdFromClaimUid("3f6c8a2e-1b4d-4e5f-9a7b-0c1d2e3f4a5b").ToHex(),
            "2593ecbcb2c96f2c4936add2eaf3c7c3");
  EXPECT_EQ(TraceIdFromClaimUid("a").ToHex(), "38571df7f7dfc915625ed44521c690b7");
  EXPECT_EQ(TraceIdFromClaimUid("").ToHex(), "10606f6a1499e89d29fefeaa7567eec1");
}

TEST(TraceIdFromClaimUidTest, DeterministicValidAndDistinct) {
  const TraceId a = TraceIdFromClaimUid("uid-a");
  EXPECT_EQ(a, TraceIdFromClaimUid("uid-a"));
  EXPECT_NE(a, TraceIdFromClaimUid("uid-b"));
  // The uid is hashed as given: no case folding.
  EXPECT_NE(a, TraceIdFromClaimUid("UID-A"));
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const TraceId id = TraceIdFromClaimUid(std::to_string(i));
    EXPECT_TRUE(id.IsValid());
    seen.insert(id.ToHex());
  }
  EXPECT_EQ(seen.size(), 1000u);
}

TEST(RandomIdGeneratorTest, ValidAndDistinct) {
  RandomIdGenerator ids;
  std::set<std::string> traces;
  std::set<std::string> spans;
  for (int i = 0; i < 1000; ++i) {
    const TraceId trace = ids.NewTraceId();
    const SpanId span = ids.NewSpanId();
    EXPECT_TRUE(trace.IsValid());
    EXPECT_TRUE(span.IsValid());
    traces.insert(trace.ToHex());
    spans.insert(span.ToHex());
  }
  EXPECT_EQ(traces.size(), 1000u);
  EXPECT_EQ(spans.size(), 1000u);
}

}  // namespace
}  // namespace dralens::telemetry
