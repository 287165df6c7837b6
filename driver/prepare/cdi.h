// CDI (Container Device Interface) specs for prepared claims.
//
// One transient spec per claim, `<cdi-root>/k8s.gpu.dralens.dev-claim_<claimUID>.json`, kind
// `k8s.gpu.dralens.dev/claim`, one CDI device per allocated device named
// `<claimUID>-<device>`; the kubelet receives the fully qualified IDs
// `k8s.gpu.dralens.dev/claim=<claimUID>-<device>` and passes them to the runtime.
//
// Contents (reference nvml-and-mig.md §7.1, §7.4):
//   - spec-level edits shared by every device: /dev/nvidiactl, /dev/nvidia-uvm,
//     /dev/nvidia-uvm-tools and NVIDIA_VISIBLE_DEVICES=void (the runtime hook must not inject
//     GPUs on its own);
//   - per full GPU: /dev/nvidia<minor>;
//   - per MIG device: the parent's /dev/nvidia<parentMinor> plus the GI and CI capability nodes
//     /dev/nvidia-caps/nvidia-cap<M> (type "c", 0444). With the nvidia-caps major known, major
//     and minor are written so the runtime creates the nodes in the container; without it only
//     the path is written and the runtime copies the host node.
//
// BuildClaimCdiSpec is pure (same input → same bytes); FileCdiWriter does the file I/O.
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
#include "nlohmann/json.hpp"

namespace dralens::driver::prepare {

inline constexpr char kCdiVendor[] = "k8s.gpu.dralens.dev";
inline constexpr char kCdiClass[] = "claim";
inline constexpr char kCdiKind[] = "k8s.gpu.dralens.dev/claim";
// The oldest CDI version with every feature we use (device annotations need 0.6.0); runtimes
// accept older versions than the one they implement.
inline constexpr char kCdiVersion[] = "0.6.0";

struct CdiDeviceNode {
  std::string path;
  std::string type;  // "c" or "" (let the runtime stat the host node)
  std::optional<int64_t> major;
  std::optional<int64_t> minor;
  std::optional<uint32_t> file_mode;  // st_mode permission bits, e.g. 0444

  bool operator==(const CdiDeviceNode&) const = default;
};

struct CdiMount {
  std::string host_path;
  std::string container_path;
  std::vector<std::string> options;  // e.g. {"rw", "bind"}

  bool operator==(const CdiMount&) const = default;
};

struct CdiContainerEdits {
  std::vector<std::string> env;
  std::vector<CdiDeviceNode> device_nodes;
  std::vector<CdiMount> mounts;

  bool empty() const { return env.empty() && device_nodes.empty() && mounts.empty(); }
  bool operator==(const CdiContainerEdits&) const = default;
};

struct CdiDevice {
  std::string name;  // <claimUID>-<device>
  CdiContainerEdits edits;

  bool operator==(const CdiDevice&) const = default;
};

struct CdiSpec {
  std::string cdi_version = kCdiVersion;
  std::string kind = kCdiKind;
  std::vector<CdiDevice> devices;
  CdiContainerEdits common_edits;

