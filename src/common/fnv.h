// FNV-1a 64: a hash that is the same in every process and on every machine (absl::Hash is
// seeded per process). For checksums written to disk and for orders that must not change from
// run to run.
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"

namespace dralens::common {

// FNV-1a 64 of `data` (offset 0xcbf29ce484222325, prime 0x100000001b3).
uint64_t Fnv1a64(absl::string_view data);

}  // namespace dralens::common
