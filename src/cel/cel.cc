#include "src/cel/cel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/common/quantity.h"

namespace dralens::cel {
namespace {

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

template <typename T>
int Cmp(const T& a, const T& b) {
  return a < b ? -1 : (b < a ? 1 : 0);
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

Value Err(std::string message) { return Value{Error{std::move(message)}}; }

const char* TypeName(const Value& value) {
  switch (value.v.index()) {
    case 0:
      return "null_type";
    case 1:
      return "bool";
    case 2:
      return "int";
    case 3:
      return "uint";
    case 4:
      return "double";
    case 5:
      return "string";
    case 6:
      return "list";
    case 7:
      return "Quantity";
    case 8:
      return "Semver";
    case 9:
      return "device";
    case 10:
      return "map";
    case 11:
      return "map";
    case 12:
      return "error";
    default:
      return "unknown";
  }
}

Value NoOverload(absl::string_view function, const Value& a) {
  return Err(absl::StrCat("no such overload: ", function, "(", TypeName(a), ")"));
}
Value NoOverload(absl::string_view function, const Value& a, const Value& b) {
  return Err(
      absl::StrCat("no such overload: ", function, "(", TypeName(a), ", ", TypeName(b), ")"));
}
// Any number of arguments, none included: "no such overload: quantity()".
Value NoOverload(absl::string_view function, const std::vector<Value>& args) {
  return Err(absl::StrCat(
      "no such overload: ", function, "(",
      absl::StrJoin(args, ", ",
                    [](std::string* out, const Value& v) { absl::StrAppend(out, TypeName(v)); }),
      ")"));
}

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

absl::Status SyntaxError(size_t offset, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("syntax error at offset ", offset, ": ", what));
}

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  explicit Lexer(absl::string_view text) : text_(text) {}

  absl::StatusOr<std::vector<Token>> Run() {
    std::vector<Token> tokens;
    while (true) {
      SkipSpaceAndComments();
      Token token;
      token.offset = pos_;
      if (pos_ >= text_.size()) {
        tokens.push_back(token);
        return tokens;
      }
      const char c = text_[pos_];
      if (absl::ascii_isdigit(c) ||
          (c == '.' && pos_ + 1 < text_.size() && absl::ascii_isdigit(text_[pos_ + 1]))) {
        if (absl::Status s = Number(token); !s.ok())
          return s;
      } else if (c == '"' || c == '\'') {
        if (absl::Status s = String(token, /*raw=*/false); !s.ok())
          return s;
        token.kind = Tok::kString;
      } else if (absl::ascii_isalpha(c) || c == '_') {
        const char lower = absl::ascii_tolower(c);
        if ((lower == 'r' || lower == 'b') && pos_ + 1 < text_.size() &&
            (text_[pos_ + 1] == '"' || text_[pos_ + 1] == '\'' ||
             (absl::ascii_tolower(text_[pos_ + 1]) == (lower == 'r' ? 'b' : 'r') &&
              pos_ + 2 < text_.size() && (text_[pos_ + 2] == '"' || text_[pos_ + 2] == '\'')))) {
          bool raw = false;
          bool bytes = false;
          while (text_[pos_] != '"' && text_[pos_] != '\'') {
            raw |= absl::ascii_tolower(text_[pos_]) == 'r';
            bytes |= absl::ascii_tolower(text_[pos_]) == 'b';
            ++pos_;
          }
          if (absl::Status s = String(token, raw); !s.ok())
            return s;
          token.kind = bytes ? Tok::kBytes : Tok::kString;
        } else {
          size_t start = pos_;
          while (pos_ < text_.size() && (absl::ascii_isalnum(text_[pos_]) || text_[pos_] == '_')) {
            ++pos_;
          }
          token.kind = Tok::kIdent;
          token.text = std::string(text_.substr(start, pos_ - start));
        }
      } else {
        static constexpr absl::string_view kTwo[] = {"==", "!=", "<=", ">=", "&&", "||"};
        token.kind = Tok::kPunct;
        for (absl::string_view two : kTwo) {
          if (text_.substr(pos_, 2) == two) {
            token.text = std::string(two);
          }
        }
        if (token.text.empty()) {
          if (absl::string_view("+-*/%!<>?:.,()[]{}").find(c) == absl::string_view::npos) {
            return SyntaxError(pos_, absl::StrCat("unexpected character '",
                                                  absl::CEscape(std::string(1, c)), "'"));
          }
          token.text = std::string(1, c);
        }
        pos_ += token.text.size();
      }
      tokens.push_back(std::move(token));
    }
  }