  bool operator==(const CdiSpec&) const = default;
};

// Host facts the spec needs beyond the inventory. Read once at startup (ReadCdiHostInfo); the
// simulated device source leaves them empty.
struct CdiHostInfo {
  // Major of "nvidia-caps" in /proc/devices; unknown when the driver has no MIG support loaded.
  std::optional<uint32_t> nvidia_caps_major;
  // /proc/driver/nvidia-caps/mig-minors: "gpu0/gi1/access" → 12, "gpu0/gi1/ci0/access" → 13.
  std::map<std::string, uint32_t> mig_minors;
};

// Reads the two files above (either may be absent; that is not an error).
CdiHostInfo ReadCdiHostInfo(const std::string& proc_devices = "/proc/devices",
                            const std::string& mig_minors = "/proc/driver/nvidia-caps/mig-minors");
// Parses the "Character devices:" section of /proc/devices for `name`. Pure.
std::optional<uint32_t> ParseCharDeviceMajor(absl::string_view proc_devices,
                                             absl::string_view name);
// Parses mig-minors ("<name> <minor>" per line). Pure; malformed lines are skipped.
std::map<std::string, uint32_t> ParseMigMinors(absl::string_view text);

// What one device of a claim needs in the spec.
struct CdiDeviceInput {
  std::string device;      // the DRA device name, e.g. "gpu-0", "gpu-0-mig-1g10gb-19-0"
  uint32_t gpu_minor = 0;  // the GPU's minor, or the MIG device's parent minor
  struct Mig {
    uint32_t gi_id = 0;
    uint32_t ci_id = 0;
  };
  std::optional<Mig> mig;
};

// The GI and CI capability minors of a MIG device: from `host.mig_minors` when listed,
// otherwise from the fixed layout of the driver's table (nvml-and-mig.md §7.3).
std::pair<uint32_t, uint32_t> MigCapMinors(const CdiHostInfo& host, uint32_t gpu_minor,
                                           uint32_t gi_id, uint32_t ci_id);

// Names that end up in file names and CDI names must be safe: 1 to 253 characters of
// [A-Za-z0-9._-], starting with a letter or digit, never containing "..". InvalidArgument
// naming the offending value otherwise (this is what stops path traversal).
absl::Status ValidateClaimUid(absl::string_view claim_uid);
absl::Status ValidateCdiDeviceName(absl::string_view device);

// "<claimUID>-<device>".
std::string CdiDeviceName(absl::string_view claim_uid, absl::string_view device);
// "k8s.gpu.dralens.dev/claim=<claimUID>-<device>".
std::string CdiDeviceId(absl::string_view claim_uid, absl::string_view device);
// "k8s.gpu.dralens.dev-claim_<claimUID>.json".
std::string CdiSpecFileName(absl::string_view claim_uid);

// The claim UIDs that have a spec file of ours (CdiSpecFileName) under `cdi_root`, sorted;
// none when the folder is missing or unreadable. Temporary files of an atomic write do not count.
std::vector<std::string> ClaimUidsWithSpecs(const std::string& cdi_root);

// Pure: the spec for one claim. Devices keep the input order; a device listed twice appears
// once. InvalidArgument for an unsafe claim UID or device name, or no devices.
absl::StatusOr<CdiSpec> BuildClaimCdiSpec(absl::string_view claim_uid,
                                          const std::vector<CdiDeviceInput>& devices,
                                          const CdiHostInfo& host);

// The spec as CDI JSON (fields omitted when empty, fileMode as a number).
nlohmann::json CdiSpecToJson(const CdiSpec& spec);

// Writes and removes per-claim spec files. Thread-safe for different claims; the preparer
// never calls it concurrently for one claim.
class CdiWriter {
 public:
  virtual ~CdiWriter() = default;
  // Writes the claim's spec atomically (replacing any older one). Returns the file's base name.
  virtual absl::StatusOr<std::string> Write(absl::string_view claim_uid, const CdiSpec& spec) = 0;
  // Removes the claim's spec durably. A missing file is success (idempotent).
  virtual absl::Status Remove(absl::string_view claim_uid) = 0;
};
using CdiWriterPtr = std::unique_ptr<CdiWriter>;

// Files under `cdi_root` (created on first write when missing), mode 0644 so that the runtime
// can read them.
class FileCdiWriter : public CdiWriter {
 public:
  explicit FileCdiWriter(std::string cdi_root);

  // CdiWriter
  absl::StatusOr<std::string> Write(absl::string_view claim_uid, const CdiSpec& spec) override;
  absl::Status Remove(absl::string_view claim_uid) override;

  // The full path of a claim's spec (the claim UID must be valid).
  std::string PathFor(absl::string_view claim_uid) const;

 private:
  const std::string root_;
};

}  // namespace dralens::driver::prepare
