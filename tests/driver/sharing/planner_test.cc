#include "driver/sharing/planner.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::driver::sharing {
namespace {

using ::testing::HasSubstr;

common::Quantity Q(absl::string_view text) { return *common::Quantity::Parse(text); }

SharingDevice Gpu0() { return {"gpu-0", DeviceType::kGpu, "GPU-0000", Q("40Gi")}; }

SharingConfig Exclusive() { return {}; }

SharingConfig TimeSliced(discovery::TimeSlice interval) {
  SharingConfig s;
  s.mode = SharingMode::kTimeSlicing;
  s.interval = interval;
  return s;
}

SharingConfig Mps(std::optional<int> pct = std::nullopt) {
  SharingConfig s;
  s.mode = SharingMode::kMps;
  s.mps.default_active_thread_percentage = pct;
  return s;
}

// A holder as the planner would have recorded it.
DeviceHolder Holder(std::string claim, SharingConfig sharing,
                    std::optional<std::string> share_id = std::nullopt,
                    std::optional<common::Quantity> consumed = std::nullopt) {
  SharingRequest r{claim, sharing, share_id, consumed};
  SharingDecision d = SharingPlanner().Plan(Gpu0(), r, {});
  EXPECT_TRUE(d.allowed) << d.reason;
  return {std::move(claim), std::move(share_id), consumed, d};
}

TEST(SharingStrategy, LabelValues) {
  EXPECT_EQ(ToString(SharingStrategy::kExclusive), "exclusive");
  EXPECT_EQ(ToString(SharingStrategy::kTimeSlicing), "time_slicing");
  EXPECT_EQ(ToString(SharingStrategy::kMps), "mps");
  EXPECT_EQ(ToString(SharingStrategy::kSharedClaim), "shared_claim");
  EXPECT_EQ(ToString(SharingStrategy::kConsumable), "consumable");
}

TEST(SharingPlanner, FreeDeviceExclusive) {
  SharingDecision d = SharingPlanner().Plan(Gpu0(), {"claim-a", Exclusive(), {}, {}}, {});
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.strategy, SharingStrategy::kExclusive);
  EXPECT_EQ(d.sharing.mode, SharingMode::kNone);
  EXPECT_EQ(d.reason, "device gpu-0 is free; exclusive use");
}

TEST(SharingPlanner, ExclusiveRefusedWhileHeld) {
  SharingDecision d = SharingPlanner().Plan(Gpu0(), {"claim-b", Exclusive(), {}, {}},
                                            {Holder("claim-a", Exclusive())});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.strategy, SharingStrategy::kExclusive);
  EXPECT_EQ(d.reason,
            "device gpu-0 is already held by claim claim-a (exclusive use); this claim asks for "
            "exclusive use");
}

TEST(SharingPlanner, SharingRefusedAgainstExclusiveHolder) {
  SharingDecision d =
      SharingPlanner().Plan(Gpu0(), {"claim-b", TimeSliced(discovery::TimeSlice::kLong), {}, {}},
                            {Holder("claim-a", Exclusive())});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.strategy, SharingStrategy::kTimeSlicing);
  EXPECT_EQ(d.reason, "device gpu-0 is held exclusively by claim claim-a");
}

TEST(SharingPlanner, TimeSlicingSameIntervalShares) {
  const SharingConfig ts = TimeSliced(discovery::TimeSlice::kLong);
  SharingDecision d = SharingPlanner().Plan(Gpu0(), {"claim-c", ts, {}, {}},
                                            {Holder("claim-a", ts), Holder("claim-b", ts)});
  EXPECT_TRUE(d.allowed) << d.reason;
  EXPECT_EQ(d.strategy, SharingStrategy::kTimeSlicing);
  EXPECT_EQ(d.sharing.interval, discovery::TimeSlice::kLong);
  EXPECT_EQ(d.reason,
            "device gpu-0 shared with claim(s) claim-a, claim-b; TimeSlicing with interval Long");
}

TEST(SharingPlanner, TimeSlicingDifferentIntervalRefused) {
  SharingDecision d =
      SharingPlanner().Plan(Gpu0(), {"claim-b", TimeSliced(discovery::TimeSlice::kShort), {}, {}},
                            {Holder("claim-a", TimeSliced(discovery::TimeSlice::kLong))});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason,
            "device gpu-0 is time-sliced by claim claim-a with interval Long; this claim asks "
            "for interval Short and a device has one interval");
}

