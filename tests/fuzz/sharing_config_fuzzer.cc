// Fuzzes the opaque sharing config (driver/sharing/config.h). The input is JSON, used twice:
//  - as `opaque.parameters`: DecodeDeviceConfig, and on success the documented round trip
//    DecodeSharingBlock(EncodeSharing(s), kGpuConfig) == s, for the config of either kind (the
//    checkpoint stores a MIG device's decision that way too: EncodeSharing writes the
//    time-slice interval, which a MigDeviceConfig may not carry);
//  - when it is an array, as the allocation's config list, each element
//    {"source", "requests", "driver", "parameters"} becoming one entry (missing members take
//    the defaults below), resolved by ResolveDeviceConfig for a GPU and a MIG device.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "driver/sharing/config.h"
#include "nlohmann/json.hpp"
#include "src/model/json.h"
#include "src/model/resource.h"
#include "tests/fuzz/fuzz_check.h"

namespace dralens::fuzz {
namespace {

using driver::sharing::AllocatedDevice;
using driver::sharing::DeviceConfig;
using driver::sharing::DeviceType;

constexpr char kDriver[] = "gpu.dralens.dev";

std::string StringOr(const nlohmann::json& object, const char* key, const char* fallback) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

std::vector<model::DeviceAllocationConfiguration> ConfigList(const nlohmann::json& list) {
  std::vector<model::DeviceAllocationConfiguration> configs;
  for (const nlohmann::json& element : list) {
    if (!element.is_object()) {
      continue;
    }
    model::DeviceAllocationConfiguration entry;
    entry.source = StringOr(element, "source", "FromClaim");
    if (auto it = element.find("requests"); it != element.end() && it->is_array()) {
      for (const nlohmann::json& request : *it) {
        if (request.is_string()) {
          entry.requests.push_back(request.get<std::string>());
        }
      }
    }
    if (auto it = element.find("parameters"); it != element.end()) {
      entry.opaque = model::OpaqueDeviceConfiguration{StringOr(element, "driver", kDriver), *it};
    }
    configs.push_back(std::move(entry));
  }
  return configs;
}

void CheckDecoded(const DeviceConfig& config) {
  nlohmann::json block = driver::sharing::EncodeSharing(config.sharing);
  absl::StatusOr<driver::sharing::SharingConfig> again =
      driver::sharing::DecodeSharingBlock(block, driver::sharing::ConfigKind::kGpuConfig);
  FUZZ_CHECK(again.ok(), "an encoded sharing block decodes");
  FUZZ_CHECK(*again == config.sharing, "the sharing block round-trips");
}

}  // namespace
}  // namespace dralens::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dralens;
  absl::StatusOr<nlohmann::json> json =
      model::ParseJson(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!json.ok()) {
    return 0;
  }
  absl::StatusOr<driver::sharing::DeviceConfig> config = driver::sharing::DecodeDeviceConfig(*json);
  if (config.ok()) {
    fuzz::CheckDecoded(*config);
  } else {
    FUZZ_CHECK(!config.status().message().empty(), "a decode error says why");
  }
  if (json->is_array()) {
    std::vector<model::DeviceAllocationConfiguration> configs = fuzz::ConfigList(*json);
    for (const std::string& request : {"gpu", "gpu/small", "other"}) {
      for (driver::sharing::DeviceType type :
           {driver::sharing::DeviceType::kGpu, driver::sharing::DeviceType::kMig}) {
        absl::StatusOr<driver::sharing::DeviceConfig> resolved =
            driver::sharing::ResolveDeviceConfig(configs, fuzz::kDriver,
                                                 driver::sharing::AllocatedDevice{request, type});
        if (resolved.ok()) {
          FUZZ_CHECK((resolved->kind == driver::sharing::ConfigKind::kMigDeviceConfig) ==
                         (type == driver::sharing::DeviceType::kMig),
                     "the resolved config has the device's kind");
          fuzz::CheckDecoded(*resolved);
        }
      }
    }
  }
  return 0;
}
