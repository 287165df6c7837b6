#include "driver/prepare/claim_state.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dralens::driver::prepare {
namespace {

using S = ClaimState;

class Recorder : public TransitionObserver {
 public:
  void OnTransition(absl::string_view uid, ClaimState from, ClaimState to) override {
    seen.push_back(std::string(uid) + ":" + std::string(ToString(from)) + "->" +
                   std::string(ToString(to)));
  }
  std::vector<std::string> seen;
};

TEST(ClaimStateTest, NamesRoundTrip) {
  for (S s : {S::kUnprepared, S::kPrepareStarted, S::kPrepareCompleted, S::kUnpreparing}) {
    EXPECT_EQ(ParseClaimState(ToString(s)), s);
  }
  EXPECT_EQ(ParseClaimState("prepared"), std::nullopt);
}

TEST(ClaimStateTest, LegalEdges) {
  EXPECT_TRUE(IsLegalTransition(S::kUnprepared, S::kPrepareStarted));
  EXPECT_TRUE(IsLegalTransition(S::kPrepareStarted, S::kPrepareCompleted));
  EXPECT_TRUE(IsLegalTransition(S::kPrepareStarted, S::kUnprepared));
  EXPECT_TRUE(IsLegalTransition(S::kPrepareCompleted, S::kUnpreparing));
  EXPECT_TRUE(IsLegalTransition(S::kUnpreparing, S::kUnprepared));
  EXPECT_FALSE(IsLegalTransition(S::kUnprepared, S::kPrepareCompleted));
  EXPECT_FALSE(IsLegalTransition(S::kPrepareCompleted, S::kUnprepared));
  EXPECT_FALSE(IsLegalTransition(S::kPrepareCompleted, S::kPrepareStarted));
}

TEST(ClaimStateTest, TransitionsAreCheckedCountedAndObserved) {
  Recorder recorder;
  ClaimStateMachine sm(&recorder);
  ASSERT_TRUE(sm.Transition("a", S::kUnprepared, S::kPrepareStarted).ok());
  ASSERT_TRUE(sm.Transition("a", S::kPrepareStarted, S::kPrepareCompleted).ok());
  EXPECT_EQ(sm.StateOf("a"), S::kPrepareCompleted);
  EXPECT_EQ(sm.CountInState(S::kPrepareCompleted), 1);
  EXPECT_EQ(sm.CountInState(S::kPrepareStarted), 0);

  // Wrong "from": refused, nothing changes, nothing observed.
  absl::Status wrong = sm.Transition("a", S::kPrepareStarted, S::kPrepareCompleted);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kFailedPrecondition);
  // Illegal edge.
  EXPECT_FALSE(sm.Transition("a", S::kPrepareCompleted, S::kUnprepared).ok());

  ASSERT_TRUE(sm.Transition("a", S::kPrepareCompleted, S::kUnpreparing).ok());
  ASSERT_TRUE(sm.Transition("a", S::kUnpreparing, S::kUnprepared).ok());
  EXPECT_EQ(sm.StateOf("a"), S::kUnprepared);
  EXPECT_EQ(sm.CountInState(S::kUnpreparing), 0);
  EXPECT_EQ(sm.TransitionCount(S::kUnprepared, S::kPrepareStarted), 1);
  EXPECT_EQ(recorder.seen, (std::vector<std::string>{
                               "a:Unprepared->PrepareStarted", "a:PrepareStarted->PrepareCompleted",
                               "a:PrepareCompleted->Unpreparing", "a:Unpreparing->Unprepared"}));
}

TEST(ClaimStateTest, AdoptIsNotATransition) {
  Recorder recorder;
  ClaimStateMachine sm(&recorder);
  sm.Adopt("b", S::kPrepareStarted);
  EXPECT_EQ(sm.StateOf("b"), S::kPrepareStarted);
  EXPECT_EQ(sm.CountInState(S::kPrepareStarted), 1);
  EXPECT_TRUE(recorder.seen.empty());
  ASSERT_TRUE(sm.Transition("b", S::kPrepareStarted, S::kUnprepared).ok());
  EXPECT_EQ(sm.CountInState(S::kPrepareStarted), 0);
}

}  // namespace
}  // namespace dralens::driver::prepare
