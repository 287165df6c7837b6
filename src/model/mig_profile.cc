#include "src/model/mig_profile.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dralens::model {
namespace {

// NVML_GPU_INSTANCE_PROFILE_* index constants used by the tables below.
constexpr uint32_t k1Slice = 0x0;
constexpr uint32_t k2Slice = 0x1;
constexpr uint32_t k3Slice = 0x2;
constexpr uint32_t k4Slice = 0x3;
constexpr uint32_t k7Slice = 0x4;
constexpr uint32_t k1SliceRev1 = 0x7;
constexpr uint32_t k2SliceRev1 = 0x8;
constexpr uint32_t k1SliceRev2 = 0x9;

// One row of a reference table (§2), in table column order.
MigProfile Row(const char* name, uint32_t index, uint32_t id, uint64_t mib, uint32_t sm,
               uint32_t ce, uint32_t dec, uint32_t enc, uint32_t jpeg, uint32_t ofa,
               uint32_t memory_slices, uint32_t max, std::initializer_list<uint32_t> starts) {
  MigProfile p;
  p.name = name;
  p.gi_profile_index = index;
  p.gi_profile_id = id;
  p.gpu_slices = GpuSlicesForGiProfileIndex(index).value_or(0);
  p.ci_profile_index = DefaultCiProfileIndex(p.gpu_slices).value_or(0);
  p.ci_profile_id = p.ci_profile_index;  // CI ID == index on every published board (§1.3)
  p.memory_slices = memory_slices;
  p.instance_count = max;
  p.memory_mib = mib;
  p.multiprocessors = sm;
  p.copy_engines = ce;
  p.decoders = dec;
  p.encoders = enc;
  p.jpegs = jpeg;
  p.ofas = ofa;
  for (uint32_t start : starts) {
    p.placements.push_back(MigPlacement{start, memory_slices});
  }
  return p;
}

std::vector<MigBoard> BuildBoards() {
  std::vector<MigBoard> boards;

  // §2.5 H100-SXM5-80GB.
  boards.push_back(MigBoard{
      "h100-80gb",
      "NVIDIA H100 80GB HBM3",
      "Hopper",
      9,
      9,
      0,
      81559,
      0x233010DE,
      8,
      {
          Row("1g.10gb", k1Slice, 19, 9984, 16, 1, 1, 0, 1, 0, 1, 7, {0, 1, 2, 3, 4, 5, 6}),
          Row("2g.20gb", k2Slice, 14, 20096, 32, 2, 2, 0, 2, 0, 2, 3, {0, 2, 4}),
          Row("3g.40gb", k3Slice, 9, 40448, 60, 3, 3, 0, 3, 0, 4, 2, {0, 4}),
          Row("4g.40gb", k4Slice, 5, 40448, 64, 4, 4, 0, 4, 0, 4, 1, {0}),
          Row("7g.80gb", k7Slice, 0, 81152, 132, 8, 7, 0, 7, 1, 8, 1, {0}),
          Row("1g.10gb+me", k1SliceRev1, 20, 9984, 16, 1, 1, 0, 1, 1, 1, 1, {0, 1, 2, 3, 4, 5, 6}),
          Row("1g.20gb", k1SliceRev2, 15, 20096, 26, 1, 1, 0, 1, 0, 2, 4, {0, 2, 4, 6}),
      }});

  // §2.6 H200 141GB (placements taken to equal H100's, unconfirmed in the reference).
  boards.push_back(MigBoard{
      "h200",
      "NVIDIA H200",
      "Hopper",
      9,
      9,
      0,
      143771,
      0x233510DE,
      8,
      {
          Row("1g.18gb", k1Slice, 19, 16384, 16, 1, 1, 0, 1, 0, 1, 7, {0, 1, 2, 3, 4, 5, 6}),
          Row("2g.35gb", k2Slice, 14, 33024, 32, 2, 2, 0, 2, 0, 2, 3, {0, 2, 4}),
          Row("3g.71gb", k3Slice, 9, 71168, 60, 3, 3, 0, 3, 0, 4, 2, {0, 4}),
          Row("4g.71gb", k4Slice, 5, 71168, 64, 4, 4, 0, 4, 0, 4, 1, {0}),
          Row("7g.141gb", k7Slice, 0, 143104, 132, 8, 7, 0, 7, 1, 8, 1, {0}),
          Row("1g.18gb+me", k1SliceRev1, 20, 16384, 16, 1, 1, 0, 1, 1, 1, 1, {0, 1, 2, 3, 4, 5, 6}),
          Row("1g.35gb", k1SliceRev2, 15, 33024, 26, 1, 1, 0, 1, 0, 2, 4, {0, 2, 4, 6}),
      }});

  // §2.2 A100-SXM4-40GB, current drivers (R525+, with 1g.10gb).
  boards.push_back(MigBoard{
      "a100-40gb",
      "NVIDIA A100-SXM4-40GB",
      "Ampere",
      7,
      8,
      0,
      40960,
      0x20B010DE,
      8,
      {
          Row("1g.5gb", k1Slice, 19, 4864, 14, 1, 0, 0, 0, 0, 1, 7, {0, 1, 2, 3, 4, 5, 6}),
          Row("2g.10gb", k2Slice, 14, 9856, 28, 2, 1, 0, 0, 0, 2, 3, {0, 2, 4}),
          Row("3g.20gb", k3Slice, 9, 19968, 42, 3, 2, 0, 0, 0, 4, 2, {0, 4}),
          Row("4g.20gb", k4Slice, 5, 19968, 56, 4, 2, 0, 0, 0, 4, 1, {0}),
          Row("7g.40gb", k7Slice, 0, 40192, 98, 7, 5, 0, 1, 1, 8, 1, {0}),
          Row("1g.5gb+me", k1SliceRev1, 20, 4864, 14, 1, 1, 0, 1, 1, 1, 1, {0, 1, 2, 3, 4, 5, 6}),
          Row("1g.10gb", k1SliceRev2, 15, 9856, 14, 1, 1, 0, 0, 0, 2, 4, {0, 2, 4, 6}),
      }});

  // §2.3 A100-SXM4-80GB.
  boards.push_back(MigBoard{
      "a100-80gb",
      "NVIDIA A100-SXM4-80GB",
      "Ampere",
      7,
      8,
      0,
      81920,
      0x20B210DE,
      8,
      {
          Row("1g.10gb", k1Slice, 19, 9728, 14, 1, 0, 0, 0, 0, 1, 7, {0, 1, 2, 3, 4, 5, 6}),
          Row("2g.20gb", k2Slice, 14, 19968, 28, 2, 1, 0, 0, 0, 2, 3, {0, 2, 4}),
          Row("3g.40gb", k3Slice, 9, 40192, 42, 3, 2, 0, 0, 0, 4, 2, {0, 4}),
          Row("4g.40gb", k4Slice, 5, 40192, 56, 4, 2, 0, 0, 0, 4, 1, {0}),
          Row("7g.80gb", k7Slice, 0, 80896, 98, 7, 5, 0, 1, 1, 8, 1, {0}),
          Row("1g.10gb+me", k1SliceRev1, 20, 9728, 14, 1, 1, 0, 1, 1, 1, 1, {0, 1, 2, 3, 4, 5, 6}),
          Row("1g.20gb", k1SliceRev2, 15, 19968, 14, 1, 1, 0, 0, 0, 2, 4, {0, 2, 4, 6}),
      }});

  // §2.4 A30-24GB: 4 memory slices.
  boards.push_back(
      MigBoard{"a30",
               "NVIDIA A30",
               "Ampere",
               7,
               8,
               0,
               24576,
               0x20B710DE,
               4,
               {
                   Row("1g.6gb", k1Slice, 14, 5952, 14, 1, 1, 0, 0, 0, 1, 4, {0, 1, 2, 3}),
                   Row("2g.12gb", k2Slice, 5, 11968, 28, 2, 2, 0, 0, 0, 2, 2, {0, 2}),
                   Row("4g.24gb", k4Slice, 0, 24000, 56, 4, 4, 0, 1, 1, 4, 1, {0}),
                   Row("1g.6gb+me", k1SliceRev1, 21, 5952, 14, 1, 1, 0, 1, 1, 1, 1, {0, 1, 2, 3}),
                   Row("2g.12gb+me", k2SliceRev1, 6, 11968, 28, 2, 2, 0, 1, 1, 2, 1, {0, 2}),
               }});

  return boards;
}

}  // namespace

