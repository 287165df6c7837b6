#include "driver/prepare/checkpoint.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "src/common/atomic_file.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/model/json.h"

namespace dralens::driver::prepare {
namespace {

using nlohmann::json;

constexpr char kComponent[] = "checkpoint";
constexpr char kChecksumPrefix[] = "fnv1a64:";

// Canonical form: compact, keys sorted (nlohmann's std::map objects), no ASCII escaping.
std::string Canonical(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

json EncodeDevice(const CheckpointDevice& d) {
  json out = json::object();
  out["requests"] = d.request_names;
  out["pool"] = d.pool;
  out["device"] = d.device;
  out["cdiDeviceIDs"] = d.cdi_device_ids;
  if (d.share_id.has_value()) {
    out["shareID"] = *d.share_id;
  }
  out["type"] = std::string(model::ToString(d.type));
  out["uuid"] = d.uuid;
  if (!d.device_class.empty()) {
    out["deviceClass"] = d.device_class;
  }
  if (d.dynamic_mig.has_value()) {
    json mig = {{"parentUUID", d.dynamic_mig->parent_uuid},
                {"profile", d.dynamic_mig->profile},
                {"placementStart", d.dynamic_mig->placement_start}};
    if (d.dynamic_mig->gi_id.has_value()) {
      mig["giID"] = *d.dynamic_mig->gi_id;
    }
    if (d.dynamic_mig->ci_id.has_value()) {
      mig["ciID"] = *d.dynamic_mig->ci_id;
    }
    out["dynamicMig"] = std::move(mig);
  }
  if (d.sharing.has_value()) {
    json sharing = {{"strategy", std::string(sharing::ToString(d.sharing->strategy))},
                    {"config", sharing::EncodeSharing(d.sharing->config)}};
    if (!d.sharing->mps_owner_claim_uid.empty()) {
      sharing["mpsOwner"] = d.sharing->mps_owner_claim_uid;
    }
    if (d.sharing->consumed_memory.has_value()) {
      sharing["consumedMemory"] = d.sharing->consumed_memory->String();
    }
    out["sharing"] = std::move(sharing);
  }
  return out;
}

json EncodeBody(const Checkpoint& checkpoint) {
  json claims = json::object();
  for (const auto& [uid, c] : checkpoint.claims) {
    json entry = json::object();
    entry["state"] = std::string(ToString(c.state));
    entry["namespace"] = c.namespace_name;
    entry["name"] = c.name;
    entry["cdiSpecFile"] = c.cdi_spec_file;
    json devices = json::array();
    for (const CheckpointDevice& d : c.devices) {
      devices.push_back(EncodeDevice(d));
    }
    entry["devices"] = std::move(devices);
    claims[uid] = std::move(entry);
  }
  json file = json::object();
  file["version"] = kCheckpointVersion;
  file["nodeBootID"] = checkpoint.node_boot_id;
  file["claims"] = std::move(claims);
  return file;
}

// Small strict readers: a wrong type is an error naming the path.
absl::StatusOr<std::string> Str(const json& obj, const std::string& path, const char* key,
                                bool required = true) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".", key, ": missing"));
    }
    return std::string();
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".", key, ": expected string"));
  }
  return it->get<std::string>();
}

absl::StatusOr<std::vector<std::string>> StrList(const json& obj, const std::string& path,
                                                 const char* key) {
  std::vector<std::string> out;
  auto it = obj.find(key);
  if (it == obj.end()) {
    return out;
  }
  if (!it->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".", key, ": expected array"));
  }
  for (const json& v : *it) {
    if (!v.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".", key, ": expected strings"));
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

absl::StatusOr<uint32_t> Uint32(const json& obj, const std::string& path, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".", key, ": missing"));
  }
  if (!it->is_number_unsigned() || it->get<uint64_t>() > 0xFFFFFFFFu) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".", key, ": expected a uint32"));
  }
  return static_cast<uint32_t>(it->get<uint64_t>());
}

