// Verify: a /metrics scrape (classic text format) against the Truth of a Fleet, family by
// family, with a readable diff.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tests/bench/scale/truth.h"

namespace dralens::bench::scale {

struct Sample {
  std::map<std::string, std::string> labels;
  double value = 0;
};

// The samples of a scrape by sample name, and the families it declares (# TYPE).
struct Scrape {
  std::map<std::string, std::vector<Sample>> samples;
  std::set<std::string> declared;
  bool Exports(const std::string& family) const {
    return declared.count(family) > 0 || samples.count(family) > 0;
  }
};

// Parses the Prometheus text exposition format (0.0.4). InvalidArgument names the line.
absl::StatusOr<Scrape> ParseExposition(absl::string_view text);

struct FamilyResult {
  enum class Status { kOk, kMismatch, kNotExported };
  std::string family;
  std::string what;
  Status status = Status::kOk;
  int keys = 0;                   // keys compared
  int mismatches = 0;             // keys that differ
  std::vector<std::string> diff;  // the first few differences, one line each
};

struct VerifyResult {
  std::vector<FamilyResult> families;
  // True when no exported family differs from the truth. Families that are not exported are
  // reported by Summary() but do not fail the check.
  bool ok() const;
  // True when every family is exported and matches: what ready and the relist check require
  // once the binary exports every family (--allow-missing-families restores ok()).
  bool complete() const;
  // "claims ok (320 keys), pending ok, ... gpus not exported"
  std::string Summary() const;
  // Every mismatching family with its diff lines.
  std::string Diff() const;
};

// Compares every family of `truth`; at most `max_diff_lines` lines per family are kept.
VerifyResult Verify(const Scrape& scrape, const Truth& truth, int max_diff_lines = 12);

// The sum of a family's samples (0 when absent).
double SumOf(const Scrape& scrape, const std::string& family);

}  // namespace dralens::bench::scale