uint32_t MigPlacement::SliceMask() const {
  if (size == 0 || start >= 32) {
    return 0;
  }
  const uint64_t bits = (uint64_t{1} << std::min<uint32_t>(size, 32 - start)) - 1;
  return static_cast<uint32_t>(bits << start);
}

std::string ToString(const MigPlacement& placement) {
  return absl::StrCat(placement.start, ":", placement.size);
}

bool MigProfile::IsValidStart(uint32_t start) const {
  return std::any_of(placements.begin(), placements.end(),
                     [start](const MigPlacement& p) { return p.start == start; });
}

const MigProfile* MigBoard::FindProfile(absl::string_view name) const {
  for (const MigProfile& p : profiles) {
    if (p.name == name) {
      return &p;
    }
  }
  return nullptr;
}

const MigProfile* MigBoard::FindProfileById(uint32_t gi_profile_id) const {
  for (const MigProfile& p : profiles) {
    if (p.gi_profile_id == gi_profile_id) {
      return &p;
    }
  }
  return nullptr;
}

const std::vector<MigBoard>& KnownMigBoards() {
  static const std::vector<MigBoard>* const kBoards = new std::vector<MigBoard>(BuildBoards());
  return *kBoards;
}

const MigBoard* FindMigBoard(absl::string_view key_or_product_name) {
  for (const MigBoard& board : KnownMigBoards()) {
    if (board.key == key_or_product_name || board.product_name == key_or_product_name) {
      return &board;
    }
  }
  return nullptr;
}

