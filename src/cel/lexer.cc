// Lexer: the tokens of an expression, with literals decoded.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/cel/internal.h"

namespace dralens::cel::internal {

absl::Status SyntaxError(size_t offset, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("syntax error at offset ", offset, ": ", what));
}

namespace {

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

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(absl::string_view text) { return Lexer(text).Run(); }

}  // namespace dralens::cel::internal
