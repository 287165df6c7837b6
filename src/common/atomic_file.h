// Crash-safe file writes: readers see either the old file or the complete new one, never a torn
// or empty file, and a completed write survives power loss.
//
// Thread-safety: every function may be called concurrently, also for the same path (the last
// rename wins; each temp file has a unique name).
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dralens::common {

// Writes `content` to `path` atomically: a uniquely named temp file in the same directory
// (opened O_CLOEXEC|O_EXCL with `mode`), a full write loop, fsync, rename over `path`, then fsync
// of the directory so that the rename itself is durable. On any failure the temp file is removed
// and `path` is left as it was. The directory must exist.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view content,
                                 mode_t mode = 0644);

// Reads the whole file. NotFound if it does not exist.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Unlinks `path` and fsyncs its directory. A missing file is OK (idempotent).
absl::Status RemoveFileDurably(const std::string& path);

}  // namespace dralens::common