absl::StatusOr<CheckpointDevice> DecodeDevice(const json& d, const std::string& path) {
  if (!d.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected object"));
  }
  CheckpointDevice out;
  ASSIGN_OR_RETURN(out.request_names, StrList(d, path, "requests"));
  ASSIGN_OR_RETURN(out.pool, Str(d, path, "pool"));
  ASSIGN_OR_RETURN(out.device, Str(d, path, "device"));
  ASSIGN_OR_RETURN(out.cdi_device_ids, StrList(d, path, "cdiDeviceIDs"));
  if (d.contains("shareID")) {
    ASSIGN_OR_RETURN(out.share_id, Str(d, path, "shareID"));
  }
  ASSIGN_OR_RETURN(std::string type, Str(d, path, "type", /*required=*/false));
  if (!type.empty()) {
    absl::StatusOr<model::DeviceType> parsed = model::ParseDeviceType(type);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".type: ", parsed.status().message()));
    }
    out.type = *parsed;
  }
  ASSIGN_OR_RETURN(out.uuid, Str(d, path, "uuid", /*required=*/false));
  ASSIGN_OR_RETURN(out.device_class, Str(d, path, "deviceClass", /*required=*/false));
  if (auto it = d.find("dynamicMig"); it != d.end()) {
    const std::string mig_path = path + ".dynamicMig";
    if (!it->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(mig_path, ": expected object"));
    }
    CheckpointDevice::DynamicMig mig;
    ASSIGN_OR_RETURN(mig.parent_uuid, Str(*it, mig_path, "parentUUID"));
    ASSIGN_OR_RETURN(mig.profile, Str(*it, mig_path, "profile"));
    ASSIGN_OR_RETURN(mig.placement_start, Uint32(*it, mig_path, "placementStart"));
    if (it->contains("giID")) {
      ASSIGN_OR_RETURN(mig.gi_id, Uint32(*it, mig_path, "giID"));
    }
    if (it->contains("ciID")) {
      ASSIGN_OR_RETURN(mig.ci_id, Uint32(*it, mig_path, "ciID"));
    }
    out.dynamic_mig = std::move(mig);
  }
  if (auto it = d.find("sharing"); it != d.end()) {
    const std::string sharing_path = path + ".sharing";
    if (!it->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(sharing_path, ": expected object"));
    }
    CheckpointDevice::Sharing sharing;
    ASSIGN_OR_RETURN(std::string strategy, Str(*it, sharing_path, "strategy"));
    std::optional<sharing::SharingStrategy> parsed = sharing::ParseSharingStrategy(strategy);
    if (!parsed.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(sharing_path, ".strategy: unknown strategy \"", strategy, "\""));
    }
    sharing.strategy = *parsed;
    if (auto config = it->find("config"); config != it->end()) {
      absl::StatusOr<sharing::SharingConfig> decoded =
          sharing::DecodeSharingBlock(*config, sharing::ConfigKind::kGpuConfig);
      if (!decoded.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(sharing_path, ".config: ", decoded.status().message()));
      }
      sharing.config = *std::move(decoded);
    }
    ASSIGN_OR_RETURN(sharing.mps_owner_claim_uid,
                     Str(*it, sharing_path, "mpsOwner", /*required=*/false));
    if (it->contains("consumedMemory")) {
      ASSIGN_OR_RETURN(std::string memory, Str(*it, sharing_path, "consumedMemory"));
      absl::StatusOr<common::Quantity> q = common::Quantity::Parse(memory);
      if (!q.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(sharing_path, ".consumedMemory: ", q.status().message()));
      }
      sharing.consumed_memory = *q;
    }
    out.sharing = std::move(sharing);
  }
  return out;
}

