#include "src/common/quantity.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace dralens::common {
namespace {

__extension__ using Int128 = __int128;
__extension__ using UInt128 = unsigned __int128;

constexpr int64_t kNanosPerUnit = 1000000000;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// Kubernetes caps every quantity at 2^63-1 units; here that is the largest accepted magnitude.
constexpr Int128 kMaxNanos = static_cast<Int128>(kInt64Max) * kNanosPerUnit;
// Digits of kMaxNanos (9223372036854775807000000000): 28.
constexpr size_t kMaxNanosDigits = 28;

constexpr absl::string_view kBinarySuffixes[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};

struct SuffixInfo {
  absl::string_view suffix;
  Quantity::Format format;
  int exp10;
  int exp2;
};

constexpr SuffixInfo kSuffixes[] = {
    {"n", Quantity::Format::kDecimalSI, -9, 0}, {"u", Quantity::Format::kDecimalSI, -6, 0},
    {"m", Quantity::Format::kDecimalSI, -3, 0}, {"k", Quantity::Format::kDecimalSI, 3, 0},
    {"M", Quantity::Format::kDecimalSI, 6, 0},  {"G", Quantity::Format::kDecimalSI, 9, 0},
    {"T", Quantity::Format::kDecimalSI, 12, 0}, {"P", Quantity::Format::kDecimalSI, 15, 0},
    {"E", Quantity::Format::kDecimalSI, 18, 0}, {"Ki", Quantity::Format::kBinarySI, 0, 10},
    {"Mi", Quantity::Format::kBinarySI, 0, 20}, {"Gi", Quantity::Format::kBinarySI, 0, 30},
    {"Ti", Quantity::Format::kBinarySI, 0, 40}, {"Pi", Quantity::Format::kBinarySI, 0, 50},
    {"Ei", Quantity::Format::kBinarySI, 0, 60},
};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

Int128 Abs(Int128 v) { return v < 0 ? -v : v; }

std::string Int128ToString(Int128 value) {
  if (value == 0) {
    return "0";
  }
  const bool negative = value < 0;
  UInt128 magnitude = negative ? static_cast<UInt128>(-(value + 1)) + 1 : value;
  std::string out;
  while (magnitude > 0) {
    out.push_back(static_cast<char>('0' + static_cast<int>(magnitude % 10)));
    magnitude /= 10;
  }
  if (negative) {
    out.push_back('-');
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// Quotes user input for an error message, shortened so a hostile 50 MB string stays readable.
std::string QuoteInput(absl::string_view text) {
  constexpr size_t kMaxShown = 64;
  if (text.size() <= kMaxShown) {
    return absl::StrCat("\"", absl::CHexEscape(text), "\"");
  }
  return absl::StrCat("\"", absl::CHexEscape(text.substr(0, kMaxShown)), "\"... (", text.size(),
                      " bytes)");
}

absl::Status OutOfRange(absl::string_view what) {
  return absl::OutOfRangeError(
      absl::StrCat(what, ": magnitude exceeds the Kubernetes quantity limit of ", kInt64Max));
}

// Multiplies a big-endian decimal digit string in place by a small factor.
void MultiplyDigits(std::vector<uint8_t>& digits, uint32_t factor) {
  uint64_t carry = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    const uint64_t v = static_cast<uint64_t>(*it) * factor + carry;
    *it = static_cast<uint8_t>(v % 10);
    carry = v / 10;
  }
  while (carry > 0) {
    digits.insert(digits.begin(), static_cast<uint8_t>(carry % 10));
    carry /= 10;
  }
}

}  // namespace

absl::string_view ToString(Quantity::Format format) {
  switch (format) {
    case Quantity::Format::kDecimalSI:
      return "DecimalSI";
    case Quantity::Format::kBinarySI:
      return "BinarySI";
    case Quantity::Format::kDecimalExponent:
      return "DecimalExponent";
  }
  return "DecimalSI";
}

absl::StatusOr<Quantity> Quantity::Parse(absl::string_view text) {
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("quantity ", QuoteInput(text), ": ", why));
  };
  if (text.empty()) {
    return invalid("empty string");
  }

  size_t pos = 0;
  bool negative = false;
  if (text[pos] == '+' || text[pos] == '-') {
    negative = text[pos] == '-';
    ++pos;
  }
  const size_t int_start = pos;
  while (pos < text.size() && IsDigit(text[pos])) {
    ++pos;
  }
  const absl::string_view int_digits = text.substr(int_start, pos - int_start);
  absl::string_view frac_digits;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    const size_t frac_start = pos;
    while (pos < text.size() && IsDigit(text[pos])) {
      ++pos;
    }
    frac_digits = text.substr(frac_start, pos - frac_start);
  }
  if (int_digits.empty() && frac_digits.empty()) {
    return invalid("expected a number");
  }

  // The suffix: empty, one of the SI/binary suffixes, or a decimal exponent [eE][+-]?[0-9]+.
  const absl::string_view suffix = text.substr(pos);
  Format format = Format::kDecimalSI;
  int64_t exp10 = 0;
  int exp2 = 0;
  bool known = suffix.empty();
  for (const SuffixInfo& info : kSuffixes) {
    if (suffix == info.suffix) {
      format = info.format;
      exp10 = info.exp10;
      exp2 = info.exp2;
      known = true;
      break;
    }
  }
  if (!known && suffix.size() > 1 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    absl::string_view exp_text = suffix.substr(1);
    bool exp_negative = false;
    if (!exp_text.empty() && (exp_text[0] == '+' || exp_text[0] == '-')) {
      exp_negative = exp_text[0] == '-';
      exp_text.remove_prefix(1);
    }
    if (!exp_text.empty() && std::all_of(exp_text.begin(), exp_text.end(), IsDigit)) {
      // Kubernetes reads the exponent as an int32.
      const size_t first = std::min(exp_text.find_first_not_of('0'), exp_text.size());
      exp_text.remove_prefix(first);
      int64_t value = 0;
      if (exp_text.size() > 10) {
        return invalid(absl::StrCat("exponent out of range in suffix \"",
                                    absl::CHexEscape(suffix.substr(0, 32)), "\""));
      }
      for (char c : exp_text) {
        value = value * 10 + (c - '0');
      }
      if (exp_negative) {
        value = -value;
      }
      if (value > std::numeric_limits<int32_t>::max() ||
          value < std::numeric_limits<int32_t>::min()) {
        return invalid(absl::StrCat("exponent out of range in suffix \"", suffix, "\""));
      }
      format = Format::kDecimalExponent;
      exp10 = value;
      known = true;
    }
  }
  if (!known) {
    return invalid(absl::StrCat("unknown suffix \"", absl::CHexEscape(suffix.substr(0, 32)),
                                suffix.size() > 32 ? "\"..." : "\""));
  }

  // All significant digits, without leading zeros.
  std::vector<uint8_t> digits;
  digits.reserve(int_digits.size() + frac_digits.size() + 20);
  for (absl::string_view part : {int_digits, frac_digits}) {
    for (char c : part) {
      if (digits.empty() && c == '0') {
        continue;
      }
      digits.push_back(static_cast<uint8_t>(c - '0'));
    }
  }
  if (digits.empty()) {
    return Quantity(0, format);
  }

  // value = digits * 2^exp2 * 10^(exp10 - |frac|); in nano-units shift the exponent by 9.
  for (int i = 0; i < exp2; i += 10) {
    MultiplyDigits(digits, 1024);
  }
  const int64_t shift = exp10 - static_cast<int64_t>(frac_digits.size()) + 9;
  bool round_up = false;
  if (shift >= 0) {
    if (static_cast<int64_t>(digits.size()) + shift > static_cast<int64_t>(kMaxNanosDigits)) {
      return OutOfRange(absl::StrCat("quantity ", QuoteInput(text)));
    }
    digits.insert(digits.end(), static_cast<size_t>(shift), 0);
  } else {
    // Drop the digits finer than a nano-unit; any non-zero one rounds the value up.
    const uint64_t drop = static_cast<uint64_t>(-shift);
    if (drop >= digits.size()) {
      digits.clear();
      round_up = true;
    } else {
      const size_t keep = digits.size() - static_cast<size_t>(drop);
      round_up = std::any_of(digits.begin() + static_cast<std::ptrdiff_t>(keep), digits.end(),
                             [](uint8_t d) { return d != 0; });
      digits.resize(keep);
    }
  }
  if (digits.size() > kMaxNanosDigits) {
    return OutOfRange(absl::StrCat("quantity ", QuoteInput(text)));
  }
  Int128 nanos = 0;
  for (uint8_t d : digits) {
    nanos = nanos * 10 + d;
  }
  if (round_up) {
    ++nanos;
  }
  if (nanos > kMaxNanos) {
    return OutOfRange(absl::StrCat("quantity ", QuoteInput(text)));
  }
  // Kubernetes shows binary values strictly between 0 and 1 as DecimalSI to avoid rounding.
  if (format == Format::kBinarySI && nanos < kNanosPerUnit) {
    format = Format::kDecimalSI;
  }
  return Quantity(negative ? -nanos : nanos, format);
}

