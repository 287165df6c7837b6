// Quantity: an exact Kubernetes resource.Quantity ("40Gi", "1500m", "1e3").
//
// The value is held as a signed count of nano-units in a 128-bit integer, so every quantity the
// API server can hold is represented exactly: Kubernetes rounds every non-zero value up (away
// from zero) to a whole nano-unit and caps magnitudes at 2^63-1 units. Where Kubernetes would cap
// silently, Parse() returns an OutOfRange error that names the input instead ("8Ei" and
// "999999999999999999999" are rejected), and Add()/Sub() report overflow the same way.
//
// String() renders the canonical form Kubernetes serializes, keeping the format of the input:
//   BinarySI         "1024Mi" -> "1Gi", "1.5Gi" -> "1536Mi", "0.5Ki" -> "512"
//   DecimalSI        "1000" -> "1k", "1.5" -> "1500m", "0.1" -> "100m", "1n" stays "1n"
//   DecimalExponent  "1e3" -> "1e3", "1.5e3" -> "1500", "1E-3" -> "1e-3"
// Parse(q.String()) == q for every quantity.
//
// Thread-safety: a plain value type; const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dralens::common {

class Quantity {
 public:
  // How String() renders the value; taken from the suffix of the parsed input.
  enum class Format { kDecimalSI, kBinarySI, kDecimalExponent };

  // Zero, DecimalSI.
  Quantity() = default;

  // Parses any form the Kubernetes API server accepts: an optionally signed decimal number
  // ("1", "-2", "+3", "1.5", ".5", "1.") followed by an optional suffix: DecimalSI
  // (n u m k M G T P E), BinarySI (Ki Mi Gi Ti Pi Ei) or a decimal exponent (e3, E-3, e+2).
  // Errors (InvalidArgument, or OutOfRange for magnitudes above 2^63-1) quote the input, e.g.
  // `quantity "12Q": unknown suffix "Q"`.
  static absl::StatusOr<Quantity> Parse(absl::string_view text);

  // value * 10^scale units, e.g. FromScaled(1500, -3) is 1.5. Values finer than a nano-unit are
  // rounded up (away from zero), as Kubernetes does. OutOfRange if |value| exceeds 2^63-1 units.
  static absl::StatusOr<Quantity> FromScaled(int64_t value, int scale,
                                             Format format = Format::kDecimalSI);
  // Whole units; always representable.
  static Quantity FromInt64(int64_t value, Format format = Format::kDecimalSI);
  static Quantity FromMilli(int64_t milli, Format format = Format::kDecimalSI);

  // Canonical Kubernetes serialization (see the file comment).
  std::string String() const;

  // The value in whole units, rounded up away from zero (Kubernetes Value()). Never overflows.
  int64_t Value() const;
  // The value in thousandths, rounded up away from zero (Kubernetes MilliValue()). Saturates at
  // the int64 limits, which Kubernetes leaves undefined.
  int64_t MilliValue() const;
  // The nearest double (exact for small values).
  double AsApproximateDouble() const;

  Format format() const { return format_; }
  bool IsZero() const { return nanos_ == 0; }
  // -1, 0 or 1.
  int Sign() const { return nanos_ < 0 ? -1 : (nanos_ > 0 ? 1 : 0); }

  // -1, 0, 1 as the value of *this is less than, equal to or greater than `other`'s. The format
  // does not take part: "1Ki" equals "1024".
  int Compare(const Quantity& other) const;

  // In-place arithmetic, like Kubernetes' Add/Sub: the result keeps this quantity's format
  // unless this quantity is zero, in which case it takes `other`'s. OutOfRange (and no change)
  // if the result's magnitude would exceed 2^63-1 units.
  absl::Status Add(const Quantity& other);
  absl::Status Sub(const Quantity& other);
  // Returns the value with the sign flipped; never overflows.
  Quantity Negated() const;

  friend bool operator==(const Quantity& a, const Quantity& b) { return a.nanos_ == b.nanos_; }
  friend bool operator!=(const Quantity& a, const Quantity& b) { return a.nanos_ != b.nanos_; }
  friend bool operator<(const Quantity& a, const Quantity& b) { return a.nanos_ < b.nanos_; }
  friend bool operator<=(const Quantity& a, const Quantity& b) { return a.nanos_ <= b.nanos_; }
  friend bool operator>(const Quantity& a, const Quantity& b) { return a.nanos_ > b.nanos_; }
  friend bool operator>=(const Quantity& a, const Quantity& b) { return a.nanos_ >= b.nanos_; }

  // For gtest and logs: the canonical string.
  friend std::ostream& operator<<(std::ostream& os, const Quantity& q) { return os << q.String(); }

 private:
  __extension__ using Int128 = __int128;
  Quantity(Int128 nanos, Format format) : nanos_(nanos), format_(format) {}

  Int128 nanos_ = 0;
  Format format_ = Format::kDecimalSI;
};

absl::string_view ToString(Quantity::Format format);

}  // namespace dralens::common