absl::StatusOr<CheckpointClaim> DecodeClaim(const json& c, const std::string& path) {
  if (!c.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected object"));
  }
  CheckpointClaim out;
  ASSIGN_OR_RETURN(std::string state, Str(c, path, "state"));
  std::optional<ClaimState> parsed = ParseClaimState(state);
  if (!parsed.has_value() ||
      (*parsed != ClaimState::kPrepareStarted && *parsed != ClaimState::kPrepareCompleted)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".state: unknown state \"", state, "\""));
  }
  out.state = *parsed;
  ASSIGN_OR_RETURN(out.namespace_name, Str(c, path, "namespace"));
  ASSIGN_OR_RETURN(out.name, Str(c, path, "name"));
  ASSIGN_OR_RETURN(out.cdi_spec_file, Str(c, path, "cdiSpecFile", /*required=*/false));
  auto devices = c.find("devices");
  if (devices != c.end()) {
    if (!devices->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".devices: expected array"));
    }
    for (size_t i = 0; i < devices->size(); ++i) {
      ASSIGN_OR_RETURN(CheckpointDevice d,
                       DecodeDevice((*devices)[i], absl::StrCat(path, ".devices[", i, "]")));
      out.devices.push_back(std::move(d));
    }
  }
  return out;
}

}  // namespace

std::string CheckpointChecksum(const json& file) {
  json body = file;
  if (body.is_object()) {
    body.erase("checksum");
  }
  return absl::StrFormat("%s%016x", kChecksumPrefix, Fnv1a64(Canonical(body)));
}

std::string EncodeCheckpoint(const Checkpoint& checkpoint) {
  json file = EncodeBody(checkpoint);
  file["checksum"] = CheckpointChecksum(file);
  return Canonical(file) + "\n";
}

absl::StatusOr<Checkpoint> DecodeCheckpoint(absl::string_view text) {
  absl::StatusOr<json> parsed = model::ParseJson(text);
  if (!parsed.ok()) {
    return common::Annotate(parsed.status(), "parse");
  }
  const json& file = *parsed;
  if (!file.is_object()) {
    return absl::InvalidArgumentError("top level: expected object");
  }
  auto version = file.find("version");
  if (version == file.end() || !version->is_number_integer()) {
    return absl::InvalidArgumentError("version: missing or not an integer");
  }
  if (version->get<int64_t>() != kCheckpointVersion) {
    return absl::InvalidArgumentError(absl::StrCat("unknown version ", version->get<int64_t>(),
                                                   " (this build reads ", kCheckpointVersion, ")"));
  }
  ASSIGN_OR_RETURN(std::string stored, Str(file, "", "checksum"));
  std::string computed = CheckpointChecksum(file);
  if (stored != computed) {
    return absl::InvalidArgumentError(
        absl::StrCat("checksum mismatch: file says ", stored, ", content hashes to ", computed));
  }
  Checkpoint out;
  ASSIGN_OR_RETURN(out.node_boot_id, Str(file, "", "nodeBootID"));
  auto claims = file.find("claims");
  if (claims == file.end() || !claims->is_object()) {
    return absl::InvalidArgumentError("claims: missing or not an object");
  }
  for (const auto& [uid, c] : claims->items()) {
    ASSIGN_OR_RETURN(CheckpointClaim claim, DecodeClaim(c, absl::StrCat("claims[\"", uid, "\"]")));
    out.claims.emplace(uid, std::move(claim));
  }
  return out;
}

absl::string_view ToString(LoadedCheckpoint::Origin origin) {
  switch (origin) {
    case LoadedCheckpoint::Origin::kFresh:
      return "fresh";
    case LoadedCheckpoint::Origin::kLoaded:
      return "loaded";
    case LoadedCheckpoint::Origin::kDiscardedReboot:
      return "discarded_reboot";
    case LoadedCheckpoint::Origin::kRebuilt:
      return "rebuilt";
  }
  return "unknown";
}