absl::StatusOr<Quantity> Quantity::FromScaled(int64_t value, int scale, Format format) {
  const int64_t shift = static_cast<int64_t>(scale) + 9;
  Int128 nanos = value;
  if (value == 0) {
    return Quantity(0, format);
  }
  if (shift >= 0) {
    for (int64_t i = 0; i < shift; ++i) {
      nanos *= 10;
      if (Abs(nanos) > kMaxNanos) {
        return OutOfRange(absl::StrCat("quantity ", value, "e", scale));
      }
    }
  } else {
    bool round_up = false;
    for (int64_t i = 0; i < -shift && nanos != 0; ++i) {
      round_up = round_up || nanos % 10 != 0;
      nanos /= 10;
    }
    if (round_up) {
      nanos += value < 0 ? -1 : 1;
    }
  }
  if (Abs(nanos) > kMaxNanos) {
    return OutOfRange(absl::StrCat("quantity ", value, "e", scale));
  }
  if (format == Format::kBinarySI && Abs(nanos) < kNanosPerUnit) {
    format = Format::kDecimalSI;
  }
  return Quantity(nanos, format);
}

Quantity Quantity::FromInt64(int64_t value, Format format) {
  return Quantity(static_cast<Int128>(value) * kNanosPerUnit, format);
}

