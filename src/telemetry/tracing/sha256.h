// SHA-256 (FIPS 180-4), small and dependency-free: the tracing library derives trace ids from
// claim UIDs and must not pull OpenSSL in for one hash.
#pragma once

#include <array>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace dralens::telemetry {

using Sha256Digest = std::array<uint8_t, 32>;

// The SHA-256 digest of `data`. Pure and thread-safe.
Sha256Digest Sha256(absl::string_view data);

}  // namespace dralens::telemetry
