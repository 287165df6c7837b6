#include "driver/prepare/cdi.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/common/atomic_file.h"
#include "src/common/status.h"

namespace dralens::driver::prepare {
namespace {

using nlohmann::json;

constexpr size_t kMaxNameLength = 253;
constexpr uint32_t kCapFileMode = 0444;  // DeviceFileMode 292 of the gi/ci access files
constexpr absl::string_view kCharDeviceType = "c";

absl::Status ValidateSafeName(absl::string_view what, absl::string_view value) {
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid ", what, " \"", absl::CEscape(value), "\": ", why));
  };
  if (value.empty()) {
    return invalid("empty");
  }
  if (value.size() > kMaxNameLength) {
    return invalid(absl::StrCat("longer than ", kMaxNameLength, " characters"));
  }
  if (!absl::ascii_isalnum(static_cast<unsigned char>(value[0]))) {
    return invalid("must start with a letter or digit");
  }
  for (char c : value) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_') {
      return invalid("only letters, digits, '-', '.' and '_' are allowed (no path separators)");
    }
  }
  if (absl::StrContains(value, "..")) {
    return invalid("must not contain \"..\"");
  }
  return absl::OkStatus();
}

json NodeToJson(const CdiDeviceNode& node) {
  json out = json::object();
  out["path"] = node.path;
  if (!node.type.empty()) {
    out["type"] = node.type;
  }
  if (node.major.has_value()) {
    out["major"] = *node.major;
  }
  if (node.minor.has_value()) {
    out["minor"] = *node.minor;
  }
  if (node.file_mode.has_value()) {
    out["fileMode"] = *node.file_mode;
  }
  return out;
}

json EditsToJson(const CdiContainerEdits& edits) {
  json out = json::object();
  if (!edits.env.empty()) {
    out["env"] = edits.env;
  }
  if (!edits.device_nodes.empty()) {
    json nodes = json::array();
    for (const CdiDeviceNode& n : edits.device_nodes) {
      nodes.push_back(NodeToJson(n));
    }
    out["deviceNodes"] = std::move(nodes);
  }
  if (!edits.mounts.empty()) {
    json mounts = json::array();
    for (const CdiMount& m : edits.mounts) {
      json mount = {{"hostPath", m.host_path}, {"containerPath", m.container_path}};
      if (!m.options.empty()) {
        mount["options"] = m.options;
      }
      mounts.push_back(std::move(mount));
    }
    out["mounts"] = std::move(mounts);
  }
  return out;
}

// A node given by path only: the runtime takes type, major and minor from the host's node.
CdiDeviceNode PathNode(std::string path) {
  CdiDeviceNode node;
  node.path = std::move(path);
  return node;
}

CdiDeviceNode CapNode(const CdiHostInfo& host, uint32_t minor) {
  CdiDeviceNode node = PathNode(absl::StrCat("/dev/nvidia-caps/nvidia-cap", minor));
  if (host.nvidia_caps_major.has_value()) {
    node.type = std::string(kCharDeviceType);
    node.major = *host.nvidia_caps_major;
    node.minor = minor;
    node.file_mode = kCapFileMode;
  }
  return node;
}

}  // namespace

std::optional<uint32_t> ParseCharDeviceMajor(absl::string_view proc_devices,
                                             absl::string_view name) {
  bool in_char = false;
  for (absl::string_view line : absl::StrSplit(proc_devices, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line == "Character devices:") {
      in_char = true;
      continue;
    }
    if (line == "Block devices:") {
      in_char = false;
      continue;
    }
    if (!in_char) {
      continue;
    }
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint32_t major = 0;
    if (parts.size() == 2 && parts[1] == name && absl::SimpleAtoi(parts[0], &major)) {
      return major;
    }
  }
  return std::nullopt;
}

std::map<std::string, uint32_t> ParseMigMinors(absl::string_view text) {
  std::map<std::string, uint32_t> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint32_t minor = 0;
    if (parts.size() == 2 && absl::SimpleAtoi(parts[1], &minor)) {
      out.emplace(std::string(parts[0]), minor);
    }
  }
  return out;
}

CdiHostInfo ReadCdiHostInfo(const std::string& proc_devices, const std::string& mig_minors) {
  CdiHostInfo host;
  if (absl::StatusOr<std::string> text = common::ReadFile(proc_devices); text.ok()) {
    host.nvidia_caps_major = ParseCharDeviceMajor(*text, "nvidia-caps");
  }
  if (absl::StatusOr<std::string> text = common::ReadFile(mig_minors); text.ok()) {
    host.mig_minors = ParseMigMinors(*text);
  }
  return host;
}

std::pair<uint32_t, uint32_t> MigCapMinors(const CdiHostInfo& host, uint32_t gpu_minor,
                                           uint32_t gi_id, uint32_t ci_id) {
  std::string gi_key = absl::StrCat("gpu", gpu_minor, "/gi", gi_id, "/access");
  std::string ci_key = absl::StrCat("gpu", gpu_minor, "/gi", gi_id, "/ci", ci_id, "/access");
  auto gi = host.mig_minors.find(gi_key);
  auto ci = host.mig_minors.find(ci_key);
  // The driver's table: 135 minors per GPU, 9 per GI (its access file and 8 CIs), from 3.
  uint32_t gi_minor = gi != host.mig_minors.end() ? gi->second : 3 + 135 * gpu_minor + 9 * gi_id;
  uint32_t ci_minor =
      ci != host.mig_minors.end() ? ci->second : 3 + 135 * gpu_minor + 9 * gi_id + 1 + ci_id;
  return {gi_minor, ci_minor};
}

