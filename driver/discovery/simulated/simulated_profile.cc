#include "driver/discovery/simulated/simulated_profile.h"

#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "src/common/status.h"
#include "src/model/mig_profile.h"

namespace dralens::driver::discovery {
namespace {

using nlohmann::json;

SimulatedGpuSpec Gpu(const char* board, bool mig_enabled = false,
                     std::vector<SimulatedMigDeviceSpec> migs = {}) {
  SimulatedGpuSpec gpu;
  gpu.board = board;
  gpu.mig_enabled = mig_enabled;
  gpu.mig_devices = std::move(migs);
  return gpu;
}

SimulatedProfile Uniform(const char* name, const char* board, int count) {
  SimulatedProfile profile;
  profile.name = name;
  for (int i = 0; i < count; ++i) {
    profile.gpus.push_back(Gpu(board));
  }
  return profile;
}

SimulatedProfile Mixed() {
  SimulatedProfile profile;
  profile.name = "mixed";
  profile.nvlink = SimulatedNvLink::kNvSwitch;
  profile.gpus.push_back(Gpu("h100-80gb", true, {{"3g.40gb", 0}, {"2g.20gb", 4}, {"1g.10gb", 6}}));
  std::vector<SimulatedMigDeviceSpec> sevenths;
  for (uint32_t start = 0; start < 7; ++start) {
    sevenths.push_back({"1g.10gb", start});
  }
  profile.gpus.push_back(Gpu("h100-80gb", true, std::move(sevenths)));
  profile.gpus.push_back(Gpu("h100-80gb", true));
  profile.gpus.push_back(Gpu("h100-80gb", true, {{"1g.20gb", 0}, {"1g.20gb", 2}}));
  for (int i = 0; i < 4; ++i) {
    profile.gpus.push_back(Gpu("h100-80gb"));
  }
  return profile;
}

// --- strict JSON helpers -------------------------------------------------------------------

absl::Status CheckKeys(const json& object, const std::string& path,
                       std::initializer_list<const char*> allowed) {
  if (!object.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.empty() ? "profile" : path, ": expected an object"));
  }
  for (const auto& item : object.items()) {
    bool known = false;
    for (const char* key : allowed) {
      if (item.key() == key) {
        known = true;
        break;
      }
    }
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat(path.empty() ? "" : absl::StrCat(path, "."), item.key(),
                       ": unknown field (allowed: ", absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

std::string FieldPath(const std::string& path, const char* key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}

absl::Status GetString(const json& object, const std::string& path, const char* key,
                       std::string* out, bool required = false) {
  auto it = object.find(key);
  if (it == object.end()) {
    return required ? absl::InvalidArgumentError(
                          absl::StrCat(FieldPath(path, key), ": required field missing"))
                    : absl::OkStatus();
  }
  if (!it->is_string() || it->get<std::string>().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(FieldPath(path, key), ": expected a non-empty string, got ", it->dump()));
  }
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::Status GetInt(const json& object, const std::string& path, const char* key, int64_t min,
                    int64_t max, std::optional<int64_t>* out, bool required = false) {
  auto it = object.find(key);
  if (it == object.end()) {
    return required ? absl::InvalidArgumentError(
                          absl::StrCat(FieldPath(path, key), ": required field missing"))
                    : absl::OkStatus();
  }
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat(FieldPath(path, key), ": expected an integer, got ", it->dump()));
  }
  const int64_t value = it->get<int64_t>();
  if (value < min || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(FieldPath(path, key), ": ", value, " is out of range [", min, ", ", max, "]"));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status GetBool(const json& object, const std::string& path, const char* key, bool* out) {
  auto it = object.find(key);
  if (it == object.end()) {
    return absl::OkStatus();
  }
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(FieldPath(path, key), ": expected a boolean, got ", it->dump()));
  }
  *out = it->get<bool>();
  return absl::OkStatus();
}

// "3f2a0001-abcd-4000-8000-123456789abc" (either case) as 16 bytes.
std::optional<std::array<unsigned char, 16>> ParseUuid(const std::string& text) {
  std::array<unsigned char, 16> out = {};
  if (text.size() != 36) {
    return std::nullopt;
  }
  size_t byte = 0;
  for (size_t i = 0; i < text.size();) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (text[i] != '-') {
        return std::nullopt;
      }
      ++i;
      continue;
    }
    int value = 0;
    if (!absl::ascii_isxdigit(text[i]) || !absl::ascii_isxdigit(text[i + 1]) ||
        !absl::SimpleHexAtoi(text.substr(i, 2), &value)) {
      return std::nullopt;
    }
    out[byte++] = static_cast<unsigned char>(value);
    i += 2;
  }
  return out;
}

