#include "driver/prepare/claim_debug.h"

#include <string>

#include "absl/time/time.h"
#include "driver/sharing/planner.h"

namespace dralens::driver::prepare {

nlohmann::json DebugClaims(const Checkpoint& checkpoint,
                           const std::vector<DecisionLog::Decision>& recent,
                           absl::string_view driver, absl::string_view pool) {
  nlohmann::json claims = nlohmann::json::array();
  for (const auto& [uid, claim] : checkpoint.claims) {
    nlohmann::json devices = nlohmann::json::array();
    for (const CheckpointDevice& d : claim.devices) {
      nlohmann::json device = {{"device", d.device},
                               {"pool", d.pool},
                               {"type", std::string(model::ToString(d.type))},
                               {"uuid", d.uuid},
                               {"requests", d.request_names},
                               {"cdiDeviceIDs", d.cdi_device_ids}};
      if (d.sharing.has_value()) {
        device["sharingStrategy"] = std::string(sharing::ToString(d.sharing->strategy));
      }
      devices.push_back(std::move(device));
    }
    claims.push_back({{"uid", uid},
                      {"namespace", claim.namespace_name},
                      {"name", claim.name},
                      {"state", ToString(claim.state)},
                      {"cdiSpecFile", claim.cdi_spec_file},
                      {"devices", devices}});
  }
  nlohmann::json outcomes = nlohmann::json::array();
  for (const DecisionLog::Decision& d : recent) {
    outcomes.push_back({{"time", absl::FormatTime(absl::RFC3339_full, d.time, absl::UTCTimeZone())},
                        {"operation", ToString(d.operation)},
                        {"namespace", d.namespace_name},
                        {"name", d.name},
                        {"uid", d.uid},
                        {"result", d.reason == FailureReason::kNone ? "ok" : "error"},
                        {"reason", ToString(d.reason)},
                        {"error", d.error},
                        {"durationSeconds", absl::ToDoubleSeconds(d.duration)},
                        {"traceID", d.trace_id}});
  }
  return {{"driver", std::string(driver)},
          {"pool", std::string(pool)},
          {"claims", claims},
          {"recent", outcomes}};
}

}  // namespace dralens::driver::prepare
