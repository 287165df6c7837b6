// What /debug/claims shows about a node's claims: the checkpoint (state, devices, CDI ids) and
// the latest outcomes with their reasons, durations and trace ids. Pure.
#pragma once

#include <vector>

#include "absl/strings/string_view.h"
#include "driver/prepare/checkpoint.h"
#include "driver/prepare/decision_log.h"
#include "nlohmann/json.hpp"

namespace dralens::driver::prepare {

nlohmann::json DebugClaims(const Checkpoint& checkpoint,
                           const std::vector<DecisionLog::Decision>& recent,
                           absl::string_view driver, absl::string_view pool);

}  // namespace dralens::driver::prepare