absl::Status ParseNvLink(const json& root, SimulatedProfile& profile) {
  std::string nvlink;
  RETURN_IF_ERROR(GetString(root, "", "nvlink", &nvlink));
  if (nvlink == "nvswitch") {
    profile.nvlink = SimulatedNvLink::kNvSwitch;
  } else if (nvlink == "pairs") {
    profile.nvlink = SimulatedNvLink::kPairs;
  } else if (!nvlink.empty() && nvlink != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("nvlink: unknown value \"", nvlink, "\" (known: none, nvswitch, pairs)"));
  }
  auto fabric = root.find("nvlinkFabric");
  if (fabric == root.end()) {
    return absl::OkStatus();
  }
  const std::string path = "nvlinkFabric";
  RETURN_IF_ERROR(CheckKeys(*fabric, path, {"clusterUuid", "cliqueId"}));
  std::string uuid;
  RETURN_IF_ERROR(GetString(*fabric, path, "clusterUuid", &uuid, /*required=*/true));
  std::optional<int64_t> clique;
  RETURN_IF_ERROR(GetInt(*fabric, path, "cliqueId", 0, 0xffffffffLL, &clique, /*required=*/true));
  std::optional<std::array<unsigned char, 16>> bytes = ParseUuid(uuid);
  if (!bytes.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nvlinkFabric.clusterUuid: \"", uuid, "\" is not a UUID (8-4-4-4-12 hexadecimal digits)"));
  }
  profile.fabric =
      SimulatedFabric{.cluster_uuid = *bytes, .clique_id = static_cast<uint32_t>(*clique)};
  return absl::OkStatus();
}

std::string KnownBoardKeys() {
  std::vector<std::string> keys;
  for (const model::MigBoard& board : model::KnownMigBoards()) {
    keys.push_back(board.key);
  }
  return absl::StrJoin(keys, ", ");
}

absl::StatusOr<std::vector<SimulatedGpuSpec>> ParseGpu(const json& entry, const std::string& path) {
  RETURN_IF_ERROR(CheckKeys(
      entry, path,
      {"board", "count", "migEnabled", "migDevices", "numaNode", "pciBusId", "pcieRoot"}));
  SimulatedGpuSpec gpu;
  RETURN_IF_ERROR(GetString(entry, path, "board", &gpu.board, /*required=*/true));
  if (model::FindMigBoard(gpu.board) == nullptr ||
      model::FindMigBoard(gpu.board)->key != gpu.board) {
    return absl::InvalidArgumentError(absl::StrCat(FieldPath(path, "board"), ": unknown board \"",
                                                   gpu.board, "\" (known: ", KnownBoardKeys(),
                                                   ")"));
  }
  std::optional<int64_t> count;
  RETURN_IF_ERROR(GetInt(entry, path, "count", 1, 64, &count));
  RETURN_IF_ERROR(GetBool(entry, path, "migEnabled", &gpu.mig_enabled));
  std::optional<int64_t> numa;
  RETURN_IF_ERROR(GetInt(entry, path, "numaNode", 0, 1023, &numa));
  if (numa.has_value()) {
    gpu.numa_node = static_cast<int>(*numa);
  }
  RETURN_IF_ERROR(GetString(entry, path, "pciBusId", &gpu.pci_bus_id));
  RETURN_IF_ERROR(GetString(entry, path, "pcieRoot", &gpu.pcie_root));
  if (!gpu.pci_bus_id.empty() && count.value_or(1) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(FieldPath(path, "pciBusId"), ": only allowed with count 1"));
  }
  if (auto it = entry.find("migDevices"); it != entry.end()) {
    const std::string migs_path = FieldPath(path, "migDevices");
    if (!it->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(migs_path, ": expected an array, got ", it->dump()));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const json& mig = (*it)[i];
      const std::string mig_path = absl::StrCat(migs_path, "[", i, "]");
      RETURN_IF_ERROR(CheckKeys(mig, mig_path, {"profile", "start"}));
      SimulatedMigDeviceSpec spec;
      RETURN_IF_ERROR(GetString(mig, mig_path, "profile", &spec.profile, /*required=*/true));
      std::optional<int64_t> start;
      RETURN_IF_ERROR(GetInt(mig, mig_path, "start", 0, 31, &start, /*required=*/true));
      spec.start = static_cast<uint32_t>(*start);
      gpu.mig_devices.push_back(std::move(spec));
    }
  }
  return std::vector<SimulatedGpuSpec>(static_cast<size_t>(count.value_or(1)), gpu);
}

}  // namespace

std::vector<std::string> BuiltinSimulatedProfileNames() {
  return {"a100-40gb", "dgx-h100", "h100x2", "mixed"};
}

