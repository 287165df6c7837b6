#include "driver/sharing/config.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/status.h"
#include "src/model/json.h"

namespace dralens::driver::sharing {
namespace {

using nlohmann::json;

constexpr int64_t kMiB = int64_t{1} << 20;

absl::Status FieldError(absl::string_view path, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", why));
}

std::string Child(absl::string_view path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

// JSON type names as a user reads them ("number", "string", ...).
std::string TypeOf(const json& value) { return value.type_name(); }

absl::Status WrongType(absl::string_view path, absl::string_view want, const json& got) {
  return FieldError(path, absl::StrCat("must be ", want, ", got ", TypeOf(got)));
}

// Go's decoder treats an explicit null like an absent optional field; so do we.
const json* Optional(const json& object, absl::string_view key) {
  auto it = object.find(std::string(key));
  if (it == object.end() || it->is_null()) {
    return nullptr;
  }
  return &*it;
}

absl::Status RejectUnknownFields(const json& object, absl::string_view path,
                                 std::initializer_list<absl::string_view> known) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) == known.end()) {
      return FieldError(Child(path, it.key()), "unknown field");
    }
  }
  return absl::OkStatus();
}

absl::Status ExpectObject(const json& value, absl::string_view path) {
  if (!value.is_object()) {
    return WrongType(path, "an object", value);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ExpectString(const json& value, absl::string_view path) {
  if (!value.is_string()) {
    return WrongType(path, "a string", value);
  }
  return value.get<std::string>();
}

// Kubernetes quantities arrive as strings, or as plain JSON integers.
absl::StatusOr<common::Quantity> DecodeQuantity(const json& value, absl::string_view path) {
  if (value.is_number_integer()) {
    // Positive numbers parse as unsigned; above int64 they cannot be a quantity.
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return FieldError(path, absl::StrCat("quantity ", value.dump(), " is out of range"));
    }
    return common::Quantity::FromInt64(value.get<int64_t>());
  }
  if (!value.is_string()) {
    return WrongType(path, "a quantity string", value);
  }
  absl::StatusOr<common::Quantity> q = common::Quantity::Parse(value.get<std::string>());
  if (!q.ok()) {
    return FieldError(path, q.status().message());
  }
  return q;
}

absl::StatusOr<common::Quantity> DecodeMemoryLimit(const json& value, absl::string_view path) {
  ASSIGN_OR_RETURN(common::Quantity q, DecodeQuantity(value, path));
  // Limits are applied in whole MiB (`<N>M`), so anything smaller would become 0 = no limit.
  if (q < common::Quantity::FromInt64(kMiB)) {
    return FieldError(path, absl::StrCat("must be at least 1Mi, got ", q.String()));
  }
  return q;
}

bool IsDeviceIndex(absl::string_view key) {
  return !key.empty() && key.size() <= 4 &&
         std::all_of(key.begin(), key.end(), [](char c) { return absl::ascii_isdigit(c); });
}

bool IsDeviceUuid(absl::string_view key) {
  return (absl::StartsWith(key, "GPU-") || absl::StartsWith(key, "MIG-")) && key.size() > 4;
}

absl::StatusOr<MpsConfig> DecodeMpsConfig(const json& value, absl::string_view path) {
  RETURN_IF_ERROR(ExpectObject(value, path));
  RETURN_IF_ERROR(
      RejectUnknownFields(value, path,
                          {"defaultActiveThreadPercentage", "defaultPinnedDeviceMemoryLimit",
                           "defaultPerDevicePinnedMemoryLimit", "multiUser"}));
  MpsConfig mps;
  if (const json* pct = Optional(value, "defaultActiveThreadPercentage")) {
    const std::string p = Child(path, "defaultActiveThreadPercentage");
    if (pct->is_number_float()) {
      return FieldError(p, absl::StrCat("must be an integer, got ", pct->dump()));
    }
    if (!pct->is_number_integer()) {
      return WrongType(p, "an integer", *pct);
    }
    if (pct->is_number_unsigned() && pct->get<uint64_t>() > 100) {
      return FieldError(p, absl::StrCat("must be 1..100, got ", pct->dump()));
    }
    const int64_t n = pct->get<int64_t>();
    if (n < 1 || n > 100) {
      return FieldError(p, absl::StrCat("must be 1..100, got ", n));
    }
    mps.default_active_thread_percentage = static_cast<int>(n);
  }
  if (const json* limit = Optional(value, "defaultPinnedDeviceMemoryLimit")) {
    ASSIGN_OR_RETURN(mps.default_pinned_device_memory_limit,
                     DecodeMemoryLimit(*limit, Child(path, "defaultPinnedDeviceMemoryLimit")));
  }
  if (const json* per_device = Optional(value, "defaultPerDevicePinnedMemoryLimit")) {
    const std::string p = Child(path, "defaultPerDevicePinnedMemoryLimit");
    RETURN_IF_ERROR(ExpectObject(*per_device, p));
    for (auto it = per_device->begin(); it != per_device->end(); ++it) {
      const std::string entry = absl::StrCat(p, "[\"", it.key(), "\"]");
      if (!IsDeviceUuid(it.key()) && !IsDeviceIndex(it.key())) {
        return FieldError(entry,
                          "key must be a device UUID (GPU-... or MIG-...) or a device index");
      }
      ASSIGN_OR_RETURN(common::Quantity q, DecodeMemoryLimit(it.value(), entry));
      mps.default_per_device_pinned_memory_limit.emplace(it.key(), q);
    }
  }
  if (const json* multi = Optional(value, "multiUser")) {
    if (!multi->is_boolean()) {
      return WrongType(Child(path, "multiUser"), "a boolean", *multi);
    }
    mps.multi_user = multi->get<bool>();
  }
  return mps;
}

absl::StatusOr<discovery::TimeSlice> DecodeInterval(const json& value, absl::string_view path) {
  ASSIGN_OR_RETURN(std::string name, ExpectString(value, path));
  for (discovery::TimeSlice t : {discovery::TimeSlice::kDefault, discovery::TimeSlice::kShort,
                                 discovery::TimeSlice::kMedium, discovery::TimeSlice::kLong}) {
    if (name == discovery::ToString(t)) {
      return t;
    }
  }
  return FieldError(path, absl::StrCat("must be one of Default, Short, Medium, Long, got \"",
                                       absl::CEscape(name), "\""));
}

absl::StatusOr<SharingConfig> DecodeSharing(const json& value, ConfigKind kind) {
  constexpr absl::string_view path = "sharing";
  RETURN_IF_ERROR(ExpectObject(value, path));
  if (kind == ConfigKind::kGpuConfig) {
    RETURN_IF_ERROR(
        RejectUnknownFields(value, path, {"strategy", "timeSlicingConfig", "mpsConfig"}));
  } else {
    // No timeSlicingConfig: the interval cannot be set on a MIG device.
    RETURN_IF_ERROR(RejectUnknownFields(value, path, {"strategy", "mpsConfig"}));
  }
  SharingConfig sharing;
  const json* strategy = Optional(value, "strategy");
  if (strategy == nullptr) {
    return FieldError("sharing.strategy", "required (TimeSlicing or MPS)");
  }
  ASSIGN_OR_RETURN(std::string name, ExpectString(*strategy, "sharing.strategy"));
  if (name == "TimeSlicing") {
    sharing.mode = SharingMode::kTimeSlicing;
  } else if (name == "MPS") {
    sharing.mode = SharingMode::kMps;
  } else {
    return FieldError("sharing.strategy", absl::StrCat("must be TimeSlicing or MPS, got \"",
                                                       absl::CEscape(name), "\""));
  }
  const json* ts = Optional(value, "timeSlicingConfig");
  const json* mps = Optional(value, "mpsConfig");
  if (sharing.mode == SharingMode::kTimeSlicing && mps != nullptr) {
    return FieldError("sharing.mpsConfig", "not allowed with strategy TimeSlicing");
  }
  if (sharing.mode == SharingMode::kMps && ts != nullptr) {
    return FieldError("sharing.timeSlicingConfig", "not allowed with strategy MPS");
  }
  if (ts != nullptr) {
    constexpr absl::string_view ts_path = "sharing.timeSlicingConfig";
    RETURN_IF_ERROR(ExpectObject(*ts, ts_path));
    RETURN_IF_ERROR(RejectUnknownFields(*ts, ts_path, {"interval"}));
    if (const json* interval = Optional(*ts, "interval")) {
      ASSIGN_OR_RETURN(sharing.interval, DecodeInterval(*interval, Child(ts_path, "interval")));
    }
  }
  if (mps != nullptr) {
    ASSIGN_OR_RETURN(sharing.mps, DecodeMpsConfig(*mps, "sharing.mpsConfig"));
  }
  return sharing;
}

bool KindFits(ConfigKind kind, DeviceType type) {
  return (kind == ConfigKind::kGpuConfig) == (type == DeviceType::kGpu);
}

}  // namespace

