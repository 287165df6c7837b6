// Label and field selectors with the syntax and semantics of the Kubernetes API server.
//
// Label selectors: comma-separated requirements `k`, `!k`, `k=v`, `k==v`, `k!=v`,
// `k in (a,b)`, `k notin (a,b)`, `k>n`, `k<n`. Field selectors: comma-separated `f=v`,
// `f==v`, `f!=v` with `\` escaping `,`, `=` and `\` in values. Which fields a resource supports
// is decided by the caller (the API server answers 400 for any other field).
//
// Pure value types; thread-compatible.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dralens::sim {

class LabelSelector {
 public:
  enum class Op {
    kEquals,
    kNotEquals,
    kIn,
    kNotIn,
    kExists,
    kDoesNotExist,
    kGreaterThan,
    kLessThan
  };
  struct Requirement {
    std::string key;
    Op op = Op::kEquals;
    std::vector<std::string> values;
  };

  // Parses `text`; "" selects everything. InvalidArgument names the offending requirement.
  static absl::StatusOr<LabelSelector> Parse(absl::string_view text);

  bool Matches(const std::map<std::string, std::string>& labels) const;
  bool Empty() const { return requirements_.empty(); }
  const std::vector<Requirement>& requirements() const { return requirements_; }

 private:
  std::vector<Requirement> requirements_;
};

class FieldSelector {
 public:
  struct Term {
    std::string field;
    bool negated = false;  // `!=`
    std::string value;
  };

  // Parses `text`; "" selects everything. Does not check which fields exist.
  static absl::StatusOr<FieldSelector> Parse(absl::string_view text);

  // `fields` maps each supported field to the object's value (absent fields read as "").
  bool Matches(const std::map<std::string, std::string>& fields) const;
  bool Empty() const { return terms_.empty(); }
  const std::vector<Term>& terms() const { return terms_; }

 private:
  std::vector<Term> terms_;
};

}  // namespace dralens::sim
