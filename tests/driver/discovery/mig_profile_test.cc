#include "src/model/mig_profile.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const MigBoard& Board(absl::string_view key) {
  const MigBoard* board = FindMigBoard(key);
  EXPECT_NE(board, nullptr) << key;
  return *board;
}

const MigProfile& Profile(absl::string_view board, absl::string_view name) {
  const MigProfile* p = Board(board).FindProfile(name);
  EXPECT_NE(p, nullptr) << board << " " << name;
  return *p;
}

MigInstancePlacement At(const MigProfile& p, uint32_t start) {
  return MigInstancePlacement{p.gi_profile_id, MigPlacement{start, p.memory_slices}};
}

TEST(MigProfileName, ReferenceChecks) {
  // §1.4 worked examples.
  EXPECT_EQ(MigProfileName(1, 1, 9984, 81559ULL << 20), "1g.10gb");
  EXPECT_EQ(MigProfileName(1, 1, 16384, 143771ULL << 20), "1g.18gb");
  EXPECT_EQ(MigProfileName(1, 1, 5952, 24576ULL << 20), "1g.6gb");
  EXPECT_EQ(MigProfileName(1, 1, 9984, 81559ULL << 20, "+me"), "1g.10gb+me");
  EXPECT_EQ(MigProfileName(3, 1, 40448, 81559ULL << 20), "1c.3g.40gb");
}

TEST(MigProfileName, EveryTableNameMatchesTheAlgorithm) {
  for (const MigBoard& board : KnownMigBoards()) {
    for (const MigProfile& p : board.profiles) {
      EXPECT_EQ(MigProfileName(p.gpu_slices, p.gpu_slices, p.memory_mib, board.memory_bytes(),
                               SuffixForGiProfileIndex(p.gi_profile_index)),
                p.name)
          << board.key;
    }
  }
}

TEST(MigProfileName, DnsForm) {
  EXPECT_EQ(MigProfileDnsName("1g.10gb"), "1g10gb");
  EXPECT_EQ(MigProfileDnsName("1g.10gb+me"), "1g10gb-me");
  EXPECT_EQ(MigProfileDnsName("7g.141gb"), "7g141gb");
}

TEST(MigIndexTables, SlicesAndSuffixes) {
  EXPECT_EQ(GpuSlicesForGiProfileIndex(0), 1u);
  EXPECT_EQ(GpuSlicesForGiProfileIndex(4), 7u);
  EXPECT_EQ(GpuSlicesForGiProfileIndex(9), 1u);
  EXPECT_EQ(GpuSlicesForGiProfileIndex(0x12), std::nullopt);
  EXPECT_EQ(SuffixForGiProfileIndex(7), "+me");
  EXPECT_EQ(SuffixForGiProfileIndex(0x0F), "+me.all");
  EXPECT_EQ(SuffixForGiProfileIndex(0x0D), "-me");
  EXPECT_EQ(SuffixForGiProfileIndex(0x0A), "+gfx");
  EXPECT_EQ(SuffixForGiProfileIndex(9), "");
  EXPECT_EQ(DefaultCiProfileIndex(1), 0u);
  EXPECT_EQ(DefaultCiProfileIndex(2), 1u);
  EXPECT_EQ(DefaultCiProfileIndex(3), 2u);
  EXPECT_EQ(DefaultCiProfileIndex(4), 3u);
  EXPECT_EQ(DefaultCiProfileIndex(7), 4u);
}

