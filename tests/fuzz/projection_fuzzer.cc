// Fuzzes projected parsing (src/k8s/projection.h) against nlohmann::json's full parse.
//
// The first byte of the input picks a projection (the whole value; a Pod's fields as the cluster
// role keeps them; a LIST page, Fields({metadata whole, items: the Pod's fields}); a watch event
// line, Fields({type whole, object: the Pod's fields}); a few short names, which mutations reach
// more easily than "resourceClaimStatuses"), by its value modulo 5: 'A' whole, 'B' Pod, 'C' LIST
// page, 'D' watch event, 'E' short names, as the seeds in corpus/projection/ begin. The rest is
// the text. Properties:
//  - when nlohmann::json::parse accepts the text, ParseProjected accepts it too and returns
//    Project(full parse, projection): the cluster role sees what it would have seen without the
//    projection;
//  - under the whole projection ParseProjected accepts exactly what nlohmann accepts;
//  - what ParseProjected returns is a fixed point of Project (it kept nothing it was not asked
//    for), whether or not nlohmann accepts the text.
// "Accepts" means valid JSON: nlohmann::json::parse accepts it and it holds no NUL byte (which
// nlohmann takes for the end of its input). ParseProjected may accept text that nlohmann rejects,
// but only where the invalid part is inside a value the projection skips: skipped values are
// checked for their structure (brackets, strings, UTF-8), not for the spelling of their numbers
// and literals (src/k8s/projection.h). The properties above pin that down for the whole projection
// only; for the others the unit tests (tests/src/k8s/projection_test.cc) do, case by case. It must
// never crash, read out of bounds or leak, which ASan and UBSan check.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "src/k8s/projection.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using dralens::k8s::Projection;
using nlohmann::json;

Projection PodFields() {
  return Projection::Paths(
      {"apiVersion", "kind", "metadata.name", "metadata.namespace", "metadata.uid",
       "metadata.resourceVersion", "metadata.labels", "spec.nodeName", "spec.resourceClaims",
       "spec.workloadRef", "spec.containers.name", "status.phase", "status.resourceClaimStatuses"});
}

const Projection& Pick(uint8_t selector) {
  static const Projection kWhole;
  static const Projection kPod = PodFields();
  static const Projection kList =
      Projection::Fields({{"metadata", Projection()}, {"items", PodFields()}});
  static const Projection kWatch =
      Projection::Fields({{"type", Projection()}, {"object", PodFields()}});
  static const Projection kShort = Projection::Paths({"a", "b.c", "b.d.e", ""});
  static const Projection* const kAll[] = {&kWhole, &kPod, &kList, &kWatch, &kShort};
  return *kAll[selector % (sizeof(kAll) / sizeof(kAll[0]))];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  const Projection& projection = Pick(data[0]);
  const absl::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  const json full = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  // nlohmann takes a NUL byte for the end of its input ("1\0garbage" is 1); a NUL is never
  // valid JSON, so text with one is not valid whatever nlohmann says.
  const bool accepted = !full.is_discarded() && text.find('\0') == absl::string_view::npos;

  absl::StatusOr<json> got = dralens::k8s::ParseProjected(text, projection);
  if (accepted) {
    FUZZ_CHECK(got.ok(), "text that a full parse accepts parses projected");
    FUZZ_CHECK(*got == dralens::k8s::Project(full, projection),
               "the projected parse equals the projection of the full parse");
  }
  if (got.ok()) {
    FUZZ_CHECK(dralens::k8s::Project(*got, projection) == *got,
               "a projected parse keeps only what the projection names");
  } else {
    FUZZ_CHECK(!got.status().message().empty(), "a parse error says why");
  }

  absl::StatusOr<json> whole = dralens::k8s::ParseProjected(text, Projection());
  FUZZ_CHECK(whole.ok() == accepted, "the whole projection accepts what a full parse accepts");
  if (accepted) {
    FUZZ_CHECK(*whole == full, "the whole projection equals the full parse");
  }
  return 0;
}
