#include "src/k8s/projection.h"

#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "simdjson.h"

namespace dralens::k8s {
namespace {

namespace od = simdjson::ondemand;
using nlohmann::json;

absl::Status Malformed(simdjson::error_code error) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed JSON: ", simdjson::error_message(error)));
}

// A value kept whole: its text, parsed as a full parse would.
absl::Status ParseWhole(std::string_view text, json* out) {
  // nlohmann takes a NUL byte for the end of the input and would accept "1\0garbage" as 1;
  // a NUL is never valid JSON text (outside strings it is no token, inside one it must be
  // escaped), and simdjson leaves one inside a scalar's token.
  if (text.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError("malformed JSON: NUL byte");
  }
  *out = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) {
    return absl::InvalidArgumentError("malformed JSON value");
  }
  return absl::OkStatus();
}

// A value's JSON text as it was sent, whitespace around it left out.
absl::Status RawText(od::value& value, od::json_type type, std::string_view* out) {
  simdjson::error_code e = simdjson::SUCCESS;
  if (type == od::json_type::object) {
    od::object object;
    e = value.get_object().get(object);
    if (!e) {
      e = object.raw_json().get(*out);
    }
  } else if (type == od::json_type::array) {
    od::array array;
    e = value.get_array().get(array);
    if (!e) {
      e = array.raw_json().get(*out);
    }
  } else {
    *out = value.raw_json_token();  // a value's token is a plain string_view
  }
  if (e) {
    return Malformed(e);
  }
  while (!out->empty() && (out->back() == ' ' || out->back() == '\t' || out->back() == '\n' ||
                           out->back() == '\r')) {
    out->remove_suffix(1);
  }
  return absl::OkStatus();
}

