// The subset of CEL that DRA device selectors use, evaluated against one published device.
//
// Supported: `device.driver`; `device.attributes['<domain>'].<name>` and
// `device.capacity['<domain>'].<name>` (also with ['<name>'] indexing); literals (int, uint,
// double, string, bool, null); comparisons (== != < <= > >=); arithmetic on numbers; `&&`, `||`
// and `!` with CEL's commutative error/unknown absorption; `in` over list literals and maps;
// `has()`; `quantity()` with `compareTo`, `isGreaterThan`, `isLessThan`, `add`, `sub`,
// `asInteger`, `asApproximateFloat`; `semver()` with `compareTo`, `isGreaterThan`, `isLessThan`,
// `major`, `minor`, `patch`, and version-typed attributes; `cel.bind(name, init, expr)`;
// string `startsWith`, `endsWith` and `contains`. Regular expressions (`matches`) are not in it.
//
// A construct outside the subset never yields a wrong answer: Evaluate returns kUnknown with a
// detail naming the construct. A missing attribute or capacity is a runtime error in CEL (no
// such key), which a DRA scheduler treats as "does not match"; Evaluate reports it as kFalse
// with the detail set, matching the scheduler.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/model/resource.h"

namespace dralens::cel {

// What a selector sees of one device. Attribute and capacity names are as published: an
// unqualified name belongs to `driver`'s domain.
struct DeviceView {
  absl::string_view driver;
  const std::map<std::string, model::DeviceAttribute>* attributes = nullptr;
  const std::map<std::string, model::DeviceCapacity>* capacity = nullptr;
};

enum class Verdict { kTrue, kFalse, kUnknown };
absl::string_view ToString(Verdict verdict);

struct Outcome {
  Verdict verdict = Verdict::kUnknown;
  std::string detail;  // empty on a clean true/false
};

class Program {
 public:
  // Parses `expression`. A syntax error is InvalidArgument with the offset; a well-formed
  // expression using a construct outside the subset compiles to a program that evaluates to
  // kUnknown (so a selector we cannot judge never turns into a wrong answer).
  static absl::StatusOr<Program> Compile(absl::string_view expression);

  Outcome Evaluate(const DeviceView& device) const;
  const std::string& expression() const;

  ~Program();
  Program(Program&&) noexcept;
  Program& operator=(Program&&) noexcept;
  Program(const Program&);
  Program& operator=(const Program&);

 private:
  struct Impl;
  explicit Program(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace dralens::cel
