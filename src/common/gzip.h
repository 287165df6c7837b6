// gzip (RFC 1952) compression, shared by the /metrics endpoint and the OTLP exporter.
#pragma once

#include <zlib.h>

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dralens::common {

// The gzip form of `data`, in one call.
absl::StatusOr<std::string> Gzip(absl::string_view data);

// gzip in pieces, for a body that is written as it is produced: Write() compresses what it is
// given and hands the compressed bytes to `emit` as zlib produces them; Finish() ends the stream.
// Same level as Gzip(). An error from zlib, or `emit` returning false (the receiver is gone),
// makes this and every later call fail.
class GzipStream {
 public:
  explicit GzipStream(std::function<bool(absl::string_view)> emit);
  ~GzipStream();
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;

  absl::Status Write(absl::string_view data);
  absl::Status Finish();

 private:
  absl::Status Deflate(absl::string_view data, int flush);

  std::function<bool(absl::string_view)> emit_;
  z_stream stream_{};
  std::string out_;
  absl::Status status_;
  bool initialized_ = false;
  bool finished_ = false;
};

}  // namespace dralens::common
