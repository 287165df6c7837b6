#include "src/model/json.h"

#include <exception>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dralens::model {
namespace {

using Json = nlohmann::json;

// Longest parser message we pass on; the parser quotes the offending token, which for a
// truncated 50 MB string would be the whole string.
constexpr size_t kMaxErrorChars = 300;

std::string Shorten(std::string text) {
  if (text.size() > kMaxErrorChars) {
    text.resize(kMaxErrorChars);
    text += "...";
  }
  return text;
}

// SAX handler that builds the DOM through nlohmann's own builder while enforcing the depth
// limit and unique keys. Returning false from any event stops the parse at once, so a hostile
// document is rejected at the first level past the limit.
class LimitedSax {
 public:
  LimitedSax(Json& result, int max_depth)
      : dom_(result, /*allow_exceptions=*/false), max_depth_(max_depth) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(Json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(Json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(Json::number_float_t v, const Json::string_t& s) {
    return dom_.number_float(v, s);
  }
  bool string(Json::string_t& v) { return dom_.string(v); }
  bool binary(Json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    if (!Enter()) {
      return false;
    }
    keys_.emplace_back();
    return dom_.start_object(n);
  }
  bool key(Json::string_t& k) {
    if (!keys_.back().insert(k).second) {
      error_ = absl::StrCat("duplicate key \"", Shorten(k), "\" at depth ", depth_);
      return false;
    }
    return dom_.key(k);
  }
  bool end_object() {
    keys_.pop_back();
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (!Enter()) {
      return false;
    }
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& ex) {
    std::string message = ex.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " prefix.
    if (absl::StartsWith(message, "[json.exception.")) {
      const size_t end = message.find("] ");
      if (end != std::string::npos) {
        message = message.substr(end + 2);
      }
    }
    error_ = Shorten(std::move(message));
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  bool Enter() {
    if (++depth_ > max_depth_) {
      error_ = absl::StrCat("nesting deeper than ", max_depth_, " levels");
      return false;
    }
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  int max_depth_;
  int depth_ = 0;
  std::vector<std::unordered_set<std::string>> keys_;
  std::string error_;
};

}  // namespace

absl::StatusOr<Json> ParseJson(absl::string_view text, size_t max_bytes, int max_depth) {
  if (text.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("parse JSON: document of ", text.size(),
                                                   " bytes exceeds the limit of ", max_bytes,
                                                   " bytes"));
  }
  Json result;
  LimitedSax sax(result, max_depth);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &sax, nlohmann::json::input_format_t::json,
                         /*strict=*/true, /*ignore_comments=*/false);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("parse JSON: ", Shorten(e.what())));
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parse JSON: ", sax.error().empty() ? std::string("invalid document") : sax.error()));
  }
  return result;
}

std::string SerializeJson(const Json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

}  // namespace dralens::model
