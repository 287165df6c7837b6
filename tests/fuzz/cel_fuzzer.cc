// Fuzzes the CEL subset (src/cel/cel.h): any text compiles or fails with a reason; a compiled
// program evaluates against a fixed GPU device (as driver/slices publishes one) without
// crashing, deterministically, with a runtime error only ever reported as false, and a copy
// of the program gives the same outcome.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/cel/cel.h"
#include "src/common/quantity.h"
#include "src/model/resource.h"
#include "tests/fuzz/fuzz_check.h"

namespace dralens::fuzz {
namespace {

struct FixedDevice {
  std::map<std::string, model::DeviceAttribute> attributes;
  std::map<std::string, model::DeviceCapacity> capacity;

  FixedDevice() {
    using model::DeviceAttribute;
    attributes["type"] = DeviceAttribute::String("gpu");
    attributes["uuid"] = DeviceAttribute::String("GPU-1b2c3d4e");
    attributes["productName"] = DeviceAttribute::String("NVIDIA H100 80GB HBM3");
    attributes["architecture"] = DeviceAttribute::String("Hopper");
    attributes["cudaComputeCapability"] = DeviceAttribute::SemVer("9.0.0");
    attributes["driverVersion"] = DeviceAttribute::SemVer("580.65.6");
    attributes["mig"] = DeviceAttribute::Bool(false);
    attributes["index"] = DeviceAttribute::Int(3);
    attributes["resource.kubernetes.io/pciBusID"] = DeviceAttribute::String("0000:1b:00.0");
    attributes["resource.kubernetes.io/numaNode"] = DeviceAttribute::Int(0);
    capacity["memory"] = model::DeviceCapacity{*common::Quantity::Parse("80Gi"), {}};
    capacity["multiprocessors"] = model::DeviceCapacity{*common::Quantity::Parse("132"), {}};
  }

  cel::DeviceView View() const {
    return cel::DeviceView{"gpu.dralens.dev", &attributes, &capacity};
  }
};

bool Same(const cel::Outcome& a, const cel::Outcome& b) {
  return a.verdict == b.verdict && a.detail == b.detail && a.runtime_error == b.runtime_error;
}

}  // namespace
}  // namespace dralens::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dralens;
  static const fuzz::FixedDevice* device = new fuzz::FixedDevice();
  absl::StatusOr<cel::Program> program =
      cel::Program::Compile(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!program.ok()) {
    FUZZ_CHECK(!program.status().message().empty(), "a compile error says why");
    return 0;
  }
  cel::Outcome outcome = program->Evaluate(device->View());
  FUZZ_CHECK(!outcome.runtime_error || outcome.verdict == cel::Verdict::kFalse,
             "a runtime error is reported as false");
  FUZZ_CHECK(
      outcome.verdict == cel::Verdict::kUnknown || outcome.runtime_error || outcome.detail.empty(),
      "a clean true/false has no detail");
  FUZZ_CHECK(fuzz::Same(outcome, program->Evaluate(device->View())), "evaluation is deterministic");
  cel::Program copy = *program;
  FUZZ_CHECK(fuzz::Same(outcome, copy.Evaluate(device->View())), "a copy evaluates the same");
  return 0;
}