TEST(SharingPlanner, TimeSlicingRefusedAgainstMps) {
  SharingDecision d =
      SharingPlanner().Plan(Gpu0(), {"claim-b", TimeSliced(discovery::TimeSlice::kDefault), {}, {}},
                            {Holder("claim-a", Mps())});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason,
            "device gpu-0 is used by claim claim-a with MPS; this claim asks for TimeSlicing with "
            "interval Default");
}

TEST(SharingPlanner, MpsFirstClaimOwnsDaemon) {
  SharingDecision d = SharingPlanner().Plan(Gpu0(), {"claim-a", Mps(50), {}, {}}, {});
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.strategy, SharingStrategy::kMps);
  EXPECT_EQ(d.mps_owner_claim_uid, "claim-a");
  EXPECT_EQ(d.sharing.mps.default_active_thread_percentage, 50);
  EXPECT_EQ(d.reason, "device gpu-0 is free; MPS (active threads 50%)");
}

TEST(SharingPlanner, MpsSameSettingsJoinOwnersDaemon) {
  SharingDecision d =
      SharingPlanner().Plan(Gpu0(), {"claim-b", Mps(50), {}, {}}, {Holder("claim-a", Mps(50))});
  EXPECT_TRUE(d.allowed) << d.reason;
  EXPECT_EQ(d.strategy, SharingStrategy::kMps);
  EXPECT_EQ(d.mps_owner_claim_uid, "claim-a");
}

TEST(SharingPlanner, MpsDifferentSettingsRefused) {
  SharingDecision d =
      SharingPlanner().Plan(Gpu0(), {"claim-b", Mps(30), {}, {}}, {Holder("claim-a", Mps(50))});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.strategy, SharingStrategy::kMps);
  EXPECT_EQ(d.reason,
            "device gpu-0 runs MPS for claim claim-a with other settings (MPS (active threads "
            "50%) vs. MPS (active threads 30%)); one MPS control daemon serves a device");
}

TEST(SharingPlanner, SameClaimAgainIsSharedClaim) {
  const SharingConfig ts = TimeSliced(discovery::TimeSlice::kMedium);
  SharingDecision d =
      SharingPlanner().Plan(Gpu0(), {"claim-a", Exclusive(), {}, {}}, {Holder("claim-a", ts)});
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.strategy, SharingStrategy::kSharedClaim);
  // The recorded settings stay in force.
  EXPECT_EQ(d.sharing, ts);
  EXPECT_THAT(d.reason, HasSubstr("claim claim-a already holds device gpu-0"));
}

TEST(SharingPlanner, SharedClaimWithExclusiveHolder) {
  SharingDecision d = SharingPlanner().Plan(Gpu0(), {"claim-a", Exclusive(), {}, {}},
                                            {Holder("claim-a", Exclusive())});
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.strategy, SharingStrategy::kSharedClaim);
}

TEST(SharingPlanner, RefusedHoldersIgnored) {
  DeviceHolder refused = Holder("claim-x", Exclusive());
  refused.decision.allowed = false;
  SharingDecision d = SharingPlanner().Plan(Gpu0(), {"claim-a", Exclusive(), {}, {}}, {refused});
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.strategy, SharingStrategy::kExclusive);
}

TEST(SharingPlanner, ConsumableFitsMemory) {
  SharingDecision d = SharingPlanner().Plan(Gpu0(), {"claim-c", Exclusive(), "share-3", Q("10Gi")},
                                            {Holder("claim-a", Exclusive(), "share-1", Q("20Gi")),
                                             Holder("claim-b", Exclusive(), "share-2", Q("10Gi"))});
  EXPECT_TRUE(d.allowed) << d.reason;
  EXPECT_EQ(d.strategy, SharingStrategy::kConsumable);
  EXPECT_EQ(d.reason,
            "device gpu-0 shared by consumable capacity with claim(s) claim-a, claim-b; 40Gi of "
            "40Gi memory consumed");
}

TEST(SharingPlanner, ConsumableOverMemoryRefused) {
  SharingDecision d = SharingPlanner().Plan(Gpu0(), {"claim-b", Exclusive(), "share-2", Q("30Gi")},
                                            {Holder("claim-a", Exclusive(), "share-1", Q("20Gi"))});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.strategy, SharingStrategy::kConsumable);
  EXPECT_EQ(d.reason,
            "device gpu-0 has 40Gi of memory; this allocation (30Gi) and 1 other allocation(s) "
            "would consume 50Gi");
}

TEST(SharingPlanner, ConsumableUnknownMemoryNotChecked) {
  SharingDevice dev = Gpu0();
  dev.memory.reset();
  SharingDecision d = SharingPlanner().Plan(dev, {"claim-b", Exclusive(), "share-2", Q("30Gi")},
                                            {Holder("claim-a", Exclusive(), "share-1", Q("20Gi"))});
  EXPECT_TRUE(d.allowed) << d.reason;
}

