// The parts of the CEL subset (cel.h) that its files share: semantic versions, values, the
// syntax tree and its limits, tokens, and the evaluation context. Private to src/cel/*.cc, which
// implement Program by concern:
//   cel.cc        Program: Compile and Evaluate; ToString(Verdict)
//   semver.cc     semantic versions: parsing and ordering
//   value.cc      type names and the runtime errors built from them
//   lexer.cc      the expression's tokens
//   parser.cc     the syntax tree (CEL's grammar), with scope resolution for cel.bind
//   eval.cc       evaluation of the tree against one device
//   functions.cc  the subset's functions and methods (size, quantity, semver, strings)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/cel/cel.h"
#include "src/common/quantity.h"

namespace dralens::cel::internal {

using common::Quantity;

// ---------------------------------------------------------------------------------------------
// Semantic versions (semver 2.0.0), as Kubernetes' semver() library parses and orders them.

struct SemVer {
  uint64_t major = 0;
  uint64_t minor = 0;
  uint64_t patch = 0;
  std::vector<std::string> pre;  // dot-separated pre-release identifiers
  std::string build;             // ignored in comparisons
};

std::optional<SemVer> ParseSemVer(absl::string_view text, bool normalize);
int CompareSemVer(const SemVer& a, const SemVer& b);

template <typename T>
int Cmp(const T& a, const T& b) {
  return a < b ? -1 : (b < a ? 1 : 0);
}

// ---------------------------------------------------------------------------------------------
// Values.

struct Value;
using ListPtr = std::shared_ptr<const std::vector<Value>>;

struct Null {};
struct DeviceRef {};
// device.attributes (capacity=false) or device.capacity (capacity=true).
struct Domains {
  bool capacity = false;
};
// device.attributes['<domain>'] or device.capacity['<domain>']: the names of one domain.
struct DomainGroup {
  bool capacity = false;
  std::string domain;
};
// A runtime error: the scheduler aborts allocation on it.
struct Error {
  std::string message;
};
// A construct outside the subset: the answer is not known.
struct Unsupported {
  std::string construct;
};

struct Value {
  std::variant<Null, bool, int64_t, uint64_t, double, std::string, ListPtr, Quantity, SemVer,
               DeviceRef, Domains, DomainGroup, Error, Unsupported>
      v;

  template <typename T>
  const T* Get() const {
    return std::get_if<T>(&v);
  }
  bool IsError() const { return Get<Error>() != nullptr; }
  bool IsUnsupported() const { return Get<Unsupported>() != nullptr; }
  // Errors and unsupported constructs propagate through every operator.
  bool IsAbnormal() const { return IsError() || IsUnsupported(); }
};

Value Err(std::string message);
const char* TypeName(const Value& value);
Value NoOverload(absl::string_view function, const Value& a);
Value NoOverload(absl::string_view function, const Value& a, const Value& b);
Value NoOverload(absl::string_view function, const std::vector<Value>& args);

// ---------------------------------------------------------------------------------------------
// The syntax tree.

enum class Op {
  kLiteral,
  kIdent,
  kSelect,  // args[0].name
  kHas,     // has(args[0].name)
  kIndex,   // args[0][args[1]]
  kCall,    // name(args...), or args[0].name(args[1:]...) when member
  kList,
  kNot,
  kNeg,
  kAnd,
  kOr,
  kTernary,
  kBinary,  // name is the operator
  kBind,    // cel.bind(name, args[0], args[1])
  kUnsupported,
};

struct Node {
  Op op = Op::kLiteral;
  std::string name;
  Value literal;
  bool member = false;
  std::vector<std::unique_ptr<Node>> args;
  int depth = 1;
};
using NodePtr = std::unique_ptr<Node>;

constexpr size_t kMaxExpressionBytes = 10 * 1024;
constexpr int kMaxDepth = 100;

// ---------------------------------------------------------------------------------------------
// Lexer.

enum class Tok { kInt, kUint, kDouble, kString, kBytes, kIdent, kPunct, kEnd };

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;  // identifier, punctuation, or decoded string
  size_t offset = 0;
  int64_t int_value = 0;
  uint64_t uint_value = 0;
  double double_value = 0;
};

absl::Status SyntaxError(size_t offset, absl::string_view what);
absl::StatusOr<std::vector<Token>> Lex(absl::string_view text);

// ---------------------------------------------------------------------------------------------
// Parser (CEL's grammar), with scope resolution for cel.bind.

absl::StatusOr<NodePtr> Parse(std::vector<Token> tokens);
absl::Status Resolve(const Node& node, std::vector<std::string>& scope);

// ---------------------------------------------------------------------------------------------
// Evaluation.

struct Context {
  const DeviceView& device;
  std::vector<std::pair<const std::string*, Value>> bindings;
};

Value Eval(const Node& node, Context& ctx);
Value CallFunction(const Node& node, std::vector<Value>& args);

}  // namespace dralens::cel::internal
