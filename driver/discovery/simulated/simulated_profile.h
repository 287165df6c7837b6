// Simulated machine profiles: built-in ones and strict JSON files.
//
// JSON schema (every key optional unless marked; an unknown key is an error naming it, with
// its path, e.g. `gpus[1].migDevice: unknown field`):
//
//   {
//     "name": "lab-node",               required; non-empty; seeds the deterministic UUIDs
//     "driverVersion": "550.163.01",    default "550.163.01"
//     "cudaDriverVersion": "12.4",      default "12.4" ("<major>.<minor>")
//     "brand": "Nvidia",                default "Nvidia"
//     "nvlink": "nvswitch",             default "none": no GPU has NVLink; "nvswitch": all GPUs
//                                       of the node on one NVSwitch fabric (an HGX board);
//                                       "pairs": GPUs 0+1, 2+3, ... joined by NVLink bridges
//                                       (an odd last GPU has none)
//     "nvlinkFabric": {                 default none; needs "nvlink": "nvswitch": the GPUs are
//       "clusterUuid": "3f2a0001-abcd-4000-8000-123456789abc",   registered with a multi-node
//       "cliqueId": 7                   NVLink fabric (e.g. GB200 NVL72); every node that
//     },                                loads the profile is in that one NVLink domain
//     "gpus": [                         required; non-empty; GPUs get minors/indices in order
//       {
//         "board": "h100-80gb",         required; a key of model::KnownMigBoards():
//                                       h100-80gb, h200, a100-40gb, a100-80gb, a30
//         "count": 2,                   default 1 (1..64): this entry repeated
//         "migEnabled": true,           default false
//         "migDevices": [               default []; needs migEnabled; created on each copy
//           {"profile": "3g.40gb", "start": 0}   both required; checked against the board's
//         ],                                     placements (valid start, no overlap, limits)
//         "numaNode": 0,                default: first half of the GPUs 0, second half 1
//         "pciBusId": "0000:1b:00.0",   default generated; only with count 1
//         "pcieRoot": "pci0000:10"      default generated
//       }
//     ]
//   }
//
// tests/fixtures/profiles/example.json is a complete example.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dralens::driver::discovery {

struct SimulatedMigDeviceSpec {
  std::string profile;  // profile name on the GPU's board, e.g. "3g.40gb"
  uint32_t start = 0;   // placement start in memory slices
};

// One GPU (after "count" expansion).
struct SimulatedGpuSpec {
  std::string board;  // model::MigBoard key
  bool mig_enabled = false;
  std::vector<SimulatedMigDeviceSpec> mig_devices;
  std::optional<int> numa_node;  // nullopt: generated
  std::string pci_bus_id;        // empty: generated
  std::string pcie_root;         // empty: generated
};

// How a simulated node's GPUs are joined by NVLink (the nvlinkDomain attribute).
enum class SimulatedNvLink { kNone, kNvSwitch, kPairs };

// A multi-node NVLink fabric the node's GPUs are registered with.
struct SimulatedFabric {
  std::array<unsigned char, 16> cluster_uuid = {};
  uint32_t clique_id = 0;
};

struct SimulatedProfile {
  std::string name;
  std::string driver_version = "550.163.01";
  std::string cuda_driver_version = "12.4";
  std::string brand = "Nvidia";
  std::vector<SimulatedGpuSpec> gpus;
  SimulatedNvLink nvlink = SimulatedNvLink::kNone;
  std::optional<SimulatedFabric> fabric = {};  // only with kNvSwitch
};

// "dgx-h100" (8 x H100 80GB HBM3, MIG off, all on NVSwitch), "h100x2" (2 x H100 80GB HBM3,
// MIG off, joined by an NVLink bridge), "a100-40gb" (8 x A100-SXM4-40GB, MIG off, no NVLink: a
// PCIe-only server) and "mixed" (8 x H100 on NVSwitch: GPUs 0, 1 and 3 in MIG mode with MIG
// devices, GPU 2 in MIG mode without, GPUs 4-7 full). Their GPUs are split between NUMA nodes
// 0 and 1, first half and second half.
std::vector<std::string> BuiltinSimulatedProfileNames();
// NotFound (listing the built-in names) for an unknown name.
absl::StatusOr<SimulatedProfile> BuiltinSimulatedProfile(absl::string_view name);

// Strict decoding of the schema above. Structural checks only (types, unknown fields, ranges,
// known boards); MIG layouts are checked by ValidateSimulatedProfile.
absl::StatusOr<SimulatedProfile> ParseSimulatedProfileJson(absl::string_view json_text);

// A built-in name, or else a path to a JSON file.
absl::StatusOr<SimulatedProfile> LoadSimulatedProfile(absl::string_view name_or_path);

// Semantic checks: known boards, MIG devices only with migEnabled, profiles offered by the
// board, valid and non-overlapping placements within the profile limits, a fabric only on
// NVSwitch.
absl::Status ValidateSimulatedProfile(const SimulatedProfile& profile);

}  // namespace dralens::driver::discovery