absl::string_view ToString(ConfigKind kind) {
  switch (kind) {
    case ConfigKind::kGpuConfig:
      return kGpuConfigKind;
    case ConfigKind::kMigDeviceConfig:
      return kMigDeviceConfigKind;
  }
  return "Unknown";
}

absl::string_view ToString(SharingMode mode) {
  switch (mode) {
    case SharingMode::kNone:
      return "none";
    case SharingMode::kTimeSlicing:
      return "TimeSlicing";
    case SharingMode::kMps:
      return "MPS";
  }
  return "unknown";
}

absl::StatusOr<DeviceConfig> DecodeDeviceConfig(const json& parameters) {
  const std::string compact = model::SerializeJson(parameters);
  if (compact.size() > kMaxParametersBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameters: ", compact.size(), " bytes, more than the limit of ", kMaxParametersBytes));
  }
  if (!parameters.is_object()) {
    return WrongType("parameters", "an object", parameters);
  }
  const json* api_version = Optional(parameters, "apiVersion");
  if (api_version == nullptr) {
    return FieldError("apiVersion", absl::StrCat("required (", kConfigApiVersion, ")"));
  }
  ASSIGN_OR_RETURN(std::string version, ExpectString(*api_version, "apiVersion"));
  if (version != kConfigApiVersion) {
    return FieldError("apiVersion", absl::StrCat("must be ", kConfigApiVersion, ", got \"",
                                                 absl::CEscape(version), "\""));
  }
  const json* kind_field = Optional(parameters, "kind");
  if (kind_field == nullptr) {
    return FieldError("kind", "required (GpuConfig or MigDeviceConfig)");
  }
  ASSIGN_OR_RETURN(std::string kind_name, ExpectString(*kind_field, "kind"));
  DeviceConfig config;
  if (kind_name == kGpuConfigKind) {
    config.kind = ConfigKind::kGpuConfig;
  } else if (kind_name == kMigDeviceConfigKind) {
    config.kind = ConfigKind::kMigDeviceConfig;
  } else {
    return FieldError("kind", absl::StrCat("must be GpuConfig or MigDeviceConfig, got \"",
                                           absl::CEscape(kind_name), "\""));
  }
  RETURN_IF_ERROR(RejectUnknownFields(parameters, "", {"apiVersion", "kind", "sharing"}));
  if (const json* sharing = Optional(parameters, "sharing")) {
    ASSIGN_OR_RETURN(config.sharing, DecodeSharing(*sharing, config.kind));
  }
  return config;
}

