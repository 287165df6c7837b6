#include "src/sim/selectors.h"

#include <cctype>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "src/sim/names.h"

namespace dralens::sim {
namespace {

// Splits `text` on top-level commas (commas inside parentheses belong to set values).
std::vector<std::string> SplitRequirements(absl::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : text) {
    if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    }
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
      continue;
    }
    cur.push_back(c);
  }
  out.push_back(cur);
  return out;
}

absl::Status ParseError(absl::string_view req, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("unable to parse requirement: ", why, " (in \"", req, "\")"));
}

absl::Status CheckKey(absl::string_view req, absl::string_view key) {
  std::vector<std::string> errs = CheckQualifiedName(key);
  if (!errs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unable to parse requirement: key: Invalid value: \"", key,
                     "\": ", absl::StrJoin(errs, "; "), " (in \"", req, "\")"));
  }
  return absl::OkStatus();
}

absl::Status CheckValue(absl::string_view req, absl::string_view value) {
  std::vector<std::string> errs = CheckLabelValue(value);
  if (!errs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unable to parse requirement: values[0]: Invalid value: \"", value,
                     "\": ", absl::StrJoin(errs, "; "), " (in \"", req, "\")"));
  }
  return absl::OkStatus();
}

bool IsKeyChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
         c == '/';
}

}  // namespace

absl::StatusOr<LabelSelector> LabelSelector::Parse(absl::string_view text) {
  LabelSelector sel;
  if (absl::StripAsciiWhitespace(text).empty()) {
    return sel;
  }
  for (const std::string& raw : SplitRequirements(text)) {
    absl::string_view req = absl::StripAsciiWhitespace(raw);
    if (req.empty()) {
      return ParseError(raw, "found '', expected: !, identifier, or 'end of string'");
    }
    Requirement r;
    if (req[0] == '!') {
      absl::string_view key = absl::StripAsciiWhitespace(req.substr(1));
      absl::Status st = CheckKey(req, key);
      if (!st.ok()) {
        return st;
      }
      r.key = std::string(key);
      r.op = Op::kDoesNotExist;
      sel.requirements_.push_back(std::move(r));
      continue;
    }
    size_t i = 0;
    while (i < req.size() && IsKeyChar(req[i])) {
      ++i;
    }
    absl::string_view key = req.substr(0, i);
    absl::string_view rest = absl::StripAsciiWhitespace(req.substr(i));
    absl::Status st = CheckKey(req, key);
    if (!st.ok()) {
      return st;
    }
    r.key = std::string(key);
    if (rest.empty()) {
      r.op = Op::kExists;
      sel.requirements_.push_back(std::move(r));
      continue;
    }
    absl::string_view value;
    bool set_op = false;
    if (absl::ConsumePrefix(&rest, "==")) {
      r.op = Op::kEquals;
    } else if (absl::ConsumePrefix(&rest, "!=")) {
      r.op = Op::kNotEquals;
    } else if (absl::ConsumePrefix(&rest, "=")) {
      r.op = Op::kEquals;
    } else if (absl::ConsumePrefix(&rest, ">")) {
      r.op = Op::kGreaterThan;
    } else if (absl::ConsumePrefix(&rest, "<")) {
      r.op = Op::kLessThan;
    } else if (absl::ConsumePrefix(&rest, "notin")) {
      r.op = Op::kNotIn;
      set_op = true;
    } else if (absl::ConsumePrefix(&rest, "in")) {
      r.op = Op::kIn;
      set_op = true;
    } else {
      return ParseError(req,
                        absl::StrCat("found '", rest, "', expected: in, notin, =, ==, !=, gt, lt"));
    }
    rest = absl::StripAsciiWhitespace(rest);
    if (set_op) {
      if (!absl::ConsumePrefix(&rest, "(") || !absl::ConsumeSuffix(&rest, ")")) {
        return ParseError(req, "found '" + std::string(rest) + "', expected: '('");
      }
      for (const std::string& v : SplitRequirements(rest)) {
        absl::string_view val = absl::StripAsciiWhitespace(v);
        st = CheckValue(req, val);
        if (!st.ok()) {
          return st;
        }
        r.values.emplace_back(val);
      }
    } else {
      value = rest;
      if (r.op == Op::kGreaterThan || r.op == Op::kLessThan) {
        int64_t n = 0;
        if (!absl::SimpleAtoi(value, &n)) {
          return ParseError(req, "for 'Gt', 'Lt' operators, the value must be an integer");
        }
      } else {
        st = CheckValue(req, value);
        if (!st.ok()) {
          return st;
        }
      }
      r.values.emplace_back(value);
    }
    sel.requirements_.push_back(std::move(r));
  }
  return sel;
}