// `V` is od::value or od::document, which offer the same calls.
template <typename V>
absl::Status ProjectValue(V& value, const Projection& projection, json* out) {
  od::json_type type;
  if (simdjson::error_code e = value.type().get(type)) {
    return Malformed(e);
  }
  if constexpr (std::is_same_v<V, od::value>) {
    if (projection.text() && type != od::json_type::array) {
      std::string_view text;
      if (absl::Status s = RawText(value, type, &text); !s.ok()) {
        return s;
      }
      *out = std::string(text);
      return absl::OkStatus();
    }
  }
  if (type == od::json_type::object) {
    od::object object;
    if (simdjson::error_code e = value.get_object().get(object)) {
      return Malformed(e);
    }
    *out = json::object();
    for (simdjson::simdjson_result<od::field> field : object) {
      std::string_view key;
      if (simdjson::error_code e = field.unescaped_key().get(key)) {
        return Malformed(e);
      }
      // Within a value kept whole, every field is kept whole.
      const Projection* child = projection.whole()
                                    ? &projection
                                    : projection.Field(absl::string_view(key.data(), key.size()));
      if (child == nullptr) {
        continue;  // the iterator skips the value
      }
      // The key is built in place in the map's node: no temporary string.
      json& slot = out->get_ref<json::object_t&>()
                       .emplace(std::piecewise_construct, std::forward_as_tuple(key),
                                std::forward_as_tuple())
                       .first->second;
      slot = json();  // a repeated key: the last one wins, as in a full parse
      od::value child_value;
      if (simdjson::error_code e = field.value().get(child_value)) {
        return Malformed(e);
      }
      if (absl::Status s = ProjectValue(child_value, *child, &slot); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  if (type == od::json_type::array) {
    od::array array;
    if (simdjson::error_code e = value.get_array().get(array)) {
      return Malformed(e);
    }
    *out = json::array();
    for (simdjson::simdjson_result<od::value> element : array) {
      od::value element_value;
      if (simdjson::error_code e = element.get(element_value)) {
        return Malformed(e);
      }
      json item;
      if (absl::Status s = ProjectValue(element_value, projection, &item); !s.ok()) {
        return s;
      }
      out->push_back(std::move(item));
    }
    return absl::OkStatus();
  }
  if (type == od::json_type::string) {
    std::string_view text;
    if (simdjson::error_code e = value.get_string().get(text)) {
      return Malformed(e);
    }
    *out = std::string(text);
    return absl::OkStatus();
  }
  // Numbers and literals: nlohmann reads the token, so that a number gets the same type
  // (unsigned, signed or floating) and value as in a full parse.
  std::string_view token;
  // A document answers a plain string_view, a value a simdjson_result.
  simdjson::simdjson_result<std::string_view> raw = value.raw_json_token();
  if (simdjson::error_code e = std::move(raw).get(token)) {
    return Malformed(e);
  }
  return ParseWhole(token, out);
}

od::parser& ThreadParser() {
  thread_local od::parser parser;
  return parser;
}

std::string& ThreadPadded() {
  thread_local std::string padded;
  return padded;
}

}  // namespace

void ReleaseProjectionBuffers() {
  ThreadParser() = od::parser();
  std::string().swap(ThreadPadded());
}

Projection Projection::Paths(absl::Span<const absl::string_view> paths,
                             absl::Span<const absl::string_view> text_paths) {
  Projection p;
  p.whole_ = false;
  for (absl::string_view path : paths) {
    p.AddPath(path);
  }
  for (absl::string_view path : text_paths) {
    if (Projection* node = p.AddPath(path); node != nullptr) {
      node->text_ = true;
    }
  }
  return p;
}

Projection Projection::Fields(
    std::initializer_list<std::pair<const std::string, Projection>> fields) {
  Projection p;
  p.whole_ = false;
  p.fields_ = std::map<std::string, Projection, std::less<>>(fields);
  return p;
}

Projection* Projection::AddPath(absl::string_view path) {
  Projection* node = this;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    if (node->whole_) {
      return nullptr;  // kept whole already
    }
    auto [it, inserted] = node->fields_.try_emplace(std::string(part));
    if (inserted) {
      it->second.whole_ = false;
    }
    node = &it->second;
  }
  node->whole_ = true;
  node->fields_.clear();
  return node;
}

const Projection* Projection::Field(absl::string_view name) const {
  auto it = fields_.find(name);
  return it == fields_.end() ? nullptr : &it->second;
}

absl::StatusOr<json> ParseProjected(absl::string_view text, const Projection& projection) {
  // One parser and one padded copy of the text per thread, reused: a LIST page needs buffers
  // several times its size, and allocating them afresh for every page (page faults included)
  // doubled the CPU of a 100k-claim sync. ReleaseProjectionBuffers() gives them back.
  od::parser& parser = ThreadParser();
  std::string& padded = ThreadPadded();
  padded.assign(text.data(), text.size());
  padded.resize(text.size() + simdjson::SIMDJSON_PADDING, ' ');
  od::document doc;
  if (simdjson::error_code e = parser.iterate(padded.data(), text.size(), padded.size()).get(doc)) {
    return Malformed(e);
  }
  json out;
  // A scalar document has nothing to project. simdjson does not move past a root scalar when
  // it hands out its raw token, so the check for content after the value below would reject
  // every one ("1", "true"); the full parse judges the text instead, trailing content included.
  bool scalar = false;
  if (simdjson::error_code e = doc.is_scalar().get(scalar)) {
    return Malformed(e);
  }
  if (scalar) {
    if (absl::Status s = ParseWhole(std::string_view(text.data(), text.size()), &out); !s.ok()) {
      return s;
    }
    return out;
  }
  if (absl::Status s = ProjectValue(doc, projection, &out); !s.ok()) {
    return s;
  }
  // Nothing may follow the value.
  if (simdjson::error_code e = doc.current_location().error(); e != simdjson::OUT_OF_BOUNDS) {
    return absl::InvalidArgumentError("malformed JSON: content after the value");
  }
  return out;
}

json Project(const json& value, const Projection& projection) {
  if (projection.text() && !value.is_array()) {
    return value.dump();
  }
  if (projection.whole() && !projection.text()) {
    return value;
  }
  if (value.is_object()) {
    json out = json::object();
    for (const auto& [key, child] : value.items()) {
      if (const Projection* p = projection.Field(key); p != nullptr) {
        out[key] = Project(child, *p);
      }
    }
    return out;
  }
  if (value.is_array()) {
    json out = json::array();
    for (const json& element : value) {
      out.push_back(Project(element, projection));
    }
    return out;
  }
  return value;
}

}  // namespace dralens::k8s
