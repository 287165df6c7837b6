// Bounded, non-throwing JSON parsing and serialization for everything that crosses a trust
// boundary (API server responses, kubelet requests, files).
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace dralens::model {

// Defaults sized for Kubernetes objects: the API server's own request limit is 3 MiB per object,
// lists can be larger; nesting in resource.k8s.io objects is below 20 levels plus opaque
// parameters.
inline constexpr size_t kDefaultMaxJsonBytes = 64u << 20;
inline constexpr int kDefaultMaxJsonDepth = 128;

// Parses one JSON document. Never throws. Returns InvalidArgument when `text` is longer than
// `max_bytes`, nests objects/arrays deeper than `max_depth` (checked while parsing, before any
// deep tree is built, so hostile input cannot exhaust the stack), is not valid JSON or not valid
// UTF-8, repeats a key within one object, or has trailing content. Numbers that do not fit an
// int64/uint64 become doubles; non-finite ones are errors.
absl::StatusOr<nlohmann::json> ParseJson(absl::string_view text,
                                         size_t max_bytes = kDefaultMaxJsonBytes,
                                         int max_depth = kDefaultMaxJsonDepth);

// Compact serialization. Never throws: invalid UTF-8 in strings is replaced by U+FFFD.
std::string SerializeJson(const nlohmann::json& value);

}  // namespace dralens::model
