// The prepare checkpoint: which claims this node has prepared (or started to), with everything
// needed to answer the kubelet again and to undo the work, surviving crashes and restarts.
//
// File: <kubelet-plugins-dir>/<driver-name>/checkpoint.json. Format version 1:
//
//   {
//     "version": 1,
//     "checksum": "fnv1a64:0123456789abcdef",
//     "nodeBootID": "1b4c...",
//     "claims": {
//       "<claim uid>": {
//         "state": "PrepareStarted" | "PrepareCompleted",
//         "namespace": "ml", "name": "train-0",
//         "cdiSpecFile": "k8s.gpu.dralens.dev-claim_<uid>.json",   // "" when no spec
//         "devices": [{
//           "requests": ["gpu"], "pool": "node-a", "device": "gpu-0",
//           "cdiDeviceIDs": ["k8s.gpu.dralens.dev/claim=<uid>-gpu-0"],
//           "shareID": "...",                       // optional
//           "type": "gpu" | "mig", "uuid": "GPU-...",
//           "dynamicMig": {...},                    // optional, see DynamicMig
//           "sharing": {"strategy": "mps",          // optional, see Sharing
//                       "config": {"strategy": "MPS", "mpsConfig": {...}},
//                       "mpsOwner": "<claim uid>", "consumedMemory": "10Gi"}
//         }]
//       }
//     }
//   }
//
// Checksum: FNV-1a 64 over the canonical serialisation of the file's top-level object with the
// "checksum" member removed: compact JSON (no whitespace), object keys sorted bytewise, strings
// UTF-8 with only '"', '\\' and control characters escaped (\b \f \n \r \t, others as \u00xx),
// integers in decimal. Python reproduces it with
//   json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
// and FNV-1a 64 (offset 0xcbf29ce484222325, prime 0x100000001b3), written as
// "fnv1a64:<16 lower-case hex digits>". It is computed over the members present in the file,
// not over our structs, so a field added by a later version never invalidates an older file.
//
// Load outcomes (all logged with the decision):
//   - no file: empty checkpoint (kFresh);
//   - nodeBootID differs from the running kernel's: the node rebooted, every prepared claim is
//     gone with it; empty checkpoint (kDiscardedReboot), logged at warn with the claim count;
//   - unparsable, checksum mismatch, unknown version or malformed body: the file is renamed to
//     checkpoint.json.corrupt-<unix seconds> (kept for a person to inspect), logged at error,
//     and an empty checkpoint flagged kRebuilt is returned. Never a silent wipe.
//   - I/O errors other than "missing" are returned as errors: nothing is renamed.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "driver/prepare/claim_state.h"
#include "driver/sharing/config.h"
#include "driver/sharing/planner.h"
#include "nlohmann/json.hpp"
#include "src/common/clock.h"
#include "src/common/fnv.h"
#include "src/model/device_type.h"

namespace dralens::driver::prepare {

inline constexpr int kCheckpointVersion = 1;
inline constexpr char kCheckpointFileName[] = "checkpoint.json";
inline constexpr char kDefaultBootIdPath[] = "/proc/sys/kernel/random/boot_id";

// One device of a prepared claim, as answered to the kubelet plus its inventory identity.
struct CheckpointDevice {
  std::vector<std::string> request_names;  // "req/sub" already stripped
  std::string pool;
  std::string device;
  std::vector<std::string> cdi_device_ids;
  std::optional<std::string> share_id;
  model::DeviceType type = model::DeviceType::kGpu;  // "gpu" | "mig"; absent in a file: gpu
  std::string uuid;  // GPU-... or MIG-...; for dynamic MIG, set once the instance exists
  // The DeviceClass of the request (or subrequest) the device was allocated for; what the
  // node prices its idle time by. Absent in files written before it was kept: "".
  std::string device_class = {};

  // A MIG instance this node creates for the claim (dynamic MIG). The intent (parent, profile,
  // placement) is recorded in PrepareStarted, before the instance is created, so that a crash
  // at any point leaves enough to find and destroy it; the instance ids once it exists.
  struct DynamicMig {
    std::string parent_uuid;
    std::string profile;  // GPU-instance profile, e.g. "1g.10gb"
    uint32_t placement_start = 0;
    std::optional<uint32_t> gi_id;
    std::optional<uint32_t> ci_id;
    bool operator==(const DynamicMig&) const = default;
  };
  std::optional<DynamicMig> dynamic_mig = std::nullopt;