bool LabelSelector::Matches(const std::map<std::string, std::string>& labels) const {
  for (const Requirement& r : requirements_) {
    auto it = labels.find(r.key);
    bool has = it != labels.end();
    switch (r.op) {
      case Op::kExists:
        if (!has) {
          return false;
        }
        break;
      case Op::kDoesNotExist:
        if (has) {
          return false;
        }
        break;
      case Op::kEquals:
        if (!has || it->second != r.values[0]) {
          return false;
        }
        break;
      case Op::kNotEquals:
        if (has && it->second == r.values[0]) {
          return false;
        }
        break;
      case Op::kIn: {
        if (!has) {
          return false;
        }
        bool found = false;
        for (const std::string& v : r.values) {
          found = found || v == it->second;
        }
        if (!found) {
          return false;
        }
        break;
      }
      case Op::kNotIn:
        if (has) {
          for (const std::string& v : r.values) {
            if (v == it->second) {
              return false;
            }
          }
        }
        break;
      case Op::kGreaterThan:
      case Op::kLessThan: {
        int64_t have = 0;
        int64_t want = 0;
        if (!has || !absl::SimpleAtoi(it->second, &have) || !absl::SimpleAtoi(r.values[0], &want)) {
          return false;
        }
        if (r.op == Op::kGreaterThan ? !(have > want) : !(have < want)) {
          return false;
        }
        break;
      }
    }
  }
  return true;
}

absl::StatusOr<FieldSelector> FieldSelector::Parse(absl::string_view text) {
  FieldSelector sel;
  if (text.empty()) {
    return sel;
  }
  // Split on unescaped commas, then each term on its first unescaped operator.
  std::vector<std::string> raw_terms;
  std::string cur;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      cur.push_back(text[i]);
      cur.push_back(text[++i]);
      continue;
    }
    if (text[i] == ',') {
      raw_terms.push_back(cur);
      cur.clear();
      continue;
    }
    cur.push_back(text[i]);
  }
  raw_terms.push_back(cur);
  for (const std::string& raw : raw_terms) {
    Term t;
    size_t op_pos = std::string::npos;
    size_t op_len = 0;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\\') {
        ++i;
        continue;
      }
      if (raw.compare(i, 2, "!=") == 0) {
        op_pos = i;
        op_len = 2;
        t.negated = true;
        break;
      }
      if (raw.compare(i, 2, "==") == 0) {
        op_pos = i;
        op_len = 2;
        break;
      }
      if (raw[i] == '=') {
        op_pos = i;
        op_len = 1;
        break;
      }
    }
    if (op_pos == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid selector: '", text, "'; can't understand '", raw, "'"));
    }
    t.field = raw.substr(0, op_pos);
    std::string escaped = raw.substr(op_pos + op_len);
    for (size_t i = 0; i < escaped.size(); ++i) {
      if (escaped[i] == '\\') {
        if (i + 1 >= escaped.size() ||
            (escaped[i + 1] != '\\' && escaped[i + 1] != ',' && escaped[i + 1] != '=')) {
          return absl::InvalidArgumentError(
              absl::StrCat("invalid field selector value escape in '", raw, "'"));
        }
        ++i;
      } else if (escaped[i] == '=' || escaped[i] == ',') {
        return absl::InvalidArgumentError(
            absl::StrCat("invalid selector: '", text, "'; can't understand '", raw, "'"));
      }
      t.value.push_back(escaped[i]);
    }
    if (t.field.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid selector: '", text, "'; can't understand '", raw, "'"));
    }
    sel.terms_.push_back(std::move(t));
  }
  return sel;
}

bool FieldSelector::Matches(const std::map<std::string, std::string>& fields) const {
  for (const Term& t : terms_) {
    auto it = fields.find(t.field);
    std::string have = it == fields.end() ? "" : it->second;
    if ((have == t.value) == t.negated) {
      return false;
    }
  }
  return true;
}

}  // namespace dralens::sim