absl::StatusOr<SimulatedProfile> BuiltinSimulatedProfile(absl::string_view name) {
  if (name == "dgx-h100") {
    SimulatedProfile profile = Uniform("dgx-h100", "h100-80gb", 8);
    profile.nvlink = SimulatedNvLink::kNvSwitch;
    return profile;
  }
  if (name == "h100x2") {
    SimulatedProfile profile = Uniform("h100x2", "h100-80gb", 2);
    profile.nvlink = SimulatedNvLink::kPairs;
    return profile;
  }
  if (name == "a100-40gb") {
    return Uniform("a100-40gb", "a100-40gb", 8);
  }
  if (name == "mixed") {
    return Mixed();
  }
  return absl::NotFoundError(
      absl::StrCat("unknown built-in simulated profile \"", name,
                   "\" (built-in: ", absl::StrJoin(BuiltinSimulatedProfileNames(), ", "), ")"));
}

absl::StatusOr<SimulatedProfile> ParseSimulatedProfileJson(absl::string_view json_text) {
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON: ", e.what()));
  }
  RETURN_IF_ERROR(CheckKeys(
      root, "",
      {"name", "driverVersion", "cudaDriverVersion", "brand", "gpus", "nvlink", "nvlinkFabric"}));
  SimulatedProfile profile;
  RETURN_IF_ERROR(GetString(root, "", "name", &profile.name, /*required=*/true));
  RETURN_IF_ERROR(GetString(root, "", "driverVersion", &profile.driver_version));
  RETURN_IF_ERROR(GetString(root, "", "cudaDriverVersion", &profile.cuda_driver_version));
  RETURN_IF_ERROR(GetString(root, "", "brand", &profile.brand));
  RETURN_IF_ERROR(ParseNvLink(root, profile));
  auto gpus = root.find("gpus");
  if (gpus == root.end()) {
    return absl::InvalidArgumentError("gpus: required field missing");
  }
  if (!gpus->is_array() || gpus->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpus: expected a non-empty array, got ", gpus->dump()));
  }
  for (size_t i = 0; i < gpus->size(); ++i) {
    ASSIGN_OR_RETURN(std::vector<SimulatedGpuSpec> expanded,
                     ParseGpu((*gpus)[i], absl::StrCat("gpus[", i, "]")));
    for (SimulatedGpuSpec& gpu : expanded) {
      profile.gpus.push_back(std::move(gpu));
    }
  }
  if (profile.gpus.size() > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpus: ", profile.gpus.size(), " GPUs in total, at most 256 allowed"));
  }
  return profile;
}

absl::StatusOr<SimulatedProfile> LoadSimulatedProfile(absl::string_view name_or_path) {
  absl::StatusOr<SimulatedProfile> builtin = BuiltinSimulatedProfile(name_or_path);
  if (builtin.ok()) {
    return builtin;
  }
  const std::string path(name_or_path);
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("simulated profile \"", path, "\" is neither a built-in profile (",
                     absl::StrJoin(BuiltinSimulatedProfileNames(), ", "), ") nor a readable file"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return common::Annotate(ParseSimulatedProfileJson(text.str()),
                          absl::StrCat("simulated profile ", path));
}

absl::Status ValidateSimulatedProfile(const SimulatedProfile& profile) {
  if (profile.name.empty()) {
    return absl::InvalidArgumentError("simulated profile has no name");
  }
  if (profile.gpus.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("simulated profile ", profile.name, " has no GPUs"));
  }
  if (profile.fabric.has_value() && profile.nvlink != SimulatedNvLink::kNvSwitch) {
    return absl::InvalidArgumentError(absl::StrCat("simulated profile ", profile.name,
                                                   ": nvlinkFabric needs nvlink \"nvswitch\""));
  }
  for (size_t i = 0; i < profile.gpus.size(); ++i) {
    const SimulatedGpuSpec& gpu = profile.gpus[i];
    const std::string where = absl::StrCat("simulated profile ", profile.name, " GPU ", i);
    const model::MigBoard* board = model::FindMigBoard(gpu.board);
    if (board == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown board \"", gpu.board,
                                                     "\" (known: ", KnownBoardKeys(), ")"));
    }
    if (!gpu.mig_devices.empty() && !gpu.mig_enabled) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": MIG devices listed but migEnabled is false"));
    }
    std::vector<model::MigInstancePlacement> placed;
    for (const SimulatedMigDeviceSpec& mig : gpu.mig_devices) {
      const model::MigProfile* p = board->FindProfile(mig.profile);
      if (p == nullptr) {
        std::vector<std::string> names;
        for (const model::MigProfile& known : board->profiles) {
          names.push_back(known.name);
        }
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": profile \"", mig.profile, "\" is not offered by ", board->key,
                         " (offered: ", absl::StrJoin(names, ", "), ")"));
      }
      RETURN_IF_ERROR_CTX(model::CheckMigPlacement(*p, mig.start, placed), where);
      placed.push_back({p->gi_profile_id, {mig.start, p->memory_slices}});
    }
  }
  return absl::OkStatus();
}

}  // namespace dralens::driver::discovery
