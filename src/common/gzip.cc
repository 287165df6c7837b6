#include "src/common/gzip.h"

#include <zlib.h>

#include "absl/strings/str_cat.h"

namespace dralens::common {

absl::StatusOr<std::string> Gzip(absl::string_view data) {
  z_stream stream{};
  // windowBits 15 + 16 selects the gzip wrapper rather than zlib's. Level 1, as kube-apiserver
  // compresses its responses: on a 21 MB scrape of the cluster role at 100k claims it takes
  // 135 ms for 1.25 MB against 187 ms for 1.03 MB at the default level 6.
  if (deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return absl::InternalError("gzip: deflateInit2 failed");
  }
  std::string out(deflateBound(&stream, data.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&stream, Z_FINISH);
  const size_t written = stream.total_out;
  deflateEnd(&stream);
  if (rc != Z_STREAM_END) {
    return absl::InternalError(absl::StrCat("gzip: deflate returned ", rc));
  }
  out.resize(written);
  return out;
}

}  // namespace dralens::common
