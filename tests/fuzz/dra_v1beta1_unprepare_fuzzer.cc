// Fuzzes the DRA service's NodeUnprepareResources (v1beta1) with decoded protos; see dra_fuzz.h.
#include <cstddef>
#include <cstdint>

#include "driver/plugin/dra_service.h"
#include "tests/fuzz/dra_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dralens::driver::plugin;
  dralens::fuzz::FuzzCall(data, size, &DraServiceV1beta1::NodeUnprepareResources);
  return 0;
}
