// PrepareClaims / UnprepareClaims: the proto-free core of the DRA adapter.
#include "driver/plugin/dra_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/driver/plugin/fake_claim_handler.h"

namespace dralens::driver::plugin {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::SizeIs;

ClaimRef Claim(const std::string& uid, const std::string& name = "claim") {
  return ClaimRef{.namespace_name = "default", .uid = uid, .name = name};
}

TEST(PrepareClaimsTest, OneEntryPerDistinctUidAndHandlerSeesEachOnce) {
  FakeClaimHandler handler;
  auto results =
      PrepareClaims(handler, {Claim("a", "first"), Claim("b"), Claim("a", "second")}, "v1");
  ASSERT_THAT(results, SizeIs(2));
  EXPECT_EQ(results["a"].devices, std::vector{FakeClaimHandler::DefaultDevice("a")});
  EXPECT_EQ(results["b"].error, "");
  ASSERT_THAT(handler.PrepareCalls(), SizeIs(1));
  EXPECT_THAT(handler.PrepareCalls()[0],
              ElementsAre(Field(&ClaimRef::name, "first"), Field(&ClaimRef::uid, "b")));
}

TEST(PrepareClaimsTest, MissingAndUnrequestedEntries) {
  FakeClaimHandler handler;
  handler.Omit("b");
  handler.AddUnrequested("zzz");
  auto results = PrepareClaims(handler, {Claim("a"), Claim("b")}, "v1");
  ASSERT_THAT(results, SizeIs(2));
  EXPECT_EQ(results["a"].error, "");
  EXPECT_EQ(results["b"].error, "driver returned no result for this claim");
  EXPECT_THAT(results["b"].devices, IsEmpty());
}

TEST(PrepareClaimsTest, MalformedClaimsNeverReachTheHandler) {
  FakeClaimHandler handler;
  auto results = PrepareClaims(
      handler, {Claim("a", ""), ClaimRef{.namespace_name = "", .uid = "b", .name = "x"}, Claim("")},
      "v1beta1");
  EXPECT_THAT(results,
              ElementsAre(Pair("", Field(&PrepareResult::error, "claim has no uid")),
                          Pair("a", Field(&PrepareResult::error, "claim has no name")),
                          Pair("b", Field(&PrepareResult::error, "claim has no namespace"))));
  EXPECT_THAT(handler.PrepareCalls(), IsEmpty());
}

TEST(PrepareClaimsTest, HandlerExceptionBecomesPerClaimErrors) {
  FakeClaimHandler handler;
  handler.Throw();
  auto results = PrepareClaims(handler, {Claim("a"), Claim("b")}, "v1");
  EXPECT_THAT(
      results,
      ElementsAre(Pair("a", Field(&PrepareResult::error, "internal error: fake handler failure")),
                  Pair("b", Field(&PrepareResult::error, "internal error: fake handler failure"))));
  auto unprepared = UnprepareClaims(handler, {Claim("a")}, "v1");
  EXPECT_THAT(unprepared, ElementsAre(Pair("a", "internal error: fake handler failure")));
}

TEST(UnprepareClaimsTest, OneEntryPerDistinctUid) {
  FakeClaimHandler handler;
  handler.SetError("b", "busy");
  handler.Omit("c");
  handler.AddUnrequested("zzz");
  auto results = UnprepareClaims(handler, {Claim("a"), Claim("b"), Claim("c"), Claim("a")}, "v1");
  EXPECT_THAT(results, ElementsAre(Pair("a", ""), Pair("b", "busy"),
                                   Pair("c", "driver returned no result for this claim")));
  ASSERT_THAT(handler.UnprepareCalls(), SizeIs(1));
  EXPECT_THAT(handler.UnprepareCalls()[0], SizeIs(3));
}

TEST(UnprepareClaimsTest, EmptyInputDoesNotCallTheHandler) {
  FakeClaimHandler handler;
  EXPECT_THAT(UnprepareClaims(handler, {}, "v1"), IsEmpty());
  EXPECT_THAT(PrepareClaims(handler, {}, "v1"), IsEmpty());
  EXPECT_THAT(handler.PrepareCalls(), IsEmpty());
  EXPECT_THAT(handler.UnprepareCalls(), IsEmpty());
}

}  // namespace
}  // namespace dralens::driver::plugin