absl::Status ValidateClaimUid(absl::string_view claim_uid) {
  return ValidateSafeName("claim UID", claim_uid);
}

absl::Status ValidateCdiDeviceName(absl::string_view device) {
  return ValidateSafeName("device name", device);
}

std::string CdiDeviceName(absl::string_view claim_uid, absl::string_view device) {
  return absl::StrCat(claim_uid, "-", device);
}

std::string CdiDeviceId(absl::string_view claim_uid, absl::string_view device) {
  return absl::StrCat(kCdiKind, "=", CdiDeviceName(claim_uid, device));
}

std::string CdiSpecFileName(absl::string_view claim_uid) {
  return absl::StrCat(kCdiVendor, "-", kCdiClass, "_", claim_uid, ".json");
}

std::vector<std::string> ClaimUidsWithSpecs(const std::string& cdi_root) {
  const std::string prefix = absl::StrCat(kCdiVendor, "-", kCdiClass, "_");
  std::vector<std::string> uids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(cdi_root, ec)) {
    const std::string name = entry.path().filename().string();
    absl::string_view uid = name;
    if (absl::ConsumePrefix(&uid, prefix) && absl::ConsumeSuffix(&uid, ".json") &&
        ValidateClaimUid(uid).ok()) {
      uids.emplace_back(uid);
    }
  }
  std::sort(uids.begin(), uids.end());
  return uids;
}

absl::StatusOr<CdiSpec> BuildClaimCdiSpec(absl::string_view claim_uid,
                                          const std::vector<CdiDeviceInput>& devices,
                                          const CdiHostInfo& host) {
  RETURN_IF_ERROR(ValidateClaimUid(claim_uid));
  if (devices.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("claim ", claim_uid, ": a CDI spec needs at least one device"));
  }
  CdiSpec spec;
  spec.common_edits.env = {"NVIDIA_VISIBLE_DEVICES=void"};
  spec.common_edits.device_nodes = {PathNode("/dev/nvidiactl"), PathNode("/dev/nvidia-uvm"),
                                    PathNode("/dev/nvidia-uvm-tools")};
  std::set<std::string> seen;
  for (const CdiDeviceInput& in : devices) {
    RETURN_IF_ERROR(ValidateCdiDeviceName(in.device));
    if (!seen.insert(in.device).second) {
      continue;
    }
    CdiDevice device;
    device.name = CdiDeviceName(claim_uid, in.device);
    device.edits.device_nodes.push_back(PathNode(absl::StrCat("/dev/nvidia", in.gpu_minor)));
    if (in.mig.has_value()) {
      auto [gi_minor, ci_minor] = MigCapMinors(host, in.gpu_minor, in.mig->gi_id, in.mig->ci_id);
      device.edits.device_nodes.push_back(CapNode(host, gi_minor));
      device.edits.device_nodes.push_back(CapNode(host, ci_minor));
    }
    spec.devices.push_back(std::move(device));
  }
  return spec;
}

json CdiSpecToJson(const CdiSpec& spec) {
  json out = json::object();
  out["cdiVersion"] = spec.cdi_version;
  out["kind"] = spec.kind;
  json devices = json::array();
  for (const CdiDevice& d : spec.devices) {
    devices.push_back(json{{"name", d.name}, {"containerEdits", EditsToJson(d.edits)}});
  }
  out["devices"] = std::move(devices);
  if (!spec.common_edits.empty()) {
    out["containerEdits"] = EditsToJson(spec.common_edits);
  }
  return out;
}

FileCdiWriter::FileCdiWriter(std::string cdi_root) : root_(std::move(cdi_root)) {}

std::string FileCdiWriter::PathFor(absl::string_view claim_uid) const {
  return absl::StrCat(root_, "/", CdiSpecFileName(claim_uid));
}

absl::StatusOr<std::string> FileCdiWriter::Write(absl::string_view claim_uid, const CdiSpec& spec) {
  RETURN_IF_ERROR_CTX(ValidateClaimUid(claim_uid), "write CDI spec");
  std::error_code ec;
  std::filesystem::create_directories(root_, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("write CDI spec: create directory ", root_, ": ", ec.message()));
  }
  std::string text = CdiSpecToJson(spec).dump(2, ' ', false, json::error_handler_t::replace);
  text += "\n";
  RETURN_IF_ERROR_CTX(common::WriteFileAtomically(PathFor(claim_uid), text, 0644),
                      "write CDI spec");
  return CdiSpecFileName(claim_uid);
}

absl::Status FileCdiWriter::Remove(absl::string_view claim_uid) {
  RETURN_IF_ERROR_CTX(ValidateClaimUid(claim_uid), "remove CDI spec");
  return common::Annotate(common::RemoveFileDurably(PathFor(claim_uid)), "remove CDI spec");
}

}  // namespace dralens::driver::prepare
