// Inflates a gzip body in tests; "" when it is not valid gzip.
#pragma once

#include <zlib.h>

#include <string>

namespace dralens::testing {

inline std::string Gunzip(const std::string& data) {
  z_stream stream{};
  if (inflateInit2(&stream, 15 + 16) != Z_OK) {
    return "";
  }
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buffer[16384];
  int rc;
  do {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof(buffer);
    rc = inflate(&stream, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&stream);
      return "";
    }
    out.append(buffer, sizeof(buffer) - stream.avail_out);
  } while (rc != Z_STREAM_END);
  inflateEnd(&stream);
  return out;
}

}  // namespace dralens::testing
