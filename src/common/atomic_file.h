// Crash-safe file writes: readers see either the old file or the complete new one, never a torn
// or empty file, and a completed write survives power loss.
//
// Thread-safety: every function may be called concurrently, also for the same path (the last
// rename wins; each temp file has a unique name).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

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

// The temp files WriteFileAtomically leaves behind when the process dies mid-write are named
// `.<base>.tmp-XXXXXX` (mkostemp's six letters and digits) next to `<base>`.
// Whether `name` (a file name, no directory) is one of them for a `<base>` starting with
// `base_prefix` ("" for any base).
bool IsAtomicTempName(absl::string_view name, absl::string_view base_prefix = "");

// What RemoveStaleTempFiles did.
struct TempCleanup {
  std::vector<std::string> removed;  // full paths
  std::vector<std::string> errors;   // "path: reason" for temp files that could not go
};

// Removes the regular files directly in `dir` for which IsAtomicTempName(name, base_prefix)
// holds; everything else (other names, directories, links) is left alone. Only safe while no
// writer in this process or another one writes such files in `dir`, i.e. at start-up. A
// missing directory is an empty result.
TempCleanup RemoveStaleTempFiles(const std::string& dir, absl::string_view base_prefix = "");

// Reads the whole file. NotFound if it does not exist.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Unlinks `path` and fsyncs its directory. A missing file is OK (idempotent).
absl::Status RemoveFileDurably(const std::string& path);

}  // namespace dralens::common
