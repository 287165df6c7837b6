// MIG profiles, per-board profile tables and the pure placement logic.
//
// Terms (see reference/nvml-and-mig.md §1):
//   - a memory slice is 1/8 of a board's memory (1/4 on A30); placements are {start, size} in
//     memory slices, and two GPU instances may never overlap in memory slices;
//   - a GPU-instance (GI) profile has an *index* (the NVML_GPU_INSTANCE_PROFILE_* constant passed
//     to nvmlDeviceGetGpuInstanceProfileInfo) and an *ID* (info.id, what placements, creation
//     and `nvidia-smi mig -lgip` use); they differ on every board.
//
// Everything here is a plain value or a pure function: thread-compatible, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dralens::model {

// A GPU-instance placement in memory slices: slices [start, start + size).
struct MigPlacement {
  uint32_t start = 0;
  uint32_t size = 0;

  uint32_t end() const { return start + size; }
  bool Overlaps(const MigPlacement& other) const {
    return start < other.end() && other.start < end();
  }
  // Bit i set for every memory slice i the placement covers.
  uint32_t SliceMask() const;
  bool operator==(const MigPlacement&) const = default;
};

// "{start}:size", as `nvidia-smi mig -lgipp` prints one placement, e.g. "4:2".
std::string ToString(const MigPlacement& placement);

// A GPU-instance profile with its default compute-instance profile (the CI that spans the
// whole GI, the one the DRA driver creates). Capacities are those of the GI.
struct MigProfile {
  std::string name;               // "1g.10gb", "1g.10gb+me", ...
  uint32_t gi_profile_index = 0;  // NVML_GPU_INSTANCE_PROFILE_* index
  uint32_t gi_profile_id = 0;     // info.id
  uint32_t ci_profile_index = 0;  // default CI profile (NVML_COMPUTE_INSTANCE_PROFILE_*)
  uint32_t ci_profile_id = 0;
  uint32_t gpu_slices = 0;      // SM ("compute") slices: the G in "<G>g"
  uint32_t memory_slices = 0;   // placement size
  uint32_t instance_count = 0;  // max instances of this profile per GPU
  uint64_t memory_mib = 0;      // memorySizeMB
  uint32_t multiprocessors = 0;
  uint32_t copy_engines = 0;
  uint32_t decoders = 0;
  uint32_t encoders = 0;
  uint32_t jpegs = 0;
  uint32_t ofas = 0;
  std::vector<MigPlacement> placements;  // every valid placement, static per board

  uint64_t memory_bytes() const { return memory_mib << 20; }
  bool IsValidStart(uint32_t start) const;
  bool operator==(const MigProfile&) const = default;
};

// The MIG table of one board model.
struct MigBoard {
  std::string key;                 // short name used in simulated profiles: "h100-80gb"
  std::string product_name;        // NVML name: "NVIDIA H100 80GB HBM3"
  std::string architecture;        // "Hopper"
  uint32_t architecture_enum = 0;  // nvmlDeviceArchitecture_t value
  int cuda_compute_major = 0;
  int cuda_compute_minor = 0;
  uint64_t memory_mib = 0;  // nvmlMemory_t.total in MiB
  uint32_t pci_device_id = 0;
  uint32_t memory_slices = 0;
  std::vector<MigProfile> profiles;  // ordered by GI profile index

  uint64_t memory_bytes() const { return memory_mib << 20; }
  const MigProfile* FindProfile(absl::string_view name) const;
  const MigProfile* FindProfileById(uint32_t gi_profile_id) const;
};

// Board tables from the reference (§2): H100-SXM5-80GB, H200, A100-SXM4-40GB (R525+ drivers),
// A100-SXM4-80GB and A30. Static storage; never null.
const std::vector<MigBoard>& KnownMigBoards();
// Lookup by key ("h100-80gb") or by NVML product name ("NVIDIA H100 80GB HBM3"); nullptr if
// unknown.
const MigBoard* FindMigBoard(absl::string_view key_or_product_name);

// NVML GI profile indices (NVML_GPU_INSTANCE_PROFILE_*), and their count in the 13.x header.
inline constexpr uint32_t kGpuInstanceProfileCount = 0x12;
inline constexpr uint32_t kComputeInstanceProfileCount = 0x9;