json EncodeSharing(const SharingConfig& sharing) {
  switch (sharing.mode) {
    case SharingMode::kNone:
      return nullptr;
    case SharingMode::kTimeSlicing:
      return {{"strategy", "TimeSlicing"},
              {"timeSlicingConfig", {{"interval", discovery::ToString(sharing.interval)}}}};
    case SharingMode::kMps: {
      const MpsConfig& mps = sharing.mps;
      json config = json::object();
      if (mps.default_active_thread_percentage.has_value()) {
        config["defaultActiveThreadPercentage"] = *mps.default_active_thread_percentage;
      }
      if (mps.default_pinned_device_memory_limit.has_value()) {
        config["defaultPinnedDeviceMemoryLimit"] = mps.default_pinned_device_memory_limit->String();
      }
      if (!mps.default_per_device_pinned_memory_limit.empty()) {
        json per_device = json::object();
        for (const auto& [key, limit] : mps.default_per_device_pinned_memory_limit) {
          per_device[key] = limit.String();
        }
        config["defaultPerDevicePinnedMemoryLimit"] = std::move(per_device);
      }
      if (mps.multi_user.has_value()) {
        config["multiUser"] = *mps.multi_user;
      }
      return {{"strategy", "MPS"}, {"mpsConfig", std::move(config)}};
    }
  }
  return nullptr;
}

