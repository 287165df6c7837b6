#include "src/common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
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
