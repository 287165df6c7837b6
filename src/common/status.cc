#include "src/common/status.h"

#include <cstring>

namespace dralens::common {

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok() || context.empty()) {
    return status;
  }
  absl::Status annotated(status.code(), absl::StrCat(context, ": ", status.message()));
  // Payloads (the HTTP status behind an API error, a failure reason) survive the annotation.
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    annotated.SetPayload(url, payload);
  });
  return annotated;
}

absl::Status ErrnoStatus(int err, absl::string_view op, absl::string_view path) {
  std::string message = path.empty() ? std::string(op) : absl::StrCat(op, " ", path);
  absl::StrAppend(&message, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EEXIST:
      return absl::AlreadyExistsError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EINVAL:
    case ENAMETOOLONG:
      return absl::InvalidArgumentError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    case EAGAIN:
    case EINTR:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace dralens::common