TEST(MigBoards, H100Table) {
  const MigBoard& h100 = Board("h100-80gb");
  EXPECT_EQ(FindMigBoard("NVIDIA H100 80GB HBM3"), &h100);
  EXPECT_EQ(h100.memory_slices, 8u);
  std::vector<std::string> names;
  std::vector<uint32_t> ids;
  for (const MigProfile& p : h100.profiles) {
    names.push_back(p.name);
    ids.push_back(p.gi_profile_id);
  }
  EXPECT_THAT(names, ElementsAre("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb",
                                 "1g.10gb+me", "1g.20gb"));
  EXPECT_THAT(ids, ElementsAre(19, 14, 9, 5, 0, 20, 15));
  const MigProfile& seven = Profile("h100-80gb", "7g.80gb");
  EXPECT_EQ(seven.copy_engines, 8u);
  EXPECT_EQ(seven.multiprocessors, 132u);
  EXPECT_EQ(seven.memory_mib, 81152u);
  EXPECT_EQ(seven.ci_profile_id, 4u);
  const MigProfile& three = Profile("h100-80gb", "3g.40gb");
  EXPECT_EQ(three.memory_slices, 4u);
  EXPECT_EQ(three.gpu_slices, 3u);
  EXPECT_EQ(three.multiprocessors, 60u);
  EXPECT_EQ(three.memory_bytes(), 40448ULL << 20);
  EXPECT_EQ(Profile("h100-80gb", "1g.20gb").multiprocessors, 26u);
}

TEST(MigBoards, A100AndA30Tables) {
  EXPECT_EQ(Profile("a100-40gb", "1g.5gb").memory_mib, 4864u);
  EXPECT_EQ(Profile("a100-40gb", "1g.10gb").gi_profile_id, 15u);
  EXPECT_EQ(Profile("a100-40gb", "7g.40gb").decoders, 5u);
  EXPECT_EQ(Profile("a100-80gb", "7g.80gb").memory_mib, 80896u);
  EXPECT_EQ(Profile("a100-80gb", "3g.40gb").memory_slices, 4u);
  EXPECT_EQ(Board("a30").memory_slices, 4u);
  EXPECT_EQ(Profile("a30", "2g.12gb").gi_profile_id, 5u);
  EXPECT_EQ(Profile("a30", "4g.24gb").gi_profile_id, 0u);
  EXPECT_EQ(Profile("h200", "3g.71gb").memory_mib, 71168u);
  EXPECT_EQ(FindMigBoard("NVIDIA B200"), nullptr);
}

// Every listed placement of every profile is accepted on an empty GPU, and every other start in
// [0, memory_slices) is rejected as invalid.
TEST(MigPlacementRules, EveryValidPlacementAcceptedInvalidRejected) {
  for (const char* key : {"h100-80gb", "a100-40gb", "a100-80gb", "a30", "h200"}) {
    const MigBoard& board = Board(key);
    for (const MigProfile& p : board.profiles) {
      std::set<uint32_t> valid;
      for (const MigPlacement& placement : p.placements) {
        valid.insert(placement.start);
        EXPECT_EQ(placement.size, p.memory_slices);
        EXPECT_LE(placement.end(), board.memory_slices);
        EXPECT_EQ(CheckMigFit(p, placement.start, {}), MigFit::kFits) << key << " " << p.name;
      }
      for (uint32_t start = 0; start <= board.memory_slices; ++start) {
        if (valid.count(start) == 0) {
          EXPECT_EQ(CheckMigFit(p, start, {}), MigFit::kInvalidPlacement)
              << key << " " << p.name << " " << start;
        }
      }
    }
  }
}

TEST(MigPlacementRules, H100ReferencePlacements) {
  EXPECT_EQ(Profile("h100-80gb", "2g.20gb").placements,
            (std::vector<MigPlacement>{{0, 2}, {2, 2}, {4, 2}}));
  EXPECT_EQ(Profile("h100-80gb", "1g.20gb").placements,
            (std::vector<MigPlacement>{{0, 2}, {2, 2}, {4, 2}, {6, 2}}));
  EXPECT_EQ(Profile("h100-80gb", "3g.40gb").placements,
            (std::vector<MigPlacement>{{0, 4}, {4, 4}}));
  EXPECT_EQ(CheckMigFit(Profile("h100-80gb", "2g.20gb"), 6, {}), MigFit::kInvalidPlacement);
  EXPECT_EQ(CheckMigFit(Profile("h100-80gb", "1g.10gb"), 7, {}), MigFit::kInvalidPlacement);
  EXPECT_EQ(CheckMigFit(Profile("h100-80gb", "3g.40gb"), 2, {}), MigFit::kInvalidPlacement);
  EXPECT_EQ(CheckMigFit(Profile("h100-80gb", "4g.40gb"), 4, {}), MigFit::kInvalidPlacement);
}

