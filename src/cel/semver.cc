// Semantic versions (semver 2.0.0), as Kubernetes' semver() library parses and orders them.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "src/cel/internal.h"

namespace dralens::cel::internal {
namespace {

bool AllDigits(absl::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(c); });
}

bool ParseVersionNumber(absl::string_view s, uint64_t& out) {
  if (!AllDigits(s) || (s.size() > 1 && s[0] == '0')) {
    return false;
  }
  return absl::SimpleAtoi(s, &out);
}

bool IsIdentChars(absl::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isalnum(c) || c == '-'; });
}

}  // namespace

// Strict semver 2.0.0. With `normalize`, a leading "v", missing minor/patch and leading zeros in
// the numeric parts are accepted, like semver(s, true).
std::optional<SemVer> ParseSemVer(absl::string_view text, bool normalize) {
  std::string owned(text);
  if (normalize) {
    absl::string_view s = text;
    if (!s.empty() && s[0] == 'v') {
      s.remove_prefix(1);
    }
    size_t end = s.find_first_of("-+");
    absl::string_view core = s.substr(0, end);
    absl::string_view rest = end == absl::string_view::npos ? "" : s.substr(end);
    std::vector<std::string> parts = absl::StrSplit(core, '.');
    if (parts.size() > 3) {
      return std::nullopt;
    }
    while (parts.size() < 3) {
      parts.push_back("0");
    }
    for (std::string& part : parts) {
      size_t nonzero = part.find_first_not_of('0');
      if (!part.empty() && nonzero == std::string::npos) {
        part = "0";
      } else if (nonzero != std::string::npos) {
        part = part.substr(nonzero);
      }
    }
    owned = absl::StrCat(absl::StrJoin(parts, "."), rest);
  }
  absl::string_view s = owned;
  SemVer v;
  if (size_t plus = s.find('+'); plus != absl::string_view::npos) {
    v.build = std::string(s.substr(plus + 1));
    for (absl::string_view id : absl::StrSplit(v.build, '.')) {
      if (!IsIdentChars(id)) {
        return std::nullopt;
      }
    }
    s = s.substr(0, plus);
  }
  if (size_t dash = s.find('-'); dash != absl::string_view::npos) {
    for (absl::string_view id : absl::StrSplit(s.substr(dash + 1), '.')) {
      if (!IsIdentChars(id) || (AllDigits(id) && id.size() > 1 && id[0] == '0')) {
        return std::nullopt;
      }
      v.pre.emplace_back(id);
    }
    s = s.substr(0, dash);
  }
  std::vector<absl::string_view> core = absl::StrSplit(s, '.');
  if (core.size() != 3 || !ParseVersionNumber(core[0], v.major) ||
      !ParseVersionNumber(core[1], v.minor) || !ParseVersionNumber(core[2], v.patch)) {
    return std::nullopt;
  }
  return v;
}

int CompareSemVer(const SemVer& a, const SemVer& b) {
  if (int c = Cmp(a.major, b.major); c != 0)
    return c;
  if (int c = Cmp(a.minor, b.minor); c != 0)
    return c;
  if (int c = Cmp(a.patch, b.patch); c != 0)
    return c;
  // A release sorts after its pre-releases.
  if (a.pre.empty() || b.pre.empty()) {
    return a.pre.empty() == b.pre.empty() ? 0 : (a.pre.empty() ? 1 : -1);
  }
  for (size_t i = 0; i < std::min(a.pre.size(), b.pre.size()); ++i) {
    const bool an = AllDigits(a.pre[i]);
    const bool bn = AllDigits(b.pre[i]);
    int c = 0;
    if (an && bn) {
      c = a.pre[i].size() != b.pre[i].size() ? Cmp(a.pre[i].size(), b.pre[i].size())
                                             : Cmp(a.pre[i], b.pre[i]);
    } else if (an != bn) {
      c = an ? -1 : 1;  // numeric identifiers sort before alphanumeric ones
    } else {
      c = Cmp(a.pre[i], b.pre[i]);
    }
    if (c != 0)
      return c;
  }
  return Cmp(a.pre.size(), b.pre.size());
}

}  // namespace dralens::cel::internal