std::string CheckpointPath(absl::string_view plugins_dir, absl::string_view driver_name) {
  return absl::StrCat(plugins_dir, "/", driver_name, "/", kCheckpointFileName);
}

absl::StatusOr<std::string> ReadBootId(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, common::ReadFile(path));
  std::string id(absl::StripAsciiWhitespace(text));
  if (id.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("boot id file ", path, " is empty"));
  }
  return id;
}

FileCheckpointStore::FileCheckpointStore(std::string path, std::string boot_id,
                                         common::Clock& clock)
    : path_(std::move(path)), boot_id_(std::move(boot_id)), clock_(clock) {}

absl::StatusOr<LoadedCheckpoint> FileCheckpointStore::Load() {
  LoadedCheckpoint out;
  out.checkpoint.node_boot_id = boot_id_;
  absl::StatusOr<std::string> text = common::ReadFile(path_);
  if (absl::IsNotFound(text.status())) {
    DLOG(kInfo, kComponent, "no checkpoint; starting empty", {{"path", path_}});
    out.origin = LoadedCheckpoint::Origin::kFresh;
    return out;
  }
  if (!text.ok()) {
    return common::Annotate(text.status(), absl::StrCat("read checkpoint ", path_));
  }
  absl::StatusOr<Checkpoint> decoded = DecodeCheckpoint(*text);
  if (!decoded.ok()) {
    // Keep the evidence: a person decides what the file held. Starting empty is safe for the
    // kubelet (it re-sends every claim), but must never happen silently.
    std::string aside = absl::StrCat(path_, ".corrupt-", absl::ToUnixSeconds(clock_.Now()));
    // Never overwrite evidence kept earlier in the same second.
    for (int n = 1; std::filesystem::exists(aside); ++n) {
      aside = absl::StrCat(path_, ".corrupt-", absl::ToUnixSeconds(clock_.Now()), "-", n);
    }
    if (std::rename(path_.c_str(), aside.c_str()) != 0) {
      return common::Annotate(
          common::ErrnoStatus(errno, "rename", path_),
          absl::StrCat("set aside corrupt checkpoint (", decoded.status().message(), ")"));
    }
    DLOG(kError, kComponent, "checkpoint unreadable; kept aside and rebuilding empty",
         {{"path", path_}, {"kept_as", aside}, {"reason", decoded.status().message()}});
    out.origin = LoadedCheckpoint::Origin::kRebuilt;
    out.reason = std::string(decoded.status().message());
    out.quarantined_path = aside;
    return out;
  }
  if (decoded->node_boot_id != boot_id_) {
    out.origin = LoadedCheckpoint::Origin::kDiscardedReboot;
    out.reason = absl::StrCat("node rebooted: checkpoint boot id ", decoded->node_boot_id,
                              ", running boot id ", boot_id_);
    DLOG(kWarn, kComponent, "node rebooted; discarding checkpoint",
         {{"path", path_},
          {"checkpoint_boot_id", decoded->node_boot_id},
          {"boot_id", boot_id_},
          {"claims_discarded", decoded->claims.size()}});
    return out;
  }
  out.origin = LoadedCheckpoint::Origin::kLoaded;
  out.checkpoint = *std::move(decoded);
  DLOG(kInfo, kComponent, "checkpoint loaded",
       {{"path", path_}, {"claims", out.checkpoint.claims.size()}});
  return out;
}

absl::Status FileCheckpointStore::Save(const Checkpoint& checkpoint) {
  std::filesystem::path dir = std::filesystem::path(path_).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("write checkpoint: create directory ", dir.string(), ": ", ec.message()));
    }
  }
  // The file always carries the running kernel's boot ID, whatever the caller filled in.
  Checkpoint stamped = checkpoint;
  stamped.node_boot_id = boot_id_;
  return common::Annotate(common::WriteFileAtomically(path_, EncodeCheckpoint(stamped), 0600),
                          "write checkpoint");
}

}  // namespace dralens::driver::prepare
