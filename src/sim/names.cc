#include "src/sim/names.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dralens::sim {
namespace {

constexpr char kDnsLabelMessage[] =
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
constexpr char kDnsSubdomainMessage[] =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
constexpr char kCIdentifierMessage[] =
    "a valid C identifier must start with alphabetic character or '_', followed by a string of "
    "alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used "
    "for validation is '[A-Za-z_][A-Za-z0-9_]*')";
constexpr char kQualifiedNameMessage[] =
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
constexpr char kLabelValueMessage[] =
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)); }

bool MatchesDnsLabel(absl::string_view v) {
  if (v.empty() || !IsLowerAlnum(v.front()) || !IsLowerAlnum(v.back())) {
    return false;
  }
  for (char c : v) {
    if (!IsLowerAlnum(c) && c != '-') {
      return false;
    }
  }
  return true;
}

bool MatchesDnsSubdomain(absl::string_view v) {
  if (v.empty()) {
    return false;
  }
  for (absl::string_view part : absl::StrSplit(v, '.')) {
    if (!MatchesDnsLabel(part)) {
      return false;
    }
  }
  return true;
}

// ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]
bool MatchesQualifiedPart(absl::string_view v) {
  if (v.empty() || !IsAlnum(v.front()) || !IsAlnum(v.back())) {
    return false;
  }
  for (char c : v) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

std::string MaxLen(size_t n) { return absl::StrCat("must be no more than ", n, " characters"); }

bool ConsumeDigits(absl::string_view& s) {
  size_t n = 0;
  while (n < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[n]))) {
    ++n;
  }
  s.remove_prefix(n);
  return n > 0;
}

bool IsSemverIdentifier(absl::string_view id, bool numeric_no_leading_zero) {
  if (id.empty()) {
    return false;
  }
  bool all_digits = true;
  for (char c : id) {
    if (!IsAlnum(c) && c != '-') {
      return false;
    }
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      all_digits = false;
    }
  }
  if (numeric_no_leading_zero && all_digits && id.size() > 1 && id[0] == '0') {
    return false;
  }
  return true;
}

}  // namespace

std::vector<std::string> CheckDnsLabel(absl::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > kDnsLabelMaxLength) {
    errs.push_back(MaxLen(kDnsLabelMaxLength));
  }
  if (!MatchesDnsLabel(value)) {
    errs.push_back(kDnsLabelMessage);
  }
  return errs;
}

std::vector<std::string> CheckDnsSubdomain(absl::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > kDnsSubdomainMaxLength) {
    errs.push_back(MaxLen(kDnsSubdomainMaxLength));
  }
  if (!MatchesDnsSubdomain(value)) {
    errs.push_back(kDnsSubdomainMessage);
  }
  return errs;
}

std::vector<std::string> CheckCIdentifier(absl::string_view value) {
  bool ok = !value.empty() &&
            (absl::ascii_isalpha(static_cast<unsigned char>(value[0])) || value[0] == '_');
  for (char c : value) {
    if (!IsAlnum(c) && c != '_') {
      ok = false;
    }
  }
  if (!ok) {
    return {kCIdentifierMessage};
  }
  return {};
}

std::vector<std::string> CheckQualifiedName(absl::string_view value) {
  std::vector<std::string> errs;
  std::vector<absl::string_view> parts = absl::StrSplit(value, '/');
  absl::string_view name;
  if (parts.size() == 1) {
    name = parts[0];
  } else if (parts.size() == 2) {
    absl::string_view prefix = parts[0];
    name = parts[1];
    if (prefix.empty()) {
      errs.push_back("prefix part must be non-empty");
    } else {
      for (const std::string& e : CheckDnsSubdomain(prefix)) {
        errs.push_back("prefix part " + e);
      }
    }
  } else {
    return {std::string("a qualified name ") + kQualifiedNameMessage +
            " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"};
  }
  if (name.empty()) {
    errs.push_back("name part must be non-empty");
  } else {
    if (name.size() > 63) {
      errs.push_back("name part must be no more than 63 characters");
    }
    if (!MatchesQualifiedPart(name)) {
      errs.push_back(kQualifiedNameMessage);
    }
  }
  return errs;
}

std::vector<std::string> CheckLabelValue(absl::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > 63) {
    errs.push_back(MaxLen(63));
  }
  if (!value.empty() && !MatchesQualifiedPart(value)) {
    errs.push_back(kLabelValueMessage);
  }
  return errs;
}

std::vector<std::string> CheckNamePrefix(absl::string_view value, bool dns_label) {
  // Like the real server: a trailing '-' or '.' is fine because a suffix follows.
  std::string probe(value);
  if (!probe.empty() && (probe.back() == '-' || probe.back() == '.')) {
    probe.push_back('a');
  }
  return dns_label ? CheckDnsLabel(probe) : CheckDnsSubdomain(probe);
}

bool IsQuantity(absl::string_view s) {
  if (s.empty()) {
    return false;
  }
  if (s[0] == '+' || s[0] == '-') {
    s.remove_prefix(1);
  }
  bool int_digits = ConsumeDigits(s);
  bool frac_digits = false;
  if (!s.empty() && s[0] == '.') {
    s.remove_prefix(1);
    frac_digits = ConsumeDigits(s);
  }
  if (!int_digits && !frac_digits) {
    return false;
  }
  if (s.empty()) {
    return true;
  }
  static constexpr absl::string_view kSuffixes[] = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u",
                                                    "m",  "k",  "M",  "G",  "T",  "P",  "E"};
  for (absl::string_view suffix : kSuffixes) {
    if (s == suffix) {
      return true;
    }
  }
  if (s[0] == 'e' || s[0] == 'E') {
    s.remove_prefix(1);
    if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
      s.remove_prefix(1);
    }
    return ConsumeDigits(s) && s.empty();
  }
  return false;
}

bool IsSemver(absl::string_view v) {
  // MAJOR.MINOR.PATCH[-pre.release][+build.meta]
  absl::string_view core = v;
  absl::string_view pre;
  absl::string_view build;
  if (size_t plus = core.find('+'); plus != absl::string_view::npos) {
    build = core.substr(plus + 1);
    core = core.substr(0, plus);
    if (build.empty()) {
      return false;
    }
  }
  if (size_t dash = core.find('-'); dash != absl::string_view::npos) {
    pre = core.substr(dash + 1);
    core = core.substr(0, dash);
    if (pre.empty()) {
      return false;
    }
  }
  std::vector<absl::string_view> nums = absl::StrSplit(core, '.');
  if (nums.size() != 3) {
    return false;
  }
  for (absl::string_view n : nums) {
    if (n.empty() || (n.size() > 1 && n[0] == '0')) {
      return false;
    }
    for (char c : n) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
        return false;
      }
    }
  }
  if (!pre.empty()) {
    for (absl::string_view id : absl::StrSplit(pre, '.')) {
      if (!IsSemverIdentifier(id, true)) {
        return false;
      }
    }
  }
  if (!build.empty()) {
    for (absl::string_view id : absl::StrSplit(build, '.')) {
      if (!IsSemverIdentifier(id, false)) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace dralens::sim
