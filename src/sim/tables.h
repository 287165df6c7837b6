// Server-side printing: the meta.k8s.io/v1 Table that `kubectl get` asks for (Accept:
// application/json;as=Table). Only core/v1 Events have columns of their own here, as
// kube-apiserver prints them (LAST SEEN, TYPE, REASON, OBJECT, MESSAGE, and SUBOBJECT, SOURCE,
// FIRST SEEN, COUNT, NAME with -o wide); other resources answer in plain JSON, which kubectl
// prints as NAME and AGE.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace dralens::sim {

// Whether an Accept header asks for a meta.k8s.io/v1 Table.
bool WantsTable(absl::string_view accept);

// The Table of core/v1 Events `body` (an EventList or one Event, as the client sees it).
// `include_object` is the includeObject parameter: "None", "Object", or "Metadata" (default).
nlohmann::json EventTable(const nlohmann::json& body, absl::Time now,
                          absl::string_view include_object);

// kubectl's short ages: "45s", "3m20s", "2h5m", "3d".
std::string HumanDuration(absl::Duration d);

}  // namespace dralens::sim