 private:
  void SkipSpaceAndComments() {
    while (pos_ < text_.size()) {
      if (absl::ascii_isspace(text_[pos_])) {
        ++pos_;
      } else if (text_.substr(pos_, 2) == "//") {
        while (pos_ < text_.size() && text_[pos_] != '\n')
          ++pos_;
      } else {
        return;
      }
    }
  }

  absl::Status Number(Token& token) {
    const size_t start = pos_;
    if (text_.substr(pos_, 2) == "0x" || text_.substr(pos_, 2) == "0X") {
      pos_ += 2;
      size_t digits = pos_;
      while (pos_ < text_.size() && absl::ascii_isxdigit(text_[pos_]))
        ++pos_;
      if (pos_ == digits)
        return SyntaxError(start, "hexadecimal literal without digits");
      uint64_t value = 0;
      if (!absl::SimpleHexAtoi(text_.substr(digits, pos_ - digits), &value)) {
        return SyntaxError(start, "integer literal out of range");
      }
      return IntSuffix(token, start, value);
    }
    bool is_double = false;
    while (pos_ < text_.size() && absl::ascii_isdigit(text_[pos_]))
      ++pos_;
    if (pos_ + 1 < text_.size() && text_[pos_] == '.' && absl::ascii_isdigit(text_[pos_ + 1])) {
      is_double = true;
      ++pos_;
      while (pos_ < text_.size() && absl::ascii_isdigit(text_[pos_]))
        ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      size_t e = pos_ + 1;
      if (e < text_.size() && (text_[e] == '+' || text_[e] == '-'))
        ++e;
      if (e < text_.size() && absl::ascii_isdigit(text_[e])) {
        is_double = true;
        pos_ = e;
        while (pos_ < text_.size() && absl::ascii_isdigit(text_[pos_]))
          ++pos_;
      }
    }
    absl::string_view digits = text_.substr(start, pos_ - start);
    if (is_double) {
      token.kind = Tok::kDouble;
      if (!absl::SimpleAtod(digits, &token.double_value)) {
        return SyntaxError(start, "invalid double literal");
      }
      return absl::OkStatus();
    }
    uint64_t value = 0;
    if (!absl::SimpleAtoi(digits, &value)) {
      return SyntaxError(start, "integer literal out of range");
    }
    return IntSuffix(token, start, value);
  }

  absl::Status IntSuffix(Token& token, size_t start, uint64_t value) {
    if (pos_ < text_.size() && (text_[pos_] == 'u' || text_[pos_] == 'U')) {
      ++pos_;
      token.kind = Tok::kUint;
      token.uint_value = value;
      return absl::OkStatus();
    }
    token.kind = Tok::kInt;
    token.uint_value = value;  // the parser applies a unary minus to 2^63
    if (value > uint64_t(std::numeric_limits<int64_t>::max()) + 1) {
      return SyntaxError(start, "integer literal out of range");
    }
    token.int_value = value > uint64_t(std::numeric_limits<int64_t>::max())
                          ? std::numeric_limits<int64_t>::min()
                          : int64_t(value);
    return absl::OkStatus();
  }

