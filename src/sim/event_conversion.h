// The two faces of an Event. The API server keeps one store of Events and serves it both as
// events.k8s.io/v1 (what dralens writes) and as core/v1 (what `kubectl get events` and
// `kubectl describe` read), converting field by field as kube-apiserver does:
//   regarding <-> involvedObject, note <-> message, reportingController <-> reportingComponent,
//   deprecatedSource <-> source, deprecatedFirstTimestamp <-> firstTimestamp,
//   deprecatedLastTimestamp <-> lastTimestamp, deprecatedCount <-> count;
//   reason, type, action, eventTime, series, related and reportingInstance keep their names.
// Stored objects are in the events.k8s.io/v1 form.
#pragma once

#include "nlohmann/json.hpp"
#include "src/sim/validation.h"

namespace dralens::sim {

// events.k8s.io/v1 (stored) -> core/v1.
nlohmann::json CoreEventFromStorage(const nlohmann::json& stored);
// core/v1 -> events.k8s.io/v1 (stored).
nlohmann::json CoreEventToStorage(const nlohmann::json& core);

// The rules kube-apiserver applies to an events.k8s.io/v1 Event on create (`old` null) and
// update: required eventTime, reportingController, reportingInstance, action and reason;
// note at most 1 kB; type Normal or Warning; series.count >= 2; and, on update, only series
// (and metadata) may change.
FieldErrors EventV1Problems(const nlohmann::json& obj, const nlohmann::json* old);

}  // namespace dralens::sim
