#include "tests/bench/scale/verify.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace dralens::bench::scale {
namespace {

constexpr double kTolerance = 1e-6;

bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_' || c == ':'; }

absl::Status LineError(int line, absl::string_view why, absl::string_view text) {
  return absl::InvalidArgumentError(
      absl::StrCat("exposition line ", line, ": ", why, ": \"", text.substr(0, 200), "\""));
}

bool ParseValue(absl::string_view text, double* value) {
  if (text == "+Inf") {
    *value = INFINITY;
    return true;
  }
  if (text == "-Inf") {
    *value = -INFINITY;
    return true;
  }
  if (text == "NaN") {
    *value = NAN;
    return true;
  }
  return absl::SimpleAtod(text, value);
}

// One sample line: name{l="v",...} value [timestamp].
absl::Status ParseSample(absl::string_view line, int number, Scrape& scrape) {
  size_t i = 0;
  while (i < line.size() && IsNameChar(line[i])) {
    ++i;
  }
  if (i == 0) {
    return LineError(number, "no metric name", line);
  }
  const std::string name(line.substr(0, i));
  Sample sample;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (true) {
      while (i < line.size() && (line[i] == ' ' || line[i] == ',')) {
        ++i;
      }
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      const size_t start = i;
      while (i < line.size() && IsNameChar(line[i])) {
        ++i;
      }
      if (i == start || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
        return LineError(number, "bad label", line);
      }
      const std::string label(line.substr(start, i - start));
      i += 2;
      std::string value;
      bool closed = false;
      while (i < line.size()) {
        const char c = line[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\\' && i < line.size()) {
          const char e = line[i++];
          value.push_back(e == 'n' ? '\n' : e);
        } else {
          value.push_back(c);
        }
      }
      if (!closed) {
        return LineError(number, "unterminated label value", line);
      }
      sample.labels.emplace(label, std::move(value));
    }
  }
  while (i < line.size() && line[i] == ' ') {
    ++i;
  }
  size_t end = line.find(' ', i);
  absl::string_view value_text = line.substr(i, end == absl::string_view::npos ? end : end - i);
  if (!ParseValue(value_text, &sample.value)) {
    return LineError(number, "bad value", line);
  }
  scrape.samples[name].push_back(std::move(sample));
  return absl::OkStatus();
}

std::string Render(const std::string& family, const std::vector<std::string>& names,
                   const std::vector<std::string>& values) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < names.size(); ++i) {
    parts.push_back(absl::StrCat(names[i], "=\"", values[i], "\""));
  }
  return absl::StrCat(family, "{", absl::StrJoin(parts, ","), "}");
}

std::string Number(double v) { return absl::StrFormat("%.6g", v); }

FamilyResult Compare(const Scrape& scrape, const FamilyTruth& truth, int max_lines) {
  FamilyResult result;
  result.family = truth.family;
  result.what = truth.what;
  if (!scrape.Exports(truth.family)) {
    result.status = FamilyResult::Status::kNotExported;
    return result;
  }
  std::map<std::vector<std::string>, double> got;
  std::set<std::string> seen_labels;
  auto it = scrape.samples.find(truth.family);
  if (it != scrape.samples.end()) {
    for (const Sample& sample : it->second) {
      std::vector<std::string> key;
      for (const std::string& name : truth.labels) {
        auto label = sample.labels.find(name);
        key.push_back(label == sample.labels.end() ? "" : label->second);
        if (label != sample.labels.end()) {
          seen_labels.insert(name);
        }
      }
      got[key] += truth.mode == FamilyTruth::Mode::kPresence ? 1 : sample.value;
    }
  }
  auto note = [&](std::string line) {
    ++result.mismatches;
    if (static_cast<int>(result.diff.size()) < max_lines) {
      result.diff.push_back(std::move(line));
    }
  };
  if (it != scrape.samples.end() && !it->second.empty()) {
    for (const std::string& name : truth.labels) {
      if (seen_labels.count(name) == 0) {
        result.diff.push_back(absl::StrCat("no series carries the label '", name, "'"));
      }
    }
  }
  std::set<std::vector<std::string>> keys;
  for (const auto& [key, value] : truth.values) {
    keys.insert(key);
  }
  for (const auto& [key, value] : got) {
    keys.insert(key);
  }
  for (const std::vector<std::string>& key : keys) {
    auto want = truth.values.find(key);
    auto have = got.find(key);
    ++result.keys;
    if (truth.mode == FamilyTruth::Mode::kPresence) {
      if (want == truth.values.end()) {
        note(absl::StrCat("unexpected ", Render(truth.family, truth.labels, key)));
      } else if (have == got.end()) {
        note(absl::StrCat("missing    ", Render(truth.family, truth.labels, key)));
      } else if (have->second != 1) {
        note(absl::StrCat(Number(have->second), " series for ",
                          Render(truth.family, truth.labels, key)));
      }
      continue;
    }
    const double w = want == truth.values.end() ? 0 : want->second;
    const double h = have == got.end() ? 0 : have->second;
    if (std::fabs(w - h) > kTolerance) {
      note(absl::StrCat(Render(truth.family, truth.labels, key), ": want ", Number(w), ", got ",
                        Number(h), have == got.end() ? " (absent)" : ""));
    }
  }
  if (result.mismatches > 0 || !result.diff.empty()) {
    result.status = FamilyResult::Status::kMismatch;
  }
  return result;
}

}  // namespace