  // At a quote; decodes the literal into token.text.
  absl::Status String(Token& token, bool raw) {
    const size_t start = pos_;
    const char quote = text_[pos_];
    const bool triple = text_.substr(pos_, 3) == std::string(3, quote);
    pos_ += triple ? 3 : 1;
    std::string out;
    while (true) {
      if (pos_ >= text_.size())
        return SyntaxError(start, "unterminated string literal");
      const char c = text_[pos_];
      if (triple ? text_.substr(pos_, 3) == std::string(3, quote) : c == quote) {
        pos_ += triple ? 3 : 1;
        token.text = std::move(out);
        return absl::OkStatus();
      }
      if (!triple && (c == '\n' || c == '\r')) {
        return SyntaxError(pos_, "newline in string literal");
      }
      if (c != '\\' || raw) {
        out += c;
        ++pos_;
        continue;
      }
      const size_t escape = pos_;
      if (++pos_ >= text_.size())
        return SyntaxError(escape, "unterminated escape sequence");
      const char e = text_[pos_++];
      switch (e) {
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'v':
          out += '\v';
          break;
        case '\\':
        case '\'':
        case '"':
        case '`':
        case '?':
          out += e;
          break;
        case 'x':
        case 'X':
        case 'u':
        case 'U': {
          const size_t n = (e == 'u') ? 4 : (e == 'U' ? 8 : 2);
          uint32_t cp = 0;
          if (pos_ + n > text_.size() || !absl::SimpleHexAtoi(text_.substr(pos_, n), &cp) ||
              !std::all_of(text_.begin() + pos_, text_.begin() + pos_ + n,
                           [](char h) { return absl::ascii_isxdigit(h); })) {
            return SyntaxError(escape, "invalid escape sequence");
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return SyntaxError(escape, "invalid code point in escape sequence");
          }
          pos_ += n;
          AppendUtf8(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '3' && pos_ + 1 < text_.size() && text_[pos_] >= '0' &&
              text_[pos_] <= '7' && text_[pos_ + 1] >= '0' && text_[pos_ + 1] <= '7') {
            AppendUtf8(
                out, uint32_t((e - '0') * 64 + (text_[pos_] - '0') * 8 + (text_[pos_ + 1] - '0')));
            pos_ += 2;
            break;
          }
          return SyntaxError(escape, "invalid escape sequence");
      }
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Parser (CEL's grammar), with scope resolution for cel.bind.

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
      (*node)->literal = Value{cel::Unsupported{std::move(construct)}};
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

// ---------------------------------------------------------------------------------------------
// Evaluation.

struct Context {
  const DeviceView& device;
  std::vector<std::pair<const std::string*, Value>> bindings;
};

// The published name of `name` in `domain`: unqualified names belong to the driver's domain.
template <typename T>
const T* LookupName(const std::map<std::string, T>* names, absl::string_view driver,
                    absl::string_view domain, absl::string_view name) {
  if (names == nullptr)
    return nullptr;
  if (domain == driver) {
    if (auto it = names->find(std::string(name)); it != names->end())
      return &it->second;
  }
  auto it = names->find(absl::StrCat(domain, "/", name));
  return it == names->end() ? nullptr : &it->second;
}

template <typename T>
bool HasDomain(const std::map<std::string, T>* names, absl::string_view driver,
               absl::string_view domain) {
  if (names == nullptr)
    return false;
  for (const auto& [name, unused] : *names) {
    const size_t slash = name.find('/');
    absl::string_view d =
        slash == std::string::npos ? driver : absl::string_view(name).substr(0, slash);
    if (d == domain)
      return true;
  }
  return false;
}

Value AttributeValue(const model::DeviceAttribute& attribute) {
  if (const int64_t* i = attribute.AsInt())
    return Value{*i};
  if (const bool* b = attribute.AsBool())
    return Value{*b};
  if (const std::string* s = attribute.AsString())
    return Value{*s};
  const std::string* version = attribute.AsVersion();
  std::optional<SemVer> parsed = ParseSemVer(*version, /*normalize=*/false);
  if (!parsed.has_value()) {
    return Err(absl::StrCat("published version attribute '", *version, "' is not semver"));
  }
  return Value{*std::move(parsed)};
}

// m.key / m[key] on a map-like value.
Value Lookup(const Context& ctx, const Value& map, const Value& key) {
  if (map.IsAbnormal())
    return map;
  if (key.IsAbnormal())
    return key;
  const std::string* k = key.Get<std::string>();
  if (map.Get<DeviceRef>() != nullptr) {
    if (k == nullptr)
      return NoOverload("_[_]", map, key);
    if (*k == "driver")
      return Value{std::string(ctx.device.driver)};
    if (*k == "attributes")
      return Value{Domains{false}};
    if (*k == "capacity")
      return Value{Domains{true}};
    if (*k == "allowMultipleAllocations") {
      return Value{cel::Unsupported{"device.allowMultipleAllocations"}};
    }
    return Err(absl::StrCat("no such key: ", *k));
  }
  if (const Domains* domains = map.Get<Domains>()) {
    if (k == nullptr)
      return NoOverload("_[_]", map, key);
    // A domain the device does not publish reads as an empty map, as in the scheduler.
    return Value{DomainGroup{domains->capacity, *k}};
  }
  if (const DomainGroup* group = map.Get<DomainGroup>()) {
    if (k == nullptr)
      return NoOverload("_[_]", map, key);
    const absl::string_view where = group->capacity ? "capacity" : "attributes";
    if (group->capacity) {
      if (const auto* c = LookupName(ctx.device.capacity, ctx.device.driver, group->domain, *k)) {
        return Value{c->value};
      }
    } else if (const auto* a =
                   LookupName(ctx.device.attributes, ctx.device.driver, group->domain, *k)) {
      return AttributeValue(*a);
    }
    return Err(absl::StrCat("no such key: ", *k, " (device.", where, "['", group->domain, "'])"));
  }
  if (const ListPtr* list = map.Get<ListPtr>()) {
    const int64_t* i = key.Get<int64_t>();
    const uint64_t* u = key.Get<uint64_t>();
    if (i == nullptr && u == nullptr)
      return NoOverload("_[_]", map, key);
    const int64_t index = i != nullptr ? *i : int64_t(std::min<uint64_t>(*u, INT64_MAX));
    if (index < 0 || size_t(index) >= (*list)->size()) {
      return Err(absl::StrCat("index out of range: ", index));
    }
    return (**list)[size_t(index)];
  }
  return NoOverload("_[_]", map, key);
}

bool IsNumber(const Value& v) {
  return v.Get<int64_t>() != nullptr || v.Get<uint64_t>() != nullptr || v.Get<double>() != nullptr;
}

// Numeric comparison across int, uint and double, exact where the types allow.
int CompareNumbers(const Value& a, const Value& b) {
  if (const int64_t* x = a.Get<int64_t>()) {
    if (const int64_t* y = b.Get<int64_t>())
      return Cmp(*x, *y);
    if (const uint64_t* y = b.Get<uint64_t>())
      return *x < 0 ? -1 : Cmp(uint64_t(*x), *y);
  }
  if (const uint64_t* x = a.Get<uint64_t>()) {
    if (const uint64_t* y = b.Get<uint64_t>())
      return Cmp(*x, *y);
    if (const int64_t* y = b.Get<int64_t>())
      return *y < 0 ? 1 : Cmp(*x, uint64_t(*y));
  }
  auto as_double = [](const Value& v) {
    if (const int64_t* i = v.Get<int64_t>())
      return double(*i);
    if (const uint64_t* u = v.Get<uint64_t>())
      return double(*u);
    return *v.Get<double>();
  };
  const double x = as_double(a);
  const double y = as_double(b);
  return x < y ? -1 : (x > y ? 1 : 0);
}

bool HasNaN(const Value& a, const Value& b) {
  const double* x = a.Get<double>();
  const double* y = b.Get<double>();
  return (x != nullptr && std::isnan(*x)) || (y != nullptr && std::isnan(*y));
}

// Heterogeneous equality: values of different kinds are unequal, numbers compare by value.
std::optional<bool> Equal(const Value& a, const Value& b) {
  if (IsNumber(a) && IsNumber(b)) {
    return !HasNaN(a, b) && CompareNumbers(a, b) == 0;
  }
  if (a.v.index() != b.v.index())
    return false;
  if (a.Get<Null>() != nullptr)
    return true;
  if (const bool* x = a.Get<bool>())
    return *x == *b.Get<bool>();
  if (const std::string* x = a.Get<std::string>())
    return *x == *b.Get<std::string>();
  if (const Quantity* x = a.Get<Quantity>())
    return *x == *b.Get<Quantity>();
  if (const SemVer* x = a.Get<SemVer>())
    return CompareSemVer(*x, *b.Get<SemVer>()) == 0;
  if (const ListPtr* x = a.Get<ListPtr>()) {
    const ListPtr& y = *b.Get<ListPtr>();
    if ((*x)->size() != y->size())
      return false;
    for (size_t i = 0; i < y->size(); ++i) {
      std::optional<bool> e = Equal((**x)[i], (*y)[i]);
      if (!e.has_value() || !*e)
        return e;
    }
    return true;
  }
  return std::nullopt;  // maps of the device: not compared here
}

Value Relational(absl::string_view op, const Value& a, const Value& b) {
  int c = 0;
  if (IsNumber(a) && IsNumber(b)) {
    if (HasNaN(a, b))
      return Value{false};
    c = CompareNumbers(a, b);
  } else if (a.v.index() != b.v.index()) {
    return NoOverload(absl::StrCat("_", op, "_"), a, b);
  } else if (const std::string* x = a.Get<std::string>()) {
    c = Cmp(*x, *b.Get<std::string>());
  } else if (const bool* x = a.Get<bool>()) {
    c = Cmp(*x, *b.Get<bool>());
  } else {
    // Quantity and Semver order through compareTo(), not through operators.
    return NoOverload(absl::StrCat("_", op, "_"), a, b);
  }
  if (op == "<")
    return Value{c < 0};
  if (op == "<=")
    return Value{c <= 0};
  if (op == ">")
    return Value{c > 0};
  return Value{c >= 0};
}

// +, -, *, / and % on two int64 or two uint64 values, with CEL's overflow and zero errors.
template <typename T>
Value IntegerArithmetic(char o, T x, T y) {
  T r = 0;
  bool overflow = false;
  switch (o) {
    case '+':
      overflow = __builtin_add_overflow(x, y, &r);
      break;
    case '-':
      overflow = __builtin_sub_overflow(x, y, &r);
      break;
    case '*':
      overflow = __builtin_mul_overflow(x, y, &r);
      break;
    case '/':
    case '%':
      if (y == 0)
        return Err(o == '/' ? "division by zero" : "modulus by zero");
      if constexpr (std::is_signed_v<T>) {
        if (x == std::numeric_limits<T>::min() && y == -1) {
          overflow = o == '/';  // the quotient does not fit; the remainder is 0
          break;
        }
      }
      r = o == '/' ? x / y : x % y;
      break;
  }
  if (overflow)
    return Err(std::is_signed_v<T> ? "integer overflow" : "unsigned integer overflow");
  return Value{r};
}

Value Arithmetic(absl::string_view op, const Value& a, const Value& b) {
  const char o = op[0];
  if (const int64_t* x = a.Get<int64_t>(); x != nullptr && b.Get<int64_t>() != nullptr) {
    return IntegerArithmetic<int64_t>(o, *x, *b.Get<int64_t>());
  }
  if (const uint64_t* x = a.Get<uint64_t>(); x != nullptr && b.Get<uint64_t>() != nullptr) {
    return IntegerArithmetic<uint64_t>(o, *x, *b.Get<uint64_t>());
  }
  if (const double* x = a.Get<double>(); x != nullptr && b.Get<double>() != nullptr) {
    const double y = *b.Get<double>();
    switch (o) {
      case '+':
        return Value{*x + y};
      case '-':
        return Value{*x - y};
      case '*':
        return Value{*x * y};
      case '/':
        return Value{*x / y};
      default:
        break;
    }
  }
  if (o == '+') {
    if (const std::string* x = a.Get<std::string>(); x != nullptr && b.Get<std::string>()) {
      return Value{absl::StrCat(*x, *b.Get<std::string>())};
    }
    if (const ListPtr* x = a.Get<ListPtr>(); x != nullptr && b.Get<ListPtr>()) {
      auto joined = std::make_shared<std::vector<Value>>(**x);
      const ListPtr& y = *b.Get<ListPtr>();
      joined->insert(joined->end(), y->begin(), y->end());
      return Value{ListPtr(std::move(joined))};
    }
  }
  return NoOverload(absl::StrCat("_", op, "_"), a, b);
}

Value In(const Context& ctx, const Value& element, const Value& container) {
  if (const ListPtr* list = container.Get<ListPtr>()) {
    for (const Value& item : **list) {
      std::optional<bool> e = Equal(element, item);
      if (e.has_value() && *e)
        return Value{true};
    }
    return Value{false};
  }
  const std::string* key = element.Get<std::string>();
  if (const Domains* domains = container.Get<Domains>()) {
    if (key == nullptr)
      return NoOverload("@in", element, container);
    return Value{domains->capacity ? HasDomain(ctx.device.capacity, ctx.device.driver, *key)
                                   : HasDomain(ctx.device.attributes, ctx.device.driver, *key)};
  }
  if (container.Get<DomainGroup>() != nullptr || container.Get<DeviceRef>() != nullptr) {
    if (key == nullptr)
      return NoOverload("@in", element, container);
    return Value{!Lookup(ctx, container, element).IsError()};
  }
  return NoOverload("@in", element, container);
}

// A quantity argument of add()/sub(): a Quantity or an int.
std::optional<Quantity> QuantityOperand(const Value& v) {
  if (const Quantity* q = v.Get<Quantity>())
    return *q;
  if (const int64_t* i = v.Get<int64_t>())
    return Quantity::FromInt64(*i);
  return std::nullopt;
}

// The int a quantity holds exactly, if any (Kubernetes' AsInt64).
std::optional<int64_t> QuantityInteger(const Quantity& q) {
  const int64_t units = q.Value();
  if (Quantity::FromInt64(units) != q)
    return std::nullopt;
  return units;
}

size_t CodePoints(absl::string_view s) {
  return size_t(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

Value CallFunction(const Node& node, std::vector<Value>& args) {
  const std::string& f = node.name;
  if (!node.member) {
    if (args.size() == 1 && f == "size") {
      if (const std::string* s = args[0].Get<std::string>())
        return Value{int64_t(CodePoints(*s))};
      if (const ListPtr* l = args[0].Get<ListPtr>())
        return Value{int64_t((*l)->size())};
      return NoOverload(f, args[0]);
    }
    const std::string* text = args.empty() ? nullptr : args[0].Get<std::string>();
    const bool* normalize = args.size() == 2 ? args[1].Get<bool>() : nullptr;
    if (f == "quantity" || f == "isQuantity") {
      if (args.size() != 1 || text == nullptr)
        return NoOverload(f, args);
      absl::StatusOr<Quantity> q = Quantity::Parse(*text);
      if (f == "isQuantity")
        return Value{q.ok()};
      if (!q.ok())
        return Err(std::string(q.status().message()));
      return Value{*q};
    }
    if (f == "semver" || f == "isSemver") {
      if (text == nullptr || (args.size() == 2 && normalize == nullptr) || args.size() > 2) {
        return NoOverload(f, args);
      }
      std::optional<SemVer> v = ParseSemVer(*text, normalize != nullptr && *normalize);
      if (f == "isSemver")
        return Value{v.has_value()};
      if (!v.has_value())
        return Err(absl::StrCat("invalid semver: '", *text, "'"));
      return Value{*std::move(v)};
    }
    return Err(absl::StrCat("no such overload: ", f));
  }
  const Value& self = args[0];
  const size_t n = args.size() - 1;
  const Value* arg = n >= 1 ? &args[1] : nullptr;
  if (const std::string* s = self.Get<std::string>()) {
    if (f == "size" && n == 0)
      return Value{int64_t(CodePoints(*s))};
    const std::string* other = arg != nullptr && n == 1 ? arg->Get<std::string>() : nullptr;
    if (other != nullptr) {
      if (f == "startsWith")
        return Value{absl::StartsWith(*s, *other)};
      if (f == "endsWith")
        return Value{absl::EndsWith(*s, *other)};
      if (f == "contains")
        return Value{absl::StrContains(*s, *other)};
    }
  }
  if (const ListPtr* l = self.Get<ListPtr>(); l != nullptr && f == "size" && n == 0) {
    return Value{int64_t((*l)->size())};
  }
  if (const Quantity* q = self.Get<Quantity>()) {
    if (n == 0) {
      if (f == "isInteger")
        return Value{QuantityInteger(*q).has_value()};
      if (f == "asInteger") {
        std::optional<int64_t> i = QuantityInteger(*q);
        if (!i.has_value())
          return Err(absl::StrCat("cannot convert value to integer: ", q->String()));
        return Value{*i};
      }
      if (f == "asApproximateFloat")
        return Value{q->AsApproximateDouble()};
      if (f == "sign")
        return Value{int64_t(q->Sign())};
    }
    if (n == 1) {
      if (const Quantity* other = arg->Get<Quantity>()) {
        const int c = q->Compare(*other);
        if (f == "compareTo")
          return Value{int64_t(c)};
        if (f == "isGreaterThan")
          return Value{c > 0};
        if (f == "isLessThan")
          return Value{c < 0};
      }
      if (std::optional<Quantity> other = QuantityOperand(*arg);
          other.has_value() && (f == "add" || f == "sub")) {
        Quantity result = *q;
        absl::Status s = f == "add" ? result.Add(*other) : result.Sub(*other);
        if (!s.ok())
          return Err(std::string(s.message()));
        return Value{result};
      }
    }
  }
  if (const SemVer* v = self.Get<SemVer>()) {
    if (n == 0) {
      if (f == "major")
        return Value{int64_t(v->major)};
      if (f == "minor")
        return Value{int64_t(v->minor)};
      if (f == "patch")
        return Value{int64_t(v->patch)};
    }
    if (const SemVer* other = n == 1 ? arg->Get<SemVer>() : nullptr) {
      const int c = CompareSemVer(*v, *other);
      if (f == "compareTo")
        return Value{int64_t(c)};
      if (f == "isGreaterThan")
        return Value{c > 0};
      if (f == "isLessThan")
        return Value{c < 0};
    }
  }
  if (arg != nullptr)
    return NoOverload(f, self, *arg);
  return NoOverload(f, self);
}

// Merges abnormal operands: an unsupported construct wins over an error (its real value might
// have decided the result), the first of each kind wins.
const Value* FirstAbnormal(const std::vector<Value>& values) {
  const Value* error = nullptr;
  for (const Value& v : values) {
    if (v.IsUnsupported())
      return &v;
    if (v.IsError() && error == nullptr)
      error = &v;
  }
  return error;
}
const Value* FirstAbnormal(const Value& a, const Value& b) {
  if (a.IsUnsupported())
    return &a;
  if (b.IsUnsupported())
    return &b;
  if (a.IsError())
    return &a;
  if (b.IsError())
    return &b;
  return nullptr;
}

Value Eval(const Node& node, Context& ctx) {
  switch (node.op) {
    case Op::kLiteral:
      return node.literal;
    case Op::kUnsupported:
      return node.literal;
    case Op::kIdent: {
      for (auto it = ctx.bindings.rbegin(); it != ctx.bindings.rend(); ++it) {
        if (*it->first == node.name)
          return it->second;
      }
      return Value{DeviceRef{}};  // Resolve() admitted only `device` otherwise
    }
    case Op::kSelect: {
      Value target = Eval(*node.args[0], ctx);
      return Lookup(ctx, target, Value{node.name});
    }
    case Op::kHas: {
      Value target = Eval(*node.args[0], ctx);
      if (target.IsAbnormal())
        return target;
      if (target.Get<DeviceRef>() == nullptr && target.Get<Domains>() == nullptr &&
          target.Get<DomainGroup>() == nullptr) {
        return NoOverload("has", target);
      }
      if (target.Get<Domains>() != nullptr) {
        return In(ctx, Value{node.name}, target);
      }
      Value found = Lookup(ctx, target, Value{node.name});
      if (found.IsUnsupported())
        return found;
      return Value{!found.IsError()};
    }
    case Op::kIndex: {
      Value target = Eval(*node.args[0], ctx);
      Value key = Eval(*node.args[1], ctx);
      return Lookup(ctx, target, key);
    }
    case Op::kList: {
      auto items = std::make_shared<std::vector<Value>>();
      items->reserve(node.args.size());
      for (const NodePtr& arg : node.args) {
        items->push_back(Eval(*arg, ctx));
      }
      if (const Value* bad = FirstAbnormal(*items))
        return *bad;
      return Value{ListPtr(std::move(items))};
    }
    case Op::kCall: {
      std::vector<Value> args;
      args.reserve(node.args.size());
      for (const NodePtr& arg : node.args) {
        args.push_back(Eval(*arg, ctx));
      }
      if (const Value* bad = FirstAbnormal(args))
        return *bad;
      return CallFunction(node, args);
    }
    case Op::kNot: {
      Value v = Eval(*node.args[0], ctx);
      if (v.IsAbnormal())
        return v;
      if (const bool* b = v.Get<bool>())
        return Value{!*b};
      return NoOverload("!_", v);
    }
    case Op::kNeg: {
      Value v = Eval(*node.args[0], ctx);
      if (v.IsAbnormal())
        return v;
      if (const int64_t* i = v.Get<int64_t>()) {
        if (*i == std::numeric_limits<int64_t>::min())
          return Err("integer overflow");
        return Value{-*i};
      }
      if (const double* d = v.Get<double>())
        return Value{-*d};
      return NoOverload("-_", v);
    }
    case Op::kAnd:
    case Op::kOr: {
      // Commutative: a deciding operand (false for &&, true for ||) wins on either side, over
      // errors and unsupported constructs alike.
      const bool decider = node.op == Op::kOr;
      Value left = Eval(*node.args[0], ctx);
      if (const bool* b = left.Get<bool>(); b != nullptr && *b == decider)
        return left;
      Value right = Eval(*node.args[1], ctx);
      if (const bool* b = right.Get<bool>(); b != nullptr && *b == decider)
        return right;
      for (Value* v : {&left, &right}) {
        if (!v->IsAbnormal() && v->Get<bool>() == nullptr) {
          *v = NoOverload(node.op == Op::kOr ? "_||_" : "_&&_", *v);
        }
      }
      if (const Value* bad = FirstAbnormal(left, right))
        return *bad;
      return Value{!decider};
    }
    case Op::kTernary: {
      Value cond = Eval(*node.args[0], ctx);
      if (cond.IsAbnormal())
        return cond;
      const bool* b = cond.Get<bool>();
      if (b == nullptr)
        return NoOverload("_?_:_", cond);
      return Eval(*node.args[*b ? 1 : 2], ctx);
    }
    case Op::kBinary: {
      Value a = Eval(*node.args[0], ctx);
      Value b = Eval(*node.args[1], ctx);
      if (const Value* bad = FirstAbnormal(a, b))
        return *bad;
      const std::string& op = node.name;
      if (op == "==" || op == "!=") {
        std::optional<bool> e = Equal(a, b);
        if (!e.has_value())
          return NoOverload(absl::StrCat("_", op, "_"), a, b);
        return Value{op == "==" ? *e : !*e};
      }
      if (op == "in")
        return In(ctx, a, b);
      if (op == "<" || op == "<=" || op == ">" || op == ">=")
        return Relational(op, a, b);
      return Arithmetic(op, a, b);
    }
    case Op::kBind: {
      Value init = Eval(*node.args[0], ctx);
      ctx.bindings.emplace_back(&node.name, std::move(init));
      Value result = Eval(*node.args[1], ctx);
      ctx.bindings.pop_back();
      return result;
    }
  }
  return Err("internal: unknown node");
}

}  // namespace

absl::string_view ToString(Verdict verdict) {
  switch (verdict) {
    case Verdict::kTrue:
      return "true";
    case Verdict::kFalse:
      return "false";
    case Verdict::kUnknown:
      return "unknown";
  }
  return "unknown";
}

struct Program::Impl {
  std::string expression;
  NodePtr root;
};

absl::StatusOr<Program> Program::Compile(absl::string_view expression) {
  if (expression.size() > kMaxExpressionBytes) {
    return absl::InvalidArgumentError(absl::StrCat("expression is ", expression.size(),
                                                   " bytes, more than the API's limit of ",
                                                   kMaxExpressionBytes));
  }
  absl::StatusOr<std::vector<Token>> tokens = Lexer(expression).Run();
  if (!tokens.ok())
    return tokens.status();
  absl::StatusOr<NodePtr> root = Parser(*std::move(tokens)).Run();
  if (!root.ok())
    return root.status();
  std::vector<std::string> scope;
  if (absl::Status s = Resolve(**root, scope); !s.ok())
    return s;
  auto impl = std::make_shared<Impl>();
  impl->expression = std::string(expression);
  impl->root = *std::move(root);
  return Program(std::move(impl));
}

Outcome Program::Evaluate(const DeviceView& device) const {
  Context ctx{device, {}};
  Value result = Eval(*impl_->root, ctx);
  Outcome outcome;
  if (const bool* b = result.Get<bool>()) {
    outcome.verdict = *b ? Verdict::kTrue : Verdict::kFalse;
  } else if (const cel::Unsupported* u = result.Get<cel::Unsupported>()) {
    outcome.verdict = Verdict::kUnknown;
    outcome.detail = absl::StrCat("outside the supported CEL subset: ", u->construct);
  } else if (const Error* e = result.Get<Error>()) {
    outcome.verdict = Verdict::kFalse;
    outcome.runtime_error = true;
    outcome.detail = absl::StrCat("CEL runtime error: ", e->message);
  } else {
    outcome.verdict = Verdict::kFalse;
    outcome.runtime_error = true;
    outcome.detail = absl::StrCat("expression evaluates to ", TypeName(result), ", not bool");
  }
  return outcome;
}

const std::string& Program::expression() const { return impl_->expression; }

Program::Program(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
Program::~Program() = default;
Program::Program(Program&&) noexcept = default;
Program& Program::operator=(Program&&) noexcept = default;
Program::Program(const Program&) = default;
Program& Program::operator=(const Program&) = default;

}  // namespace dralens::cel