TEST(MigPlacementRules, OverlapsRejected) {
  const MigProfile& three = Profile("h100-80gb", "3g.40gb");
  const MigProfile& two = Profile("h100-80gb", "2g.20gb");
  const MigProfile& one = Profile("h100-80gb", "1g.10gb");
  const MigProfile& seven = Profile("h100-80gb", "7g.80gb");
  const std::vector<MigInstancePlacement> existing = {At(three, 0)};
  EXPECT_EQ(CheckMigFit(two, 0, existing), MigFit::kOverlap);
  EXPECT_EQ(CheckMigFit(two, 2, existing), MigFit::kOverlap);
  EXPECT_EQ(CheckMigFit(two, 4, existing), MigFit::kFits);
  EXPECT_EQ(CheckMigFit(one, 3, existing), MigFit::kOverlap);
  EXPECT_EQ(CheckMigFit(one, 4, existing), MigFit::kFits);
  EXPECT_EQ(CheckMigFit(seven, 0, existing), MigFit::kOverlap);
  EXPECT_EQ(CheckMigFit(three, 4, existing), MigFit::kFits);
  // 1g.20gb at 6 covers slices 6 and 7: a 1g.10gb at 6 overlaps it.
  EXPECT_EQ(CheckMigFit(one, 6, {At(Profile("h100-80gb", "1g.20gb"), 6)}), MigFit::kOverlap);

  const absl::Status overlap = CheckMigPlacement(two, 2, existing);
  EXPECT_EQ(overlap.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(overlap.message(), HasSubstr("insufficient resources"));
  const absl::Status invalid = CheckMigPlacement(two, 6, {});
  EXPECT_EQ(invalid.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(invalid.message(), HasSubstr("{0,2,4}:2"));
}

TEST(MigPlacementRules, InstanceLimit) {
  const MigProfile& me = Profile("h100-80gb", "1g.10gb+me");
  EXPECT_EQ(me.instance_count, 1u);
  EXPECT_EQ(CheckMigFit(me, 3, {At(me, 0)}), MigFit::kInstanceLimit);
  EXPECT_EQ(CheckMigPlacement(me, 3, {At(me, 0)}).code(), absl::StatusCode::kResourceExhausted);
}

TEST(MigPlaceable, EmptyH100) {
  const MigBoard& h100 = Board("h100-80gb");
  EXPECT_THAT(PlaceableCounts(h100.profiles, {}),
              ElementsAre(MigPlaceable{"1g.10gb", 7}, MigPlaceable{"2g.20gb", 3},
                          MigPlaceable{"3g.40gb", 2}, MigPlaceable{"4g.40gb", 1},
                          MigPlaceable{"7g.80gb", 1}, MigPlaceable{"1g.10gb+me", 1},
                          MigPlaceable{"1g.20gb", 4}));
}

TEST(MigPlaceable, AfterOne3g) {
  // Reference §2.8: one 3g.40gb takes 3g to 1 and 1g.10gb to 3 (four memory slices gone).
  const MigBoard& a100 = Board("a100-80gb");
  const std::vector<MigInstancePlacement> existing = {At(*a100.FindProfile("3g.40gb"), 0)};
  EXPECT_EQ(PlaceableCount(*a100.FindProfile("3g.40gb"), existing), 1u);
  EXPECT_EQ(PlaceableCount(*a100.FindProfile("1g.10gb"), existing), 3u);
  EXPECT_EQ(RemainingCapacity(*a100.FindProfile("1g.10gb"), existing), 3u);
  EXPECT_EQ(PlaceableCount(*a100.FindProfile("2g.20gb"), existing), 1u);
  EXPECT_EQ(PlaceableCount(*a100.FindProfile("1g.20gb"), existing), 2u);
  EXPECT_EQ(PlaceableCount(*a100.FindProfile("4g.40gb"), existing), 0u);
  EXPECT_EQ(PlaceableCount(*a100.FindProfile("7g.80gb"), existing), 0u);
}

TEST(MigPlaceable, FragmentedLayout) {
  // 1g.10gb at 1 and 5: 2g.20gb fits only at 2 (0:2 and 4:2 overlap), 3g.40gb nowhere.
  const MigBoard& h100 = Board("h100-80gb");
  const MigProfile& one = *h100.FindProfile("1g.10gb");
  const std::vector<MigInstancePlacement> existing = {At(one, 1), At(one, 5)};
  EXPECT_EQ(PlaceableCount(*h100.FindProfile("2g.20gb"), existing), 1u);
  EXPECT_EQ(PlaceableCount(*h100.FindProfile("3g.40gb"), existing), 0u);
  EXPECT_EQ(PlaceableCount(*h100.FindProfile("1g.20gb"), existing), 2u);  // at 2 and 6
  EXPECT_EQ(PlaceableCount(one, existing), 5u);                           // 0, 2, 3, 4, 6
  EXPECT_EQ(OccupiedSliceMask(existing), 0b00100010u);
}

TEST(MigPlaceable, OverlappingFreePlacementsCountOnce) {
  // The listed placements of a 1-slice profile never overlap, so take a synthetic profile whose
  // placements do ({0,1,2}:2 on 4 slices): at most two disjoint ones fit on an empty GPU,
  // while three placements are free.
  MigProfile p;
  p.name = "test";
  p.gi_profile_id = 99;
  p.memory_slices = 2;
  p.instance_count = 3;
  p.placements = {{0, 2}, {1, 2}, {2, 2}};
  EXPECT_EQ(FreePlacements(p, {}).size(), 3u);
  EXPECT_EQ(RemainingCapacity(p, {}), 3u);
  EXPECT_EQ(PlaceableCount(p, {}), 2u);
  // With slice 0 used only {1,2}:2 and {2,2}:2 are free, and they overlap.
  EXPECT_EQ(PlaceableCount(p, {{1, {0, 1}}}), 1u);
}

TEST(MigPlaceable, FullGpuAndInstanceCaps) {
  const MigBoard& h100 = Board("h100-80gb");
  const std::vector<MigInstancePlacement> full = {At(*h100.FindProfile("7g.80gb"), 0)};
  for (const MigPlaceable& placeable : PlaceableCounts(h100.profiles, full)) {
    EXPECT_EQ(placeable.count, 0u) << placeable.profile;
  }
  const MigProfile& me = *h100.FindProfile("1g.10gb+me");
  EXPECT_EQ(PlaceableCount(me, {At(me, 0)}), 0u);
  const MigProfile& two = *h100.FindProfile("2g.20gb");
  EXPECT_EQ(PlaceableCount(two, {At(two, 0), At(two, 2)}), 1u);
}

TEST(MigPlacement, MaskAndString) {
  EXPECT_EQ((MigPlacement{4, 4}).SliceMask(), 0xF0u);
  EXPECT_EQ((MigPlacement{0, 8}).SliceMask(), 0xFFu);
  EXPECT_EQ(ToString(MigPlacement{6, 2}), "6:2");
  EXPECT_TRUE((MigPlacement{0, 4}).Overlaps({3, 1}));
  EXPECT_FALSE((MigPlacement{0, 4}).Overlaps({4, 4}));
}

}  // namespace
}  // namespace dralens::model