Quantity Quantity::FromMilli(int64_t milli, Format format) {
  const Int128 nanos = static_cast<Int128>(milli) * 1000000;
  if (format == Format::kBinarySI && Abs(nanos) < kNanosPerUnit) {
    format = Format::kDecimalSI;
  }
  return Quantity(nanos, format);
}

std::string Quantity::String() const {
  if (nanos_ == 0) {
    return "0";
  }
  Format format = format_;
  if (format == Format::kBinarySI &&
      (Abs(nanos_) < static_cast<Int128>(1024) * kNanosPerUnit || nanos_ % kNanosPerUnit != 0)) {
    // Small or fractional binary values are shown in decimal so that nothing is rounded.
    format = Format::kDecimalSI;
  }
  if (format == Format::kBinarySI) {
    Int128 units = nanos_ / kNanosPerUnit;
    size_t exponent = 0;
    while (units % 1024 == 0 && exponent + 1 < std::size(kBinarySuffixes)) {
      units /= 1024;
      ++exponent;
    }
    return absl::StrCat(Int128ToString(units), kBinarySuffixes[exponent]);
  }
  // Decimal: strip factors of ten into the exponent, then lower it to a multiple of three.
  Int128 mantissa = nanos_;
  int exponent = -9;
  while (mantissa % 10 == 0) {
    mantissa /= 10;
    ++exponent;
  }
  while (exponent % 3 != 0) {
    mantissa *= 10;
    --exponent;
  }
  if (format == Format::kDecimalExponent) {
    if (exponent == 0) {
      return Int128ToString(mantissa);
    }
    return absl::StrCat(Int128ToString(mantissa), "e", exponent);
  }
  static constexpr absl::string_view kDecimalSuffixes[] = {"n", "u", "m", "",  "k",
                                                           "M", "G", "T", "P", "E"};
  // exponent is in [-9, 18] because |value| <= 2^63-1 units.
  return absl::StrCat(Int128ToString(mantissa), kDecimalSuffixes[(exponent + 9) / 3]);
}

int64_t Quantity::Value() const {
  Int128 units = nanos_ / kNanosPerUnit;
  if (nanos_ % kNanosPerUnit != 0) {
    units += nanos_ < 0 ? -1 : 1;
  }
  return static_cast<int64_t>(units);
}

int64_t Quantity::MilliValue() const {
  constexpr int64_t kNanosPerMilli = 1000000;
  Int128 milli = nanos_ / kNanosPerMilli;
  if (nanos_ % kNanosPerMilli != 0) {
    milli += nanos_ < 0 ? -1 : 1;
  }
  if (milli > kInt64Max) {
    return kInt64Max;
  }
  if (milli < std::numeric_limits<int64_t>::min()) {
    return std::numeric_limits<int64_t>::min();
  }
  return static_cast<int64_t>(milli);
}

double Quantity::AsApproximateDouble() const {
  return static_cast<double>(static_cast<int64_t>(nanos_ / kNanosPerUnit)) +
         static_cast<double>(static_cast<int64_t>(nanos_ % kNanosPerUnit)) / kNanosPerUnit;
}

int Quantity::Compare(const Quantity& other) const {
  if (nanos_ < other.nanos_) {
    return -1;
  }
  return nanos_ > other.nanos_ ? 1 : 0;
}

absl::Status Quantity::Add(const Quantity& other) {
  const Int128 sum = nanos_ + other.nanos_;  // |each| <= kMaxNanos, so no overflow here.
  if (Abs(sum) > kMaxNanos) {
    return OutOfRange(absl::StrCat("quantity ", String(), " + ", other.String()));
  }
  if (nanos_ == 0) {
    format_ = other.format_;
  }
  nanos_ = sum;
  return absl::OkStatus();
}

absl::Status Quantity::Sub(const Quantity& other) {
  const Int128 diff = nanos_ - other.nanos_;
  if (Abs(diff) > kMaxNanos) {
    return OutOfRange(absl::StrCat("quantity ", String(), " - ", other.String()));
  }
  if (nanos_ == 0) {
    format_ = other.format_;
  }
  nanos_ = diff;
  return absl::OkStatus();
}

Quantity Quantity::Negated() const { return Quantity(-nanos_, format_); }

}  // namespace dralens::common
