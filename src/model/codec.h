// JSON codecs for the resource.k8s.io/v1 kinds and the core/v1 parts dralens uses.
//
// Decoding is forward compatible and type strict: unknown fields are ignored (a newer API
// server may send more), JSON null reads as "unset", but a field of the wrong type is an
// InvalidArgument error naming its JSON path, e.g.
//   decode ResourceSlice: spec.devices[3].attributes["uuid"]: expected object, got number
// The API's exactly-one-of rules are enforced for DeviceAttribute (int|bool|string|version)
// and DeviceRequest (exactly|firstAvailable). A present apiVersion/kind must match the type.
// Integers must be JSON integers within int64; quantities may be strings or numbers.
//
// Encoding emits apiVersion and kind, omits unset optionals and empty lists/maps/strings like
// Go's omitempty (required fields are always written), writes quantities as canonical
// strings, int64 as JSON numbers and times as RFC 3339 UTC with second precision. The output
// validates against the official OpenAPI document (tests/schema/validate_openapi.py).
//
// Nothing here throws. All functions are thread-safe.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "src/model/core.h"
#include "src/model/json.h"
#include "src/model/resource.h"

namespace dralens::model {

// Decode<T> is defined for ResourceSlice, ResourceClaim, DeviceClass, ResourceClaimTemplate,
// Pod, Node and their ObjectList<T> forms (ResourceSliceList, ...).
template <typename T>
absl::StatusOr<T> Decode(const nlohmann::json& json);

// Device `index` of a ResourceSlice's spec.devices, decoded on its own (for a consumer that
// decodes a slice's devices lazily); an error reads as Decode<ResourceSlice> reports it, e.g.
//   decode ResourceSlice: spec.devices[3].attributes["uuid"]: expected object, got number
absl::StatusOr<SliceDevice> DecodeSliceDevice(const nlohmann::json& json, size_t index);

nlohmann::json Encode(const ResourceSlice& slice);
nlohmann::json Encode(const ResourceClaim& claim);
nlohmann::json Encode(const DeviceClass& device_class);
nlohmann::json Encode(const ResourceClaimTemplate& tmpl);
nlohmann::json Encode(const Pod& pod);
nlohmann::json Encode(const Node& node);
nlohmann::json Encode(const ObjectMeta& metadata);

// ParseJson + Decode<T> with the default limits.
template <typename T>
absl::StatusOr<T> DecodeText(absl::string_view text) {
  absl::StatusOr<nlohmann::json> json = ParseJson(text);
  if (!json.ok()) {
    return json.status();
  }
  return Decode<T>(*json);
}

// SerializeJson(Encode(object)).
template <typename T>
std::string EncodeText(const T& object) {
  return SerializeJson(Encode(object));
}

// Times as metav1.Time writes them: "2025-01-02T03:04:05Z".
std::string FormatKubeTime(absl::Time time);
// Accepts any RFC 3339 timestamp (fractional seconds and offsets included).
absl::StatusOr<absl::Time> ParseKubeTime(absl::string_view text);

}  // namespace dralens::model
