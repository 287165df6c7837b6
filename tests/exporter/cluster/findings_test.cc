// The pure rules of findings.h, one case per rule, in the order the rules are tried.
#include "exporter/cluster/findings.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dralens::exporter::cluster {
namespace {

struct ReasonCase {
  std::string rule;
  RequestCounts counts;
  PendingReason want;
};

TEST(FindingsTest, PendingReasonOneCasePerRule) {
  const std::vector<ReasonCase> cases = {
      {"no such class",
       {.class_exists = false, .matching = 8, .untainted = 8, .free = 8},
       PendingReason::kUnsatisfiable},
      {"nothing matches", {.matching = 0}, PendingReason::kUnsatisfiable},
      {"fewer matches than the count",
       {.count = 4, .matching = 3, .untainted = 3, .free = 3},
       PendingReason::kUnsatisfiable},
      {"nothing matches, a verdict unknown", {.unknown = true}, PendingReason::kUnknown},
      {"too few matches, a verdict unknown",
       {.count = 2, .unknown = true, .matching = 1, .untainted = 1, .free = 1},
       PendingReason::kUnknown},
      {"All with no match", {.all = true}, PendingReason::kUnsatisfiable},
      {"every match tainted", {.matching = 4, .untainted = 0}, PendingReason::kTainted},
      {"too few untainted",
       {.count = 3, .matching = 4, .untainted = 2, .free = 2},
       PendingReason::kTainted},
      {"too few free",
       {.count = 2, .matching = 4, .untainted = 4, .free = 1},
       PendingReason::kNoCapacity},
      {"All: an untainted match not free",
       {.all = true, .matching = 4, .untainted = 3, .free = 2},
       PendingReason::kNoCapacity},
      {"enough free",
       {.count = 2, .matching = 4, .untainted = 4, .free = 2},
       PendingReason::kWaitingForPod},
      {"All: every untainted match free, tainted ones aside",
       {.all = true, .matching = 4, .untainted = 3, .free = 3},
       PendingReason::kWaitingForPod},
      {"an unknown verdict beside enough matches",
       {.unknown = true, .matching = 1, .untainted = 1, .free = 1},
       PendingReason::kWaitingForPod},
  };
  for (const ReasonCase& c : cases) {
    EXPECT_EQ(ReasonOf(c.counts), c.want)
        << c.rule << ": got " << ToString(ReasonOf(c.counts)) << ", want " << ToString(c.want);
  }
}

TEST(FindingsTest, AlternativesTakeTheBestRequestsTheWorst) {
  using R = PendingReason;
  EXPECT_EQ(BestOf({R::kUnsatisfiable, R::kNoCapacity, R::kTainted}), R::kNoCapacity);
  EXPECT_EQ(BestOf({}), R::kUnsatisfiable);  // no alternative can be met
  EXPECT_EQ(WorstOf({R::kWaitingForPod, R::kTainted, R::kNoCapacity}), R::kTainted);
  EXPECT_EQ(WorstOf({}), R::kWaitingForPod);  // a claim asking for nothing waits for its pod
}

struct StateCase {
  bool allocated, reserved, running;
  ClaimState want;
};

TEST(FindingsTest, ClaimStatesAreExclusive) {
  const std::vector<StateCase> cases = {
      {false, false, false, ClaimState::kPending},
      {false, true, true, ClaimState::kPending},  // no allocation: nothing else counts
      {true, false, false, ClaimState::kAllocated},
      {true, true, false, ClaimState::kReserved},
      {true, true, true, ClaimState::kInUse},
  };
  for (const StateCase& c : cases) {
    EXPECT_EQ(ClaimStateOf(c.allocated, c.reserved, c.running), c.want)
        << c.allocated << c.reserved << c.running;
  }
}

struct PartCase {
  std::string rule;
  GpuPart part;
  PartFinding want;
};

std::string Describe(const PartFinding& f) {
  return std::string(ToString(f.state)) + "/" +
         (f.stranded.has_value() ? std::string(ToString(*f.stranded)) : "-") + "/" +
         std::to_string(static_cast<int>(f.device_class));
}

// The precedence of docs/cluster.md: one state and at most one stranded kind per part.
TEST(FindingsTest, GpuPartOneCasePerRule) {
  using C = StrandedClass;
  using K = StrandedKind;
  using S = GpuState;
  const std::vector<PartCase> cases = {
      {"unavailable before anything: held",
       {.held = true, .unavailable = true, .holder_in_use = true},
       {S::kUnavailable, K::kAdvertisedUnhealthy, C::kHolder}},
      {"unavailable before anything: nobody's, while a pending claim would fit",
       {.unavailable = true, .claims_pend = true, .fits_pending = true, .mig_cut = true},
       {S::kUnavailable, K::kAdvertisedUnhealthy, C::kNone}},
      {"held and in use: not stranded", {.held = true, .holder_in_use = true}, {S::kAllocated}},
      {"held, no pod runs",
       {.held = true, .claims_pend = true, .fits_pending = true},
       {S::kAllocated, K::kAllocatedNotRunning, C::kHolder}},
      {"free, nothing pends", {.fits_pending = true, .mig_cut = true}, {S::kFree}},
      {"free, a pending claim fits (before fragment)",
       {.claims_pend = true, .fits_pending = true, .mig_cut = true},
       {S::kFree, K::kFreeWhilePending, C::kLongestPending}},
      {"free MIG capacity that nothing pending fits",
       {.claims_pend = true, .mig_cut = true},
       {S::kFree, K::kUnplaceableFragment, C::kNone}},
      {"free, uncut, nothing pending fits", {.claims_pend = true}, {S::kFree}},
  };
  for (const PartCase& c : cases) {
    EXPECT_EQ(JudgePart(c.part), c.want)
        << c.rule << ": got " << Describe(JudgePart(c.part)) << ", want " << Describe(c.want);
  }
}

}  // namespace
}  // namespace dralens::exporter::cluster