absl::StatusOr<SharingConfig> DecodeSharingBlock(const json& block, ConfigKind kind) {
  if (block.is_null()) {
    return SharingConfig{};
  }
  return DecodeSharing(block, kind);
}

bool ConfigAppliesToRequest(const std::vector<std::string>& requests, absl::string_view request) {
  if (requests.empty()) {
    return true;
  }
  const size_t slash = request.find('/');
  const absl::string_view main_request =
      slash == absl::string_view::npos ? request : request.substr(0, slash);
  return std::any_of(requests.begin(), requests.end(),
                     [&](const std::string& r) { return r == request || r == main_request; });
}

absl::StatusOr<DeviceConfig> ResolveDeviceConfig(
    const std::vector<model::DeviceAllocationConfiguration>& configs, absl::string_view driver,
    const AllocatedDevice& device) {
  struct Entry {
    std::string name;  // "config[i] (Source)" for errors
    const model::DeviceAllocationConfiguration* raw;
    DeviceConfig decoded;
  };
  std::vector<Entry> from_class;
  std::vector<Entry> from_claim;
  for (size_t i = 0; i < configs.size(); ++i) {
    const model::DeviceAllocationConfiguration& c = configs[i];
    if (!c.opaque.has_value() || c.opaque->driver != driver) {
      continue;
    }
    Entry entry{absl::StrCat("config[", i, "] (", c.source, ")"), &c, {}};
    if (c.source != "FromClass" && c.source != "FromClaim") {
      return absl::InvalidArgumentError(
          absl::StrCat(entry.name, ": source must be FromClass or FromClaim"));
    }
    absl::StatusOr<DeviceConfig> decoded = DecodeDeviceConfig(c.opaque->parameters);
    if (!decoded.ok()) {
      return common::Annotate(decoded.status(), entry.name);
    }
    entry.decoded = *std::move(decoded);
    (c.source == "FromClass" ? from_class : from_claim).push_back(std::move(entry));
  }
  // Precedence: the last applicable entry of claim configs, then of class configs.
  for (const std::vector<Entry>* group : {&from_claim, &from_class}) {
    for (auto it = group->rbegin(); it != group->rend(); ++it) {
      if (!ConfigAppliesToRequest(it->raw->requests, device.request)) {
        continue;
      }
      if (!KindFits(it->decoded.kind, device.type)) {
        if (it->raw->requests.empty()) {
          continue;
        }
        return absl::InvalidArgumentError(
            absl::StrCat(it->name, ": ", ToString(it->decoded.kind), " cannot apply to ",
                         ToString(device.type), " device of request \"", device.request, "\""));
      }
      return it->decoded;
    }
  }
  DeviceConfig exclusive;
  exclusive.kind =
      device.type == DeviceType::kGpu ? ConfigKind::kGpuConfig : ConfigKind::kMigDeviceConfig;
  return exclusive;
}

}  // namespace dralens::driver::sharing
