// Fuzzes Quantity::Parse (src/common/quantity.h) and the properties the header promises:
// Parse(q.String()) == q, and Add/Sub either report overflow without changing the value or undo
// each other. The input is "<a>" or "<a>|<b>". The canonical string is not always a fixed point
// after one step, in Kubernetes too: a BinarySI value that is no whole multiple of 1024 renders
// without a suffix ("576460752303424000") and reads back as DecimalSI ("576460752303424k"). It
// is one after two.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/common/quantity.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using dralens::common::Quantity;

void CheckOne(const Quantity& q) {
  std::string canonical = q.String();
  absl::StatusOr<Quantity> again = Quantity::Parse(canonical);
  FUZZ_CHECK(again.ok(), "the canonical string parses");
  FUZZ_CHECK(*again == q, "Parse(q.String()) == q");
  std::string second = again->String();
  absl::StatusOr<Quantity> third = Quantity::Parse(second);
  FUZZ_CHECK(third.ok() && third->String() == second, "the canonical string settles in two steps");
  FUZZ_CHECK(q.Negated().Negated() == q, "negation is an involution");
  FUZZ_CHECK(q.Negated().Sign() == -q.Sign(), "negation flips the sign");
  (void)q.Value();
  (void)q.MilliValue();
  (void)q.AsApproximateDouble();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::string_view second;
  bool pair = false;
  if (size_t bar = text.find('|'); bar != absl::string_view::npos) {
    second = text.substr(bar + 1);
    text = text.substr(0, bar);
    pair = true;
  }
  absl::StatusOr<Quantity> a = Quantity::Parse(text);
  if (!a.ok()) {
    FUZZ_CHECK(!a.status().message().empty(), "a parse error says why");
    return 0;
  }
  CheckOne(*a);
  if (!pair) {
    return 0;
  }
  absl::StatusOr<Quantity> b = Quantity::Parse(second);
  if (!b.ok()) {
    return 0;
  }
  CheckOne(*b);
  FUZZ_CHECK(a->Compare(*b) == -b->Compare(*a), "Compare is antisymmetric");
  Quantity sum = *a;
  if (sum.Add(*b).ok()) {
    CheckOne(sum);
    FUZZ_CHECK(sum.Sub(*b).ok(), "subtracting what was added fits");
    FUZZ_CHECK(sum == *a, "Sub undoes Add");
  } else {
    FUZZ_CHECK(sum == *a && sum.format() == a->format(), "a failed Add changes nothing");
  }
  Quantity difference = *a;
  if (!difference.Sub(*b).ok()) {
    FUZZ_CHECK(difference == *a, "a failed Sub changes nothing");
  }
  return 0;
}
