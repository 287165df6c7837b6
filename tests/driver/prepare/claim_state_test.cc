#include "driver/prepare/claim_state.h"

#include "gtest/gtest.h"

namespace dralens::driver::prepare {
namespace {

using S = ClaimState;

TEST(ClaimStateTest, NamesRoundTrip) {
  for (S s : kAllClaimStates) {
    EXPECT_EQ(ParseClaimState(ToString(s)), s);
  }
  EXPECT_EQ(ParseClaimState("prepared"), std::nullopt);
  EXPECT_EQ(LabelOf(S::kPrepareStarted), "prepare_started");
  EXPECT_EQ(LabelOf(S::kUnpreparing), "unpreparing");
}

TEST(ClaimStateTest, LegalEdges) {
  EXPECT_TRUE(IsLegalTransition(S::kUnprepared, S::kPrepareStarted));
  EXPECT_TRUE(IsLegalTransition(S::kPrepareStarted, S::kPrepareCompleted));
  EXPECT_TRUE(IsLegalTransition(S::kPrepareStarted, S::kUnprepared));
  EXPECT_TRUE(IsLegalTransition(S::kPrepareCompleted, S::kUnpreparing));
  EXPECT_TRUE(IsLegalTransition(S::kUnpreparing, S::kUnprepared));
  EXPECT_TRUE(IsLegalTransition(S::kUnpreparing, S::kPrepareCompleted));
  EXPECT_FALSE(IsLegalTransition(S::kUnprepared, S::kPrepareCompleted));
  EXPECT_FALSE(IsLegalTransition(S::kPrepareCompleted, S::kUnprepared));
  EXPECT_FALSE(IsLegalTransition(S::kPrepareCompleted, S::kPrepareStarted));
  EXPECT_FALSE(IsLegalTransition(S::kUnprepared, S::kUnprepared));
}

TEST(ClaimStateTest, OnlyStartedAndCompletedArePersisted) {
  EXPECT_FALSE(IsPersisted(S::kUnprepared));
  EXPECT_TRUE(IsPersisted(S::kPrepareStarted));
  EXPECT_TRUE(IsPersisted(S::kPrepareCompleted));
  EXPECT_FALSE(IsPersisted(S::kUnpreparing));
}

}  // namespace
}  // namespace dralens::driver::prepare
