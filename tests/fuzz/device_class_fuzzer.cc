// Fuzzes the DeviceClass JSON decoder (src/model/codec.h) and the encode/decode round trip.
#include <cstddef>
#include <cstdint>

#include "src/model/codec.h"
#include "tests/fuzz/codec_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dralens::fuzz::FuzzDecode<dralens::model::DeviceClass>(data, size);
  return 0;
}
