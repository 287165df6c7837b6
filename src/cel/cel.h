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
// detail naming the construct, unless the rest of the expression decides the result anyway
// (`false && x.matches('a')` is false, as in CEL).
//
// Runtime errors: a missing attribute or capacity (CEL "no such key"), a type mismatch ("no such
// overload", e.g. `device.attributes['d'].productName > 3`), overflow, an invalid quantity() or
// semver() argument. `&&` and `||` absorb them commutatively (`false && error` is false,
// `true || error` is true). An error that reaches the top is reported as kFalse with
// `runtime_error` set and the detail naming it. The device is never allocated, but note what the
// Kubernetes scheduler actually does (CELDeviceSelector API doc, structured allocator): "any
// other result [than true or false] is an error and causes allocation of devices to abort", so a
// selector error fails the whole allocation attempt for the pod, not just this device. Callers
// that explain scheduling (the analyzer) should surface `runtime_error` as such.
//
// A missing domain (`device.attributes['other.dev']`) reads as an empty map, as in the
// scheduler, so `has(device.attributes['other.dev'].x)` is false and `.x` is "no such key".
// Quantity comparisons are exact (common::Quantity); quantities and semvers are ordered only
// through compareTo/isGreaterThan/isLessThan, as in Kubernetes (no `<` overload). Equality is
// CEL's heterogeneous equality (`'a' == 1` is false); numbers compare across int/uint/double.
//
// Compile-time checks that the API server would make: syntax (InvalidArgument naming the
// offset), expressions over 10 KiB (the API's limit), nesting deeper than 100 levels (bounds
// the recursion of parsing and evaluation), and identifiers other than `device` and cel.bind
// variables (undeclared reference).
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
  // The expression failed at runtime (verdict kFalse): the scheduler aborts the allocation.
  bool runtime_error = false;
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