  // How the claim uses the device (the SharingPlanner's decision), recorded with
  // PrepareStarted so that later claims of the device are planned against it and unprepare
  // knows what to undo. Files without it count the holder as exclusive.
  struct Sharing {
    sharing::SharingStrategy strategy = sharing::SharingStrategy::kExclusive;
    sharing::SharingConfig config;
    std::string mps_owner_claim_uid;  // MPS: the claim whose daemon serves the device
    std::optional<common::Quantity> consumed_memory;
    bool operator==(const Sharing&) const = default;
  };
  std::optional<Sharing> sharing = std::nullopt;

  bool operator==(const CheckpointDevice&) const = default;
};

struct CheckpointClaim {
  ClaimState state = ClaimState::kPrepareStarted;  // only PrepareStarted / PrepareCompleted
  std::string namespace_name;
  std::string name;
  std::vector<CheckpointDevice> devices;
  std::string cdi_spec_file;  // base name under the CDI root; "" when none was written

  bool operator==(const CheckpointClaim&) const = default;
};

struct Checkpoint {
  std::string node_boot_id;
  std::map<std::string, CheckpointClaim> claims;  // by claim UID

  bool operator==(const Checkpoint&) const = default;
};

using common::Fnv1a64;  // the checksum's hash (src/common/fnv.h)
// "fnv1a64:<hex>" over the canonical serialisation of `file` minus its "checksum" member.
std::string CheckpointChecksum(const nlohmann::json& file);

// Pure codec. Encode writes the version, the checksum and the body; the output is what Save
// writes (pretty-printed JSON is not used: one line keeps the file small).
std::string EncodeCheckpoint(const Checkpoint& checkpoint);
// Parses, checks the version and checksum, and decodes. InvalidArgument (with the reason)
// for anything that is not a valid checkpoint of a known version. Does not look at the boot ID.
absl::StatusOr<Checkpoint> DecodeCheckpoint(absl::string_view text);

// What Load found.
struct LoadedCheckpoint {
  enum class Origin {
    kFresh,            // no file
    kLoaded,           // read and verified
    kDiscardedReboot,  // boot ID differed; contents dropped
    kRebuilt,          // bad file set aside; starting empty
  };
  Checkpoint checkpoint;  // node_boot_id is always the running kernel's
  Origin origin = Origin::kFresh;
  std::string reason;            // why (for kDiscardedReboot and kRebuilt)
  std::string quarantined_path;  // kRebuilt: where the bad file now lies
};
absl::string_view ToString(LoadedCheckpoint::Origin origin);

// Where checkpoints live. Implementations are thread-compatible: the ClaimPreparer serialises
// every call under its checkpoint mutex.
class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;
  // Reads the stored checkpoint, applying the outcomes described at the top of this file.
  virtual absl::StatusOr<LoadedCheckpoint> Load() = 0;
  // Replaces the stored checkpoint with `checkpoint` atomically and durably.
  virtual absl::Status Save(const Checkpoint& checkpoint) = 0;
};
using CheckpointStorePtr = std::unique_ptr<CheckpointStore>;

// "<plugins_dir>/<driver_name>/checkpoint.json".
std::string CheckpointPath(absl::string_view plugins_dir, absl::string_view driver_name);

// Reads /proc/sys/kernel/random/boot_id (or `path`), whitespace trimmed.
absl::StatusOr<std::string> ReadBootId(const std::string& path = kDefaultBootIdPath);

// The file-backed store: WriteFileAtomically (temp file, fsync, rename, directory fsync).
class FileCheckpointStore : public CheckpointStore {
 public:
  // `boot_id` is the running kernel's boot ID; `clock` names quarantined files (not owned).
  // The directory of `path` is created by Save when missing.
  FileCheckpointStore(std::string path, std::string boot_id, common::Clock& clock);

  // CheckpointStore
  absl::StatusOr<LoadedCheckpoint> Load() override;
  absl::Status Save(const Checkpoint& checkpoint) override;

  const std::string& path() const { return path_; }

 private:
  const std::string path_;
  const std::string boot_id_;
  common::Clock& clock_;
};

}  // namespace dralens::driver::prepare
