#include "src/common/fnv.h"

namespace dralens::common {

uint64_t Fnv1a64(absl::string_view data) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const unsigned char c : data) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace dralens::common
