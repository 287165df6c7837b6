// The body shared by the JSON codec fuzz targets: decode one kind from arbitrary text and, when
// that succeeds, check that the encoding decodes again and that encoding is a fixed point
// (Encode(Decode(Encode(x))) == Encode(x)). Decode(Encode(x)) == x is not asked for: encoding
// normalises on purpose (times lose sub-second digits, quantities take their canonical form).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/model/codec.h"
#include "tests/fuzz/fuzz_check.h"

namespace dralens::fuzz {

template <typename T>
void FuzzDecode(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<T> decoded = model::DecodeText<T>(text);
  if (!decoded.ok()) {
    FUZZ_CHECK(!decoded.status().message().empty(), "a decode error says why");
    return;
  }
  std::string encoded = model::EncodeText(*decoded);
  absl::StatusOr<T> again = model::DecodeText<T>(encoded);
  FUZZ_CHECK(again.ok(), "the encoding of a decoded object decodes");
  FUZZ_CHECK(model::EncodeText(*again) == encoded, "encoding is a fixed point");
}

}  // namespace dralens::fuzz
