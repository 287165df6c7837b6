// Fuzzes the checkpoint decoder (driver/prepare/checkpoint.h): arbitrary file contents either
// fail with a reason or decode to a checkpoint that encodes and decodes back to itself. Almost
// every mutation breaks the checksum, so a JSON object input is also decoded a second time with
// its checksum recomputed, which lets the fuzzer reach the body decoder.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "driver/prepare/checkpoint.h"
#include "nlohmann/json.hpp"
#include "src/model/json.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using dralens::driver::prepare::Checkpoint;

void DecodeAndRoundTrip(absl::string_view text) {
  absl::StatusOr<Checkpoint> decoded = dralens::driver::prepare::DecodeCheckpoint(text);
  if (!decoded.ok()) {
    FUZZ_CHECK(!decoded.status().message().empty(), "a decode error says why");
    return;
  }
  std::string encoded = dralens::driver::prepare::EncodeCheckpoint(*decoded);
  absl::StatusOr<Checkpoint> again = dralens::driver::prepare::DecodeCheckpoint(encoded);
  FUZZ_CHECK(again.ok(), "an encoded checkpoint decodes");
  FUZZ_CHECK(*again == *decoded, "the checkpoint round-trips");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  DecodeAndRoundTrip(text);
  absl::StatusOr<nlohmann::json> json = dralens::model::ParseJson(text);
  if (json.ok() && json->is_object()) {
    (*json)["checksum"] = dralens::driver::prepare::CheckpointChecksum(*json);
    DecodeAndRoundTrip(dralens::model::SerializeJson(*json));
  }
  return 0;
}
