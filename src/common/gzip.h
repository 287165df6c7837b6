// gzip (RFC 1952) compression, shared by the /metrics endpoint and the OTLP exporter.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dralens::common {

// The gzip form of `data`, in one call.
absl::StatusOr<std::string> Gzip(absl::string_view data);

}  // namespace dralens::common
