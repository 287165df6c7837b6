// Status helpers: early-return macros and context annotation.
//
// Every expected failure in dralens is an absl::Status. Each layer adds what it was doing,
// outermost first, so a log line reads "prepare claim ns/name: write checkpoint: fsync: EIO".
#pragma once

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dralens::common {

// Returns `status` with "<context>: " prepended to its message. The code and the payloads are
// kept. OK stays OK.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

template <typename T>
absl::StatusOr<T> Annotate(absl::StatusOr<T> result, absl::string_view context) {
  if (result.ok()) {
    return result;
  }
  return Annotate(result.status(), context);
}

// Builds a status from errno with the failing operation and path, e.g.
// ErrnoStatus(errno, "open", "/var/run/cdi/x.json") -> "open /var/run/cdi/x.json: No such file".
absl::Status ErrnoStatus(int err, absl::string_view op, absl::string_view path = "");

// The message of a status as a std::string (absl::string_view is not std::string_view here).
inline std::string Message(const absl::Status& status) { return std::string(status.message()); }

}  // namespace dralens::common

#define DRALENS_STATUS_CONCAT_INNER_(a, b) a##b
#define DRALENS_STATUS_CONCAT_(a, b) DRALENS_STATUS_CONCAT_INNER_(a, b)

// RETURN_IF_ERROR(expr): returns the status of `expr` if it is not OK.
#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    const ::absl::Status dralens_status_ = (expr); \
    if (!dralens_status_.ok()) {                   \
      return dralens_status_;                      \
    }                                              \
  } while (false)

// RETURN_IF_ERROR_CTX(expr, context): as above, annotated with `context`.
#define RETURN_IF_ERROR_CTX(expr, context)                            \
  do {                                                                \
    const ::absl::Status dralens_status_ = (expr);                    \
    if (!dralens_status_.ok()) {                                      \
      return ::dralens::common::Annotate(dralens_status_, (context)); \
    }                                                                 \
  } while (false)

// ASSIGN_OR_RETURN(lhs, expr): evaluates the StatusOr `expr`; on error returns its status,
// otherwise moves the value into `lhs` (which may be a declaration: `auto x`).
#define ASSIGN_OR_RETURN(lhs, expr) \
  DRALENS_ASSIGN_OR_RETURN_IMPL_(DRALENS_STATUS_CONCAT_(dralens_statusor_, __LINE__), lhs, expr)

#define DRALENS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) {                                     \
    return tmp.status();                               \
  }                                                    \
  lhs = std::move(tmp).value()
