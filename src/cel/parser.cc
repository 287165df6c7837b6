// Parser (CEL's grammar), with scope resolution for cel.bind.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/cel/internal.h"

namespace dralens::cel::internal {
namespace {

bool IsReserved(absl::string_view id) {
  static constexpr absl::string_view kReserved[] = {
      "as",  "break",  "const", "continue", "else",    "for",       "function",
      "if",  "import", "let",   "loop",     "package", "namespace", "return",
      "var", "void",   "while", "in",       "true",    "false",     "null"};
  return std::find(std::begin(kReserved), std::end(kReserved), id) != std::end(kReserved);
}

// Functions and methods of the subset, by name. Anything else is reported as unsupported.
bool IsKnownGlobal(absl::string_view name) {
  return name == "quantity" || name == "isQuantity" || name == "semver" || name == "isSemver" ||
         name == "size";
}
bool IsKnownMethod(absl::string_view name) {
  static constexpr absl::string_view kMethods[] = {
      "compareTo",  "isGreaterThan",      "isLessThan", "add",   "sub",   "asInteger",
      "isInteger",  "asApproximateFloat", "sign",       "major", "minor", "patch",
      "startsWith", "endsWith",           "contains",   "size"};
  return std::find(std::begin(kMethods), std::end(kMethods), name) != std::end(kMethods);
}
bool IsMacro(absl::string_view name) {
  return name == "all" || name == "exists" || name == "exists_one" || name == "map" ||
         name == "filter";
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  absl::StatusOr<NodePtr> Run() {
    absl::StatusOr<NodePtr> root = Expr();
    if (!root.ok())
      return root;
    if (Peek().kind != Tok::kEnd) {
      return SyntaxError(Peek().offset, absl::StrCat("unexpected '", Peek().text, "'"));
    }
    return root;
  }

 private:
  const Token& Peek() const { return tokens_[pos_]; }
  bool IsPunct(absl::string_view p) const { return Peek().kind == Tok::kPunct && Peek().text == p; }
  bool Accept(absl::string_view p) {
    if (IsPunct(p)) {
      ++pos_;
      return true;
    }
    return false;
  }
  absl::Status Expect(absl::string_view p) {
    if (Accept(p))
      return absl::OkStatus();
    const Token& t = Peek();
    return SyntaxError(
        t.offset,
        absl::StrCat("expected '", p, "', found ",
                     t.kind == Tok::kEnd ? "end of input" : absl::StrCat("'", t.text, "'")));
  }

  // Builds a node and checks the nesting limit.
  absl::StatusOr<NodePtr> Make(Op op, size_t offset, std::vector<NodePtr> args,
                               std::string name = "") {
    auto node = std::make_unique<Node>();
    node->op = op;
    node->name = std::move(name);
    for (const NodePtr& arg : args) {
      node->depth = std::max(node->depth, arg->depth + 1);
    }
    node->args = std::move(args);
    if (node->depth > kMaxDepth) {
      return SyntaxError(offset,
                         absl::StrCat("expression nested more than ", kMaxDepth, " levels deep"));
    }
    return node;
  }

  // Guards the parser's own recursion.
  struct DepthGuard {
    explicit DepthGuard(int& d) : depth(d) { ++depth; }
    ~DepthGuard() { --depth; }
    int& depth;
  };
  absl::Status CheckRecursion() const {
    if (recursion_ > kMaxDepth) {
      return SyntaxError(Peek().offset,
                         absl::StrCat("expression nested more than ", kMaxDepth, " levels deep"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<NodePtr> Expr() {
    DepthGuard guard(recursion_);
    if (absl::Status s = CheckRecursion(); !s.ok())
      return s;
    const size_t offset = Peek().offset;
    absl::StatusOr<NodePtr> cond = Or();
    if (!cond.ok() || !Accept("?"))
      return cond;
    absl::StatusOr<NodePtr> yes = Or();
    if (!yes.ok())
      return yes;
    if (absl::Status s = Expect(":"); !s.ok())
      return s;
    absl::StatusOr<NodePtr> no = Expr();
    if (!no.ok())
      return no;
    std::vector<NodePtr> args;
    args.push_back(*std::move(cond));
    args.push_back(*std::move(yes));
    args.push_back(*std::move(no));
    return Make(Op::kTernary, offset, std::move(args));
  }

  template <typename Next>
  absl::StatusOr<NodePtr> LeftAssoc(Next next, std::initializer_list<absl::string_view> ops) {
    absl::StatusOr<NodePtr> left = (this->*next)();
    while (left.ok()) {
      const size_t offset = Peek().offset;
      std::string op;
      for (absl::string_view candidate : ops) {
        if (candidate == "in" ? (Peek().kind == Tok::kIdent && Peek().text == "in")
                              : IsPunct(candidate)) {
          op = std::string(candidate);
        }
      }
      if (op.empty())
        break;
      ++pos_;
      absl::StatusOr<NodePtr> right = (this->*next)();
      if (!right.ok())
        return right;
      std::vector<NodePtr> args;
      args.push_back(*std::move(left));
      args.push_back(*std::move(right));
      const Op kind = op == "&&" ? Op::kAnd : (op == "||" ? Op::kOr : Op::kBinary);
      left = Make(kind, offset, std::move(args), op);
    }
    return left;
  }

  absl::StatusOr<NodePtr> Or() { return LeftAssoc(&Parser::And, {"||"}); }
  absl::StatusOr<NodePtr> And() { return LeftAssoc(&Parser::Relation, {"&&"}); }
  absl::StatusOr<NodePtr> Relation() {
    return LeftAssoc(&Parser::Addition, {"<=", ">=", "<", ">", "==", "!=", "in"});
  }
  absl::StatusOr<NodePtr> Addition() { return LeftAssoc(&Parser::Multiplication, {"+", "-"}); }
  absl::StatusOr<NodePtr> Multiplication() { return LeftAssoc(&Parser::Unary, {"*", "/", "%"}); }

  absl::StatusOr<NodePtr> Unary() {
    DepthGuard guard(recursion_);
    if (absl::Status s = CheckRecursion(); !s.ok())
      return s;
    const size_t offset = Peek().offset;
    if (Accept("!")) {
      absl::StatusOr<NodePtr> operand = Unary();
      if (!operand.ok())
        return operand;
      std::vector<NodePtr> args;
      args.push_back(*std::move(operand));
      return Make(Op::kNot, offset, std::move(args));
    }
    if (Accept("-")) {
      // -9223372036854775808 is a literal, not the negation of an out-of-range one.
      if (Peek().kind == Tok::kInt && Peek().uint_value == uint64_t(1) << 63) {
        ++pos_;
        auto node = std::make_unique<Node>();
        node->literal = Value{std::numeric_limits<int64_t>::min()};
        return Member(std::move(node));
      }
      absl::StatusOr<NodePtr> operand = Unary();
      if (!operand.ok())
        return operand;
      std::vector<NodePtr> args;
      args.push_back(*std::move(operand));
      return Make(Op::kNeg, offset, std::move(args));
    }
    absl::StatusOr<NodePtr> primary = Primary();
    if (!primary.ok())
      return primary;
    return Member(*std::move(primary));
  }

  absl::StatusOr<std::vector<NodePtr>> ExprList(absl::string_view close) {
    std::vector<NodePtr> items;
    while (!IsPunct(close)) {
      absl::StatusOr<NodePtr> item = Expr();
      if (!item.ok())
        return item.status();
      items.push_back(*std::move(item));
      if (!Accept(","))
        break;
    }
    if (absl::Status s = Expect(close); !s.ok())
      return s;
    return items;
  }

  absl::StatusOr<NodePtr> Member(NodePtr target) {
    while (true) {
      const size_t offset = Peek().offset;
      if (Accept(".")) {
        if (Peek().kind != Tok::kIdent) {
          return SyntaxError(Peek().offset, "expected a field or method name after '.'");
        }
        std::string name = tokens_[pos_++].text;
        std::vector<NodePtr> args;
        if (Accept("(")) {
          absl::StatusOr<std::vector<NodePtr>> call_args = ExprList(")");
          if (!call_args.ok())
            return call_args.status();
          absl::StatusOr<NodePtr> call =
              MemberCall(std::move(target), std::move(name), *std::move(call_args), offset);
          if (!call.ok())
            return call;
          target = *std::move(call);
          continue;
        }
        args.push_back(std::move(target));
        absl::StatusOr<NodePtr> select = Make(Op::kSelect, offset, std::move(args), name);
        if (!select.ok())
          return select;
        target = *std::move(select);
      } else if (Accept("[")) {
        absl::StatusOr<NodePtr> index = Expr();
        if (!index.ok())
          return index;
        if (absl::Status s = Expect("]"); !s.ok())
          return s;
        std::vector<NodePtr> args;
        args.push_back(std::move(target));
        args.push_back(*std::move(index));
        absl::StatusOr<NodePtr> node = Make(Op::kIndex, offset, std::move(args));
        if (!node.ok())
          return node;
        target = *std::move(node);
      } else if (IsPunct("{")) {
        return SyntaxError(offset, "message construction is not valid in a device selector");
      } else {
        return target;
      }
    }
  }

  absl::StatusOr<NodePtr> Unsupported(size_t offset, std::vector<NodePtr> args,
                                      std::string construct) {
    absl::StatusOr<NodePtr> node = Make(Op::kUnsupported, offset, std::move(args));
    if (node.ok())
      (*node)->literal = Value{internal::Unsupported{std::move(construct)}};
    return node;
  }

  absl::StatusOr<NodePtr> MemberCall(NodePtr target, std::string name, std::vector<NodePtr> args,
                                     size_t offset) {
    if (target->op == Op::kIdent && target->name == "cel" && name == "bind") {
      if (args.size() != 3 || args[0]->op != Op::kIdent) {
        return SyntaxError(offset, "cel.bind() takes a variable name, an init and a body");
      }
      std::string var = args[0]->name;
      std::vector<NodePtr> bind_args;
      bind_args.push_back(std::move(args[1]));
      bind_args.push_back(std::move(args[2]));
      return Make(Op::kBind, offset, std::move(bind_args), std::move(var));
    }
    std::vector<NodePtr> all;
    all.push_back(std::move(target));
    for (NodePtr& arg : args)
      all.push_back(std::move(arg));
    if (IsMacro(name)) {
      return Unsupported(offset, std::move(all), absl::StrCat("macro '", name, "'"));
    }
    if (!IsKnownMethod(name)) {
      return Unsupported(offset, std::move(all), absl::StrCat("function '", name, "'"));
    }
    absl::StatusOr<NodePtr> call = Make(Op::kCall, offset, std::move(all), std::move(name));
    if (call.ok())
      (*call)->member = true;
    return call;
  }

  absl::StatusOr<NodePtr> Primary() {
    const Token& t = Peek();
    const size_t offset = t.offset;
    auto literal = [&](Value value) {
      ++pos_;
      auto node = std::make_unique<Node>();
      node->literal = std::move(value);
      return absl::StatusOr<NodePtr>(std::move(node));
    };
    switch (t.kind) {
      case Tok::kInt:
        if (t.uint_value > uint64_t(std::numeric_limits<int64_t>::max())) {
          return SyntaxError(offset, "integer literal out of range");
        }
        return literal(Value{t.int_value});
      case Tok::kUint:
        return literal(Value{t.uint_value});
      case Tok::kDouble:
        return literal(Value{t.double_value});
      case Tok::kString:
        return literal(Value{t.text});
      case Tok::kBytes: {
        ++pos_;
        return Unsupported(offset, {}, "bytes literal");
      }
      case Tok::kEnd:
        return SyntaxError(offset, "unexpected end of input");
      case Tok::kIdent:
        break;
      case Tok::kPunct: {
        if (Accept("(")) {
          absl::StatusOr<NodePtr> inner = Expr();
          if (!inner.ok())
            return inner;
          if (absl::Status s = Expect(")"); !s.ok())
            return s;
          return inner;
        }
        if (Accept("[")) {
          absl::StatusOr<std::vector<NodePtr>> items = ExprList("]");
          if (!items.ok())
            return items.status();
          return Make(Op::kList, offset, *std::move(items));
        }
        if (Accept("{")) {
          // Map literal: parsed for well-formedness, reported as outside the subset.
          std::vector<NodePtr> parts;
          while (!IsPunct("}")) {
            absl::StatusOr<NodePtr> key = Expr();
            if (!key.ok())
              return key;
            if (absl::Status s = Expect(":"); !s.ok())
              return s;
            absl::StatusOr<NodePtr> value = Expr();
            if (!value.ok())
              return value;
            parts.push_back(*std::move(key));
            parts.push_back(*std::move(value));
            if (!Accept(","))
              break;
          }
          if (absl::Status s = Expect("}"); !s.ok())
            return s;
          return Unsupported(offset, std::move(parts), "map literal");
        }
        if (IsPunct(".")) {
          return SyntaxError(offset, "leading '.' (qualified names) is not valid in a selector");
        }
        return SyntaxError(offset, absl::StrCat("unexpected '", t.text, "'"));
      }
    }
    // Identifier, keyword literal, or global call.
    std::string name = t.text;
    ++pos_;
    if (name == "true" || name == "false") {
      auto node = std::make_unique<Node>();
      node->literal = Value{name == "true"};
      return node;
    }
    if (name == "null") {
      return std::make_unique<Node>();
    }
    if (IsReserved(name)) {
      return SyntaxError(offset, absl::StrCat("reserved word '", name, "'"));
    }
    if (!Accept("(")) {
      absl::StatusOr<NodePtr> ident = Make(Op::kIdent, offset, {}, name);
      return ident;
    }
    absl::StatusOr<std::vector<NodePtr>> args = ExprList(")");
    if (!args.ok())
      return args.status();
    if (name == "has") {
      if (args->size() != 1 || (*args)[0]->op != Op::kSelect) {
        return SyntaxError(offset, "has() takes one field selection, e.g. has(a.b)");
      }
      NodePtr select = std::move((*args)[0]);
      select->op = Op::kHas;
      return select;
    }
    if (!IsKnownGlobal(name)) {
      return Unsupported(offset, *std::move(args), absl::StrCat("function '", name, "'"));
    }
    return Make(Op::kCall, offset, *std::move(args), name);
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int recursion_ = 0;
};

}  // namespace

absl::StatusOr<NodePtr> Parse(std::vector<Token> tokens) { return Parser(std::move(tokens)).Run(); }

// Checks that every identifier is `device`, `cel` as part of cel.bind, or a bound variable,
// as the API server's type check does. Recursion is bounded by the tree depth.
absl::Status Resolve(const Node& node, std::vector<std::string>& scope) {
  if (node.op == Op::kIdent) {
    if (node.name == "device" || std::find(scope.begin(), scope.end(), node.name) != scope.end()) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("undeclared reference to '", node.name, "' (only 'device' is declared)"));
  }
  if (node.op == Op::kBind) {
    if (absl::Status s = Resolve(*node.args[0], scope); !s.ok())
      return s;
    scope.push_back(node.name);
    absl::Status s = Resolve(*node.args[1], scope);
    scope.pop_back();
    return s;
  }
  if (node.op == Op::kUnsupported) {
    return absl::OkStatus();  // macros bind their own variables; never evaluated
  }
  for (const NodePtr& arg : node.args) {
    if (absl::Status s = Resolve(*arg, scope); !s.ok())
      return s;
  }
  return absl::OkStatus();
}

}  // namespace dralens::cel::internal