// Slice count implied by a GI profile index (1, 2, 3, 4, 6, 7, 8); nullopt for an unknown index.
std::optional<uint32_t> GpuSlicesForGiProfileIndex(uint32_t index);
// Name suffix of a GI profile index: "+me", "+me.all", "+gfx", "-me" or "".
absl::string_view SuffixForGiProfileIndex(uint32_t index);
// Slice count implied by a CI profile index; nullopt for an unknown index.
std::optional<uint32_t> SlicesForCiProfileIndex(uint32_t index);
// The default CI profile index for a GI with `gpu_slices` slices (the CI spanning the GI).
std::optional<uint32_t> DefaultCiProfileIndex(uint32_t gpu_slices);

// Profile name per go-nvlib (reference §1.4):
//   frac = ceil(memory_mib * 2^20 / total_memory_bytes * 8) / 8
//   GB   = round(frac * ceil(total_memory_bytes / 2^30))
//   name = C == G ? "<G>g.<GB>gb<suffix>" : "<C>c.<G>g.<GB>gb<suffix>"
// Precondition: total_memory_bytes > 0.
std::string MigProfileName(uint32_t gpu_slices, uint32_t ci_slices, uint64_t memory_mib,
                           uint64_t total_memory_bytes, absl::string_view suffix = "");

// The device-name form of a profile: dots removed, "+" turned into "-", lower case
// ("1g.10gb+me" -> "1g10gb-me").
std::string MigProfileDnsName(absl::string_view profile_name);

// One existing GPU instance on a GPU, for placement decisions.
struct MigInstancePlacement {
  uint32_t gi_profile_id = 0;
  MigPlacement placement;
  bool operator==(const MigInstancePlacement&) const = default;
};

// Outcome of asking whether a new GI fits.
enum class MigFit {
  kFits,
  kInvalidPlacement,  // start not among the profile's placements (NVML: INVALID_ARGUMENT)
  kOverlap,           // memory slices already used (NVML: INSUFFICIENT_RESOURCES)
  kInstanceLimit,     // the profile's instance_count reached (NVML: INSUFFICIENT_RESOURCES)
};
absl::string_view ToString(MigFit fit);

// Bit i set for every memory slice used by `existing`.
uint32_t OccupiedSliceMask(const std::vector<MigInstancePlacement>& existing);

// Whether `profile` at placement start `start` fits next to `existing`.
MigFit CheckMigFit(const MigProfile& profile, uint32_t start,
                   const std::vector<MigInstancePlacement>& existing);
// CheckMigFit as a status: OK, InvalidArgument (bad start) or ResourceExhausted
// ("insufficient resources", overlap or instance limit), with a message naming the profile.
absl::Status CheckMigPlacement(const MigProfile& profile, uint32_t start,
                               const std::vector<MigInstancePlacement>& existing);

// The profile's listed placements whose slices are all free right now (NVML's static list
// filtered by occupancy). They may overlap each other.
std::vector<MigPlacement> FreePlacements(const MigProfile& profile,
                                         const std::vector<MigInstancePlacement>& existing);

// NVML's nvmlDeviceGetGpuInstanceRemainingCapacity semantics (reference §8): the number of
// listed placements still free, capped by instance_count minus existing instances.
uint32_t RemainingCapacity(const MigProfile& profile,
                           const std::vector<MigInstancePlacement>& existing);

// The maximum number of *additional* instances of `profile` that can be created together
// next to `existing`: a maximum set of pairwise non-overlapping free placements (earliest-end
// greedy, optimal for intervals), capped by instance_count minus existing instances.
uint32_t PlaceableCount(const MigProfile& profile,
                        const std::vector<MigInstancePlacement>& existing);

// PlaceableCount for every profile, in `profiles` order.
struct MigPlaceable {
  std::string profile;
  uint32_t count = 0;
  bool operator==(const MigPlaceable&) const = default;
};
std::vector<MigPlaceable> PlaceableCounts(const std::vector<MigProfile>& profiles,
                                          const std::vector<MigInstancePlacement>& existing);

}  // namespace dralens::model