TEST(SharingPlanner, ConsumableRefusedAgainstHolderWithoutShareId) {
  SharingDecision d = SharingPlanner().Plan(Gpu0(), {"claim-b", Exclusive(), "share-2", Q("1Gi")},
                                            {Holder("claim-a", Exclusive())});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason,
            "device gpu-0 is held by claim claim-a without a share ID; consumable capacity needs "
            "every allocation of the device to carry one");
}

TEST(SharingPlanner, ConsumableRefusedWhenSettingsDiffer) {
  SharingDecision d = SharingPlanner().Plan(
      Gpu0(), {"claim-b", TimeSliced(discovery::TimeSlice::kLong), "share-2", Q("1Gi")},
      {Holder("claim-a", TimeSliced(discovery::TimeSlice::kShort), "share-1", Q("1Gi"))});
  EXPECT_FALSE(d.allowed);
  EXPECT_THAT(d.reason, HasSubstr("time-sliced by claim claim-a with interval Short"));
}

TEST(SharingPlanner, NoShareIdRefusedAgainstConsumableHolder) {
  const SharingConfig ts = TimeSliced(discovery::TimeSlice::kDefault);
  SharingDecision d = SharingPlanner().Plan(Gpu0(), {"claim-b", ts, {}, {}},
                                            {Holder("claim-a", ts, "share-1", Q("1Gi"))});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason,
            "device gpu-0 is held by claim claim-a through consumable capacity (share ID "
            "share-1); this allocation has no share ID");
}

TEST(SharingPlanner, SameClaimDifferentShareIdIsConsumable) {
  SharingDecision d = SharingPlanner().Plan(Gpu0(), {"claim-a", Exclusive(), "share-2", Q("1Gi")},
                                            {Holder("claim-a", Exclusive(), "share-1", Q("1Gi"))});
  EXPECT_TRUE(d.allowed) << d.reason;
  EXPECT_EQ(d.strategy, SharingStrategy::kConsumable);
}

TEST(SharingPlanner, RefusalsCarryTheirBoundedReason) {
  const std::vector<DeviceHolder> exclusive = {Holder("claim-a", Exclusive())};
  EXPECT_EQ(SharingPlanner().Plan(Gpu0(), {"claim-b", Exclusive(), {}, {}}, exclusive).refusal,
            Refusal::kDeviceBusy);
  EXPECT_EQ(
      SharingPlanner()
          .Plan(Gpu0(), {"claim-b", TimeSliced(discovery::TimeSlice::kLong), {}, {}}, exclusive)
          .refusal,
      Refusal::kDeviceBusy);
  const std::vector<DeviceHolder> sliced = {
      Holder("claim-a", TimeSliced(discovery::TimeSlice::kShort))};
  EXPECT_EQ(SharingPlanner()
                .Plan(Gpu0(), {"claim-b", TimeSliced(discovery::TimeSlice::kLong), {}, {}}, sliced)
                .refusal,
            Refusal::kMixedStrategy);
  const std::vector<DeviceHolder> shares = {Holder("claim-a", Exclusive(), "s1", Q("30Gi"))};
  EXPECT_EQ(
      SharingPlanner().Plan(Gpu0(), {"claim-b", Exclusive(), "s2", Q("20Gi")}, shares).refusal,
      Refusal::kOverCapacity);
  SharingDecision granted =
      SharingPlanner().Plan(Gpu0(), {"claim-b", Exclusive(), "s2", Q("10Gi")}, shares);
  EXPECT_TRUE(granted.allowed);
  EXPECT_EQ(granted.refusal, Refusal::kNone);
  EXPECT_EQ(ToString(Refusal::kNone), "none");
  EXPECT_EQ(ToString(Refusal::kDeviceBusy), "device_busy");
  EXPECT_EQ(ToString(Refusal::kOverCapacity), "over_capacity");
  EXPECT_EQ(ToString(Refusal::kMixedStrategy), "mixed_strategy");
}

TEST(SharingPlanner, ExclusiveAgainstAShareNamesTheShare) {
  SharingDecision d = SharingPlanner().Plan(Gpu0(), {"claim-b", Exclusive(), {}, {}},
                                            {Holder("claim-a", Exclusive(), "s1", Q("1Gi"))});
  EXPECT_FALSE(d.allowed);
  EXPECT_THAT(d.reason, HasSubstr("consumable capacity, share ID s1"));
}

}  // namespace
}  // namespace dralens::driver::sharing
