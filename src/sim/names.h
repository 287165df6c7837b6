// Syntax checks for Kubernetes names, label keys/values and quantities.
//
// Each check returns the list of problems in the wording the real API server uses ("a lowercase
// RFC 1123 label must consist of ..."); an empty list means valid. Pure functions.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace dralens::sim {

inline constexpr size_t kDnsLabelMaxLength = 63;
inline constexpr size_t kDnsSubdomainMaxLength = 253;
inline constexpr size_t kCIdentifierMaxLength = 32;  // DRA attribute/capacity identifiers

std::vector<std::string> CheckDnsLabel(absl::string_view value);
std::vector<std::string> CheckDnsSubdomain(absl::string_view value);
std::vector<std::string> CheckCIdentifier(absl::string_view value);
// A label key or other qualified name: `[prefix/]name`, prefix a DNS subdomain, name ≤ 63 of
// [A-Za-z0-9_.-] starting and ending alphanumeric.
std::vector<std::string> CheckQualifiedName(absl::string_view value);
std::vector<std::string> CheckLabelValue(absl::string_view value);
// A generateName prefix: valid once a suffix is appended (trailing '-' or '.' allowed).
std::vector<std::string> CheckNamePrefix(absl::string_view value, bool dns_label);

// The strict syntax of a resource.Quantity string: sign, digits with optional fraction, and
// one optional suffix (binary Ki..Ei, decimal n u m k M G T P E, or an exponent e/E±N).
bool IsQuantity(absl::string_view value);

// Semantic Versioning 2.0.0 (no leading 'v').
bool IsSemver(absl::string_view value);

}  // namespace dralens::sim
