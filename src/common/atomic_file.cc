#include "src/common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/common/status.h"

namespace dralens::common {
namespace {

// Splits "/a/b/c" into "/a/b" and "c"; "c" into "." and "c".
void SplitPath(const std::string& path, std::string* dir, std::string* base) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) {
    *dir = ".";
    *base = path;
  } else if (slash == 0) {
    *dir = "/";
    *base = path.substr(1);
  } else {
    *dir = path.substr(0, slash);
    *base = path.substr(slash + 1);
  }
}

absl::Status WriteAll(int fd, absl::string_view content, const std::string& path) {
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return ErrnoStatus(errno, "write", path);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status FsyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return ErrnoStatus(errno, "open directory", dir);
  }
  absl::Status status;
  if (::fsync(fd) != 0) {
    status = ErrnoStatus(errno, "fsync directory", dir);
  }
  ::close(fd);
  return status;
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, absl::string_view content, mode_t mode) {
  std::string dir;
  std::string base;
  SplitPath(path, &dir, &base);
  if (base.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("write ", path, ": not a file path"));
  }
  // Hidden, so that directory scanners (e.g. CDI spec loaders) skip half-written files.
  std::string temp = absl::StrCat(dir, "/.", base, ".tmp-XXXXXX");
  std::vector<char> temp_buf(temp.begin(), temp.end());
  temp_buf.push_back('\0');
  const int fd = ::mkostemp(temp_buf.data(), O_CLOEXEC);
  if (fd < 0) {
    return ErrnoStatus(errno, "create temp file for", path);
  }
  temp.assign(temp_buf.data());
  bool fd_open = true;
  bool temp_exists = true;
  absl::Cleanup cleanup = [&] {
    if (fd_open) {
      ::close(fd);
    }
    if (temp_exists) {
      ::unlink(temp.c_str());
    }
  };

  // mkostemp creates 0600; set the requested mode exactly (no umask).
  if (::fchmod(fd, mode) != 0) {
    return ErrnoStatus(errno, "chmod", temp);
  }
  RETURN_IF_ERROR(WriteAll(fd, content, temp));
  if (::fsync(fd) != 0) {
    return ErrnoStatus(errno, "fsync", temp);
  }
  fd_open = false;
  if (::close(fd) != 0) {
    return ErrnoStatus(errno, "close", temp);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    return ErrnoStatus(errno, "rename to", path);
  }
  temp_exists = false;
  // Without this the rename may be lost on power failure even though the data was synced.
  return Annotate(FsyncDirectory(dir), absl::StrCat("write ", path));
}

bool IsAtomicTempName(absl::string_view name, absl::string_view base_prefix) {
  constexpr absl::string_view kMarker = ".tmp-";
  constexpr size_t kRandom = 6;  // mkostemp's XXXXXX
  if (name.size() < 1 + kMarker.size() + kRandom + 1 || name[0] != '.') {
    return false;
  }
  const absl::string_view random = name.substr(name.size() - kRandom);
  for (const char c : random) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  const absl::string_view rest = name.substr(0, name.size() - kRandom);
  if (!absl::EndsWith(rest, kMarker)) {
    return false;
  }
  const absl::string_view base = rest.substr(1, rest.size() - 1 - kMarker.size());
  return !base.empty() && absl::StartsWith(base, base_prefix);
}

TempCleanup RemoveStaleTempFiles(const std::string& dir, absl::string_view base_prefix) {
  TempCleanup out;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) {
    if (ec != std::errc::no_such_file_or_directory) {
      out.errors.push_back(absl::StrCat(dir, ": ", ec.message()));
    }
    return out;
  }
  for (const std::filesystem::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    std::error_code type_ec;
    // symlink_status: a link named like a temp file is not ours to follow or remove.
    if (!IsAtomicTempName(name, base_prefix) ||
        !std::filesystem::is_regular_file(entry.symlink_status(type_ec))) {
      continue;
    }
    const std::string path = entry.path().string();
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      out.errors.push_back(absl::StrCat(path, ": ", ErrnoStatus(errno, "unlink", path).message()));
      continue;
    }
    out.removed.push_back(path);
  }
  if (!out.removed.empty()) {
    if (absl::Status synced = FsyncDirectory(dir); !synced.ok()) {
      out.errors.push_back(std::string(synced.message()));
    }
  }
  std::sort(out.removed.begin(), out.removed.end());
  return out;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return ErrnoStatus(errno, "open", path);
  }
  absl::Cleanup closer = [fd] { ::close(fd); };
  std::string out;
  char buf[64 * 1024];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return ErrnoStatus(errno, "read", path);
    }
    if (n == 0) {
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

absl::Status RemoveFileDurably(const std::string& path) {
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) {
      return absl::OkStatus();
    }
    return ErrnoStatus(errno, "unlink", path);
  }
  std::string dir;
  std::string base;
  SplitPath(path, &dir, &base);
  return Annotate(FsyncDirectory(dir), absl::StrCat("remove ", path));
}

}  // namespace dralens::common