absl::StatusOr<Scrape> ParseExposition(absl::string_view text) {
  Scrape scrape;
  int number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == absl::string_view::npos) {
      end = text.size();
    }
    absl::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    if (line.empty()) {
      continue;
    }
    if (line[0] == '#') {
      if (line.substr(0, 7) == "# TYPE ") {
        absl::string_view rest = line.substr(7);
        scrape.declared.insert(std::string(rest.substr(0, rest.find(' '))));
      }
      continue;
    }
    absl::Status s = ParseSample(line, number, scrape);
    if (!s.ok()) {
      return s;
    }
  }
  return scrape;
}

bool VerifyResult::ok() const {
  for (const FamilyResult& f : families) {
    if (f.status == FamilyResult::Status::kMismatch) {
      return false;
    }
  }
  return true;
}

bool VerifyResult::complete() const {
  for (const FamilyResult& f : families) {
    if (f.status != FamilyResult::Status::kOk) {
      return false;
    }
  }
  return true;
}

std::string VerifyResult::Summary() const {
  std::vector<std::string> parts;
  for (const FamilyResult& f : families) {
    switch (f.status) {
      case FamilyResult::Status::kOk:
        parts.push_back(absl::StrCat(f.family, " ok (", f.keys, ")"));
        break;
      case FamilyResult::Status::kMismatch:
        parts.push_back(absl::StrCat(f.family, " MISMATCH (", f.mismatches, "/", f.keys, ")"));
        break;
      case FamilyResult::Status::kNotExported:
        parts.push_back(absl::StrCat(f.family, " not exported"));
        break;
    }
  }
  return absl::StrJoin(parts, ", ");
}

std::string VerifyResult::Diff() const {
  std::string out;
  for (const FamilyResult& f : families) {
    if (f.status != FamilyResult::Status::kMismatch) {
      continue;
    }
    absl::StrAppend(&out, "  ", f.family, " (", f.what, "): ", f.mismatches, " of ", f.keys,
                    " keys differ\n");
    for (const std::string& line : f.diff) {
      absl::StrAppend(&out, "    ", line, "\n");
    }
    if (f.mismatches > static_cast<int>(f.diff.size())) {
      absl::StrAppend(&out, "    ... ", f.mismatches - static_cast<int>(f.diff.size()), " more\n");
    }
  }
  return out;
}

VerifyResult Verify(const Scrape& scrape, const Truth& truth, int max_diff_lines) {
  VerifyResult result;
  for (const FamilyTruth& family : truth.families) {
    result.families.push_back(Compare(scrape, family, max_diff_lines));
  }
  return result;
}

double SumOf(const Scrape& scrape, const std::string& family) {
  double sum = 0;
  auto it = scrape.samples.find(family);
  if (it != scrape.samples.end()) {
    for (const Sample& s : it->second) {
      sum += s.value;
    }
  }
  return sum;
}

}  // namespace dralens::bench::scale