std::optional<uint32_t> GpuSlicesForGiProfileIndex(uint32_t index) {
  // Indexed by NVML_GPU_INSTANCE_PROFILE_* (§1.2).
  static constexpr std::array<uint32_t, kGpuInstanceProfileCount> kSlices = {
      1, 2, 3, 4, 7, 8, 6,  // 1..6 SLICE
      1, 2,                 // REV1 (+me)
      1,                    // 1_SLICE_REV2 (double memory)
      1, 2, 4,              // GFX
      1, 2,                 // NO_ME
      1, 2,                 // ALL_ME
      3,                    // 3_SLICE_GFX
  };
  if (index >= kSlices.size()) {
    return std::nullopt;
  }
  return kSlices[index];
}

absl::string_view SuffixForGiProfileIndex(uint32_t index) {
  switch (index) {
    case 0x7:
    case 0x8:
      return "+me";
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x11:
      return "+gfx";
    case 0x0D:
    case 0x0E:
      return "-me";
    case 0x0F:
    case 0x10:
      return "+me.all";
    default:
      return "";
  }
}

std::optional<uint32_t> SlicesForCiProfileIndex(uint32_t index) {
  static constexpr std::array<uint32_t, kComputeInstanceProfileCount> kSlices = {1, 2, 3, 4, 7,
                                                                                 8, 6, 1, 7};
  if (index >= kSlices.size()) {
    return std::nullopt;
  }
  return kSlices[index];
}

std::optional<uint32_t> DefaultCiProfileIndex(uint32_t gpu_slices) {
  // The first index whose slice count matches; REV1 and NVL come after the plain ones.
  for (uint32_t i = 0; i < kComputeInstanceProfileCount; ++i) {
    if (SlicesForCiProfileIndex(i) == gpu_slices) {
      return i;
    }
  }
  return std::nullopt;
}

std::string MigProfileName(uint32_t gpu_slices, uint32_t ci_slices, uint64_t memory_mib,
                           uint64_t total_memory_bytes, absl::string_view suffix) {
  const double total = static_cast<double>(total_memory_bytes);
  const double fraction =
      std::ceil(static_cast<double>(memory_mib) * 1048576.0 / total * 8.0) / 8.0;
  const double total_gb = std::ceil(total / 1073741824.0);
  // std::round rounds half away from zero, as go-nvlib does.
  const auto gb = static_cast<uint64_t>(std::round(fraction * total_gb));
  if (ci_slices == gpu_slices) {
    return absl::StrCat(gpu_slices, "g.", gb, "gb", suffix);
  }
  return absl::StrCat(ci_slices, "c.", gpu_slices, "g.", gb, "gb", suffix);
}

