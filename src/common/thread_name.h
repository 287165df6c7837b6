// Names the calling thread, as `top -H`, `ps -L`, /proc/<pid>/task/<tid>/comm, perf and gdb
// show it. Linux keeps 15 bytes of a name; a longer one is cut there.
#pragma once

#include "absl/strings/string_view.h"

namespace dralens::common {

void NameThisThread(absl::string_view name);

}  // namespace dralens::common