std::string MigProfileDnsName(absl::string_view profile_name) {
  std::string out;
  out.reserve(profile_name.size());
  for (char c : profile_name) {
    if (c == '.') {
      continue;
    }
    out.push_back(c == '+' ? '-' : absl::ascii_tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

absl::string_view ToString(MigFit fit) {
  switch (fit) {
    case MigFit::kFits:
      return "fits";
    case MigFit::kInvalidPlacement:
      return "invalid_placement";
    case MigFit::kOverlap:
      return "overlap";
    case MigFit::kInstanceLimit:
      return "instance_limit";
  }
  return "unknown";
}

uint32_t OccupiedSliceMask(const std::vector<MigInstancePlacement>& existing) {
  uint32_t mask = 0;
  for (const MigInstancePlacement& e : existing) {
    mask |= e.placement.SliceMask();
  }
  return mask;
}

namespace {

uint32_t InstancesOf(const MigProfile& profile, const std::vector<MigInstancePlacement>& existing) {
  return static_cast<uint32_t>(std::count_if(
      existing.begin(), existing.end(),
      [&](const MigInstancePlacement& e) { return e.gi_profile_id == profile.gi_profile_id; }));
}

uint32_t InstanceHeadroom(const MigProfile& profile,
                          const std::vector<MigInstancePlacement>& existing) {
  const uint32_t used = InstancesOf(profile, existing);
  return used >= profile.instance_count ? 0 : profile.instance_count - used;
}

}  // namespace

MigFit CheckMigFit(const MigProfile& profile, uint32_t start,
                   const std::vector<MigInstancePlacement>& existing) {
  if (!profile.IsValidStart(start)) {
    return MigFit::kInvalidPlacement;
  }
  const MigPlacement wanted{start, profile.memory_slices};
  if ((wanted.SliceMask() & OccupiedSliceMask(existing)) != 0) {
    return MigFit::kOverlap;
  }
  if (InstanceHeadroom(profile, existing) == 0) {
    return MigFit::kInstanceLimit;
  }
  return MigFit::kFits;
}

absl::Status CheckMigPlacement(const MigProfile& profile, uint32_t start,
                               const std::vector<MigInstancePlacement>& existing) {
  const MigPlacement wanted{start, profile.memory_slices};
  switch (CheckMigFit(profile, start, existing)) {
    case MigFit::kFits:
      return absl::OkStatus();
    case MigFit::kInvalidPlacement: {
      std::vector<uint32_t> starts;
      for (const MigPlacement& p : profile.placements) {
        starts.push_back(p.start);
      }
      return absl::InvalidArgumentError(
          absl::StrCat("placement ", ToString(wanted), " is not valid for profile ", profile.name,
                       " (valid: {", absl::StrJoin(starts, ","), "}:", profile.memory_slices, ")"));
    }
    case MigFit::kOverlap:
      return absl::ResourceExhaustedError(absl::StrCat("insufficient resources: profile ",
                                                       profile.name, " at ", ToString(wanted),
                                                       " overlaps memory slices already in use"));
    case MigFit::kInstanceLimit:
      return absl::ResourceExhaustedError(
          absl::StrCat("insufficient resources: profile ", profile.name, " allows at most ",
                       profile.instance_count, " instances per GPU"));
  }
  return absl::InternalError("unreachable");
}

std::vector<MigPlacement> FreePlacements(const MigProfile& profile,
                                         const std::vector<MigInstancePlacement>& existing) {
  const uint32_t occupied = OccupiedSliceMask(existing);
  std::vector<MigPlacement> out;
  for (const MigPlacement& p : profile.placements) {
    if ((p.SliceMask() & occupied) == 0) {
      out.push_back(p);
    }
  }
  return out;
}

uint32_t RemainingCapacity(const MigProfile& profile,
                           const std::vector<MigInstancePlacement>& existing) {
  const auto free = static_cast<uint32_t>(FreePlacements(profile, existing).size());
  return std::min(free, InstanceHeadroom(profile, existing));
}

uint32_t PlaceableCount(const MigProfile& profile,
                        const std::vector<MigInstancePlacement>& existing) {
  std::vector<MigPlacement> free = FreePlacements(profile, existing);
  // Earliest end first: the classic optimal greedy for a maximum set of disjoint intervals.
  std::sort(free.begin(), free.end(), [](const MigPlacement& a, const MigPlacement& b) {
    return a.end() != b.end() ? a.end() < b.end() : a.start < b.start;
  });
  uint32_t taken = 0;
  uint32_t count = 0;
  for (const MigPlacement& p : free) {
    if ((p.SliceMask() & taken) == 0) {
      taken |= p.SliceMask();
      ++count;
    }
  }
  return std::min(count, InstanceHeadroom(profile, existing));
}

std::vector<MigPlaceable> PlaceableCounts(const std::vector<MigProfile>& profiles,
                                          const std::vector<MigInstancePlacement>& existing) {
  std::vector<MigPlaceable> out;
  out.reserve(profiles.size());
  for (const MigProfile& p : profiles) {
    out.push_back(MigPlaceable{p.name, PlaceableCount(p, existing)});
  }
  return out;
}

}  // namespace dralens::model
