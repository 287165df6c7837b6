#include "src/model/codec.h"

#include <array>
#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "src/common/quantity.h"
#include "src/common/status.h"
#include "src/model/codec_fields.h"

namespace dralens::model {
namespace {

using Json = nlohmann::json;
using common::Quantity;

using fields::Emit;
using fields::Fields;
using fields::HasFields;

// ---------------------------------------------------------------------------------------------
// JSON paths for error messages: spec.devices[3].attributes["uuid"]
//
// A path is built step by step on the decoder's stack and rendered only when an error names
// it: rendering every field's path up front cost a quarter of a ResourceSlice's decode.

std::string ShortKey(absl::string_view key) {
  constexpr size_t kMax = 64;
  if (key.size() <= kMax) {
    return absl::CHexEscape(key);
  }
  return absl::StrCat(absl::CHexEscape(key.substr(0, kMax)), "...");
}

class Path {
 public:
  Path() = default;  // the document itself

  Path Field(absl::string_view name) const { return Path(this, Step::kField, name, 0); }
  Path Index(size_t index) const { return Path(this, Step::kIndex, {}, index); }
  Path Key(absl::string_view key) const { return Path(this, Step::kKey, key, 0); }

  std::string Render() const {
    std::string out;
    AppendTo(out);
    return out;
  }

 private:
  enum class Step { kRoot, kField, kIndex, kKey };

  Path(const Path* parent, Step step, absl::string_view name, size_t index)
      : parent_(parent), step_(step), name_(name), index_(index) {}

  void AppendTo(std::string& out) const {
    if (parent_ != nullptr) {
      parent_->AppendTo(out);
    }
    switch (step_) {
      case Step::kRoot:
        break;
      case Step::kField:
        absl::StrAppend(&out, out.empty() ? "" : ".", name_);
        break;
      case Step::kIndex:
        absl::StrAppend(&out, "[", index_, "]");
        break;
      case Step::kKey:
        absl::StrAppend(&out, "[\"", ShortKey(name_), "\"]");
        break;
    }
  }

  const Path* parent_ = nullptr;
  Step step_ = Step::kRoot;
  absl::string_view name_;  // kField: the field; kKey: the map key
  size_t index_ = 0;
};

absl::Status PathError(const Path& path, absl::string_view message) {
  const std::string where = path.Render();
  return absl::InvalidArgumentError(where.empty() ? std::string(message)
                                                  : absl::StrCat(where, ": ", message));
}

absl::Status TypeError(const Path& path, absl::string_view expected, const Json& got) {
  return PathError(path, absl::StrCat("expected ", expected, ", got ", got.type_name()));
}

// ---------------------------------------------------------------------------------------------
// Decoding. Declarations first: the generic templates recurse into each other.

absl::Status DecodeValue(const Json& j, const Path& path, std::string* out);
absl::Status DecodeValue(const Json& j, const Path& path, bool* out);
absl::Status DecodeValue(const Json& j, const Path& path, int64_t* out);
absl::Status DecodeValue(const Json& j, const Path& path, Quantity* out);
absl::Status DecodeValue(const Json& j, const Path& path, absl::Time* out);
absl::Status DecodeValue(const Json& j, const Path& path, Json* out);
absl::Status DecodeValue(const Json& j, const Path& path, DeviceAttribute* out);
template <typename T>
absl::Status DecodeValue(const Json& j, const Path& path, std::optional<T>* out);
template <typename T>
absl::Status DecodeValue(const Json& j, const Path& path, std::vector<T>* out);
template <typename T>
absl::Status DecodeValue(const Json& j, const Path& path, std::map<std::string, T>* out);
template <typename T>
requires HasFields<T>::value absl::Status DecodeValue(const Json& j, const Path& path, T* out);

// Null means "unset", as in Go: the value keeps its default.
template <typename T>
absl::Status DecodeAny(const Json& j, const Path& path, T* out) {
  if (j.is_null()) {
    return absl::OkStatus();
  }
  return DecodeValue(j, path, out);
}

// Checks run after a struct decoded field by field.
template <typename T>
absl::Status Validate(const T& /*value*/, const Path& /*path*/) {
  return absl::OkStatus();
}

absl::Status Validate(const DeviceRequest& request, const Path& path) {
  const bool exactly = request.exactly.has_value();
  const bool first_available = !request.first_available.empty();
  if (exactly == first_available) {
    return PathError(path, absl::StrCat("expected exactly one of \"exactly\" and "
                                        "\"firstAvailable\", got ",
                                        exactly ? "both" : "neither"));
  }
  return absl::OkStatus();
}

absl::Status DecodeValue(const Json& j, const Path& path, std::string* out) {
  if (!j.is_string()) {
    return TypeError(path, "string", j);
  }
  *out = j.get_ref<const std::string&>();
  return absl::OkStatus();
}

absl::Status DecodeValue(const Json& j, const Path& path, bool* out) {
  if (!j.is_boolean()) {
    return TypeError(path, "boolean", j);
  }
  *out = j.get<bool>();
  return absl::OkStatus();
}

absl::Status DecodeValue(const Json& j, const Path& path, int64_t* out) {
  if (j.is_number_unsigned()) {
    const uint64_t value = j.get<uint64_t>();
    if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return PathError(path, absl::StrCat("integer ", value, " out of int64 range"));
    }
    *out = static_cast<int64_t>(value);
    return absl::OkStatus();
  }
  if (j.is_number_integer()) {
    *out = j.get<int64_t>();
    return absl::OkStatus();
  }
  if (j.is_number_float()) {
    return PathError(
        path, absl::StrCat("expected integer in int64 range, got number ", SerializeJson(j)));
  }
  return TypeError(path, "integer", j);
}

absl::Status DecodeValue(const Json& j, const Path& path, Quantity* out) {
  std::string text;
  if (j.is_string()) {
    text = j.get_ref<const std::string&>();
  } else if (j.is_number()) {
    text = SerializeJson(j);  // Kubernetes also accepts a bare JSON number.
  } else {
    return TypeError(path, "quantity string", j);
  }
  absl::StatusOr<Quantity> q = Quantity::Parse(text);
  if (!q.ok()) {
    return PathError(path, q.status().message());
  }
  *out = *q;
  return absl::OkStatus();
}

absl::Status DecodeValue(const Json& j, const Path& path, absl::Time* out) {
  if (!j.is_string()) {
    return TypeError(path, "RFC 3339 time string", j);
  }
  absl::StatusOr<absl::Time> t = ParseKubeTime(j.get_ref<const std::string&>());
  if (!t.ok()) {
    return PathError(path, t.status().message());
  }
  *out = *t;
  return absl::OkStatus();
}

absl::Status DecodeValue(const Json& j, const Path& /*path*/, Json* out) {
  *out = j;
  return absl::OkStatus();
}

absl::Status DecodeValue(const Json& j, const Path& path, DeviceAttribute* out) {
  if (!j.is_object()) {
    return TypeError(path, "object", j);
  }
  static constexpr const char* kKinds[] = {"int", "bool", "string", "version"};
  // One pass over the (usually single) members, not a lookup per kind.
  std::array<const Json*, 4> values{};
  for (const auto& [key, member] : j.get_ref<const Json::object_t&>()) {
    for (size_t k = 0; k < values.size(); ++k) {
      if (key == kKinds[k] && !member.is_null()) {
        values[k] = &member;
      }
    }
  }
  size_t count = 0, chosen = 0;
  for (size_t k = 0; k < values.size(); ++k) {
    if (values[k] != nullptr) {
      ++count;
      chosen = k;
    }
  }
  if (count != 1) {
    std::vector<const char*> present;
    for (size_t k = 0; k < values.size(); ++k) {
      if (values[k] != nullptr) {
        present.push_back(kKinds[k]);
      }
    }
    return PathError(path, absl::StrCat("expected exactly one of int, bool, string, version; got ",
                                        present.empty() ? "none" : absl::StrJoin(present, ", ")));
  }
  const absl::string_view kind = kKinds[chosen];
  const Json* value = values[chosen];
  const Path value_path = path.Field(kind);
  if (kind == "int") {
    int64_t v = 0;
    RETURN_IF_ERROR(DecodeValue(*value, value_path, &v));
    *out = DeviceAttribute::Int(v);
  } else if (kind == "bool") {
    bool v = false;
    RETURN_IF_ERROR(DecodeValue(*value, value_path, &v));
    *out = DeviceAttribute::Bool(v);
  } else {
    std::string v;
    RETURN_IF_ERROR(DecodeValue(*value, value_path, &v));
    *out = kind == "string" ? DeviceAttribute::String(std::move(v))
                            : DeviceAttribute::SemVer(std::move(v));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status DecodeValue(const Json& j, const Path& path, std::optional<T>* out) {
  T value{};
  RETURN_IF_ERROR(DecodeValue(j, path, &value));
  *out = std::move(value);
  return absl::OkStatus();
}

template <typename T>
absl::Status DecodeValue(const Json& j, const Path& path, std::vector<T>* out) {
  if (!j.is_array()) {
    return TypeError(path, "array", j);
  }
  out->clear();
  out->reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    RETURN_IF_ERROR(DecodeAny(j[i], path.Index(i), &out->emplace_back()));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status DecodeValue(const Json& j, const Path& path, std::map<std::string, T>* out) {
  if (!j.is_object()) {
    return TypeError(path, "object", j);
  }
  out->clear();
  for (const auto& [key, value] : j.items()) {
    RETURN_IF_ERROR(DecodeAny(value, path.Key(key), &(*out)[key]));
  }
  return absl::OkStatus();
}

template <typename T>
requires HasFields<T>::value absl::Status DecodeValue(const Json& j, const Path& path, T* out) {
  if (!j.is_object()) {
    return TypeError(path, "object", j);
  }
  absl::Status status;
  Fields(*out, [&](const char* key, auto& field, Emit = Emit::kOmitEmpty) {
    if (!status.ok()) {
      return;
    }
    const auto it = j.find(key);
    if (it != j.end()) {
      status = DecodeAny(*it, path.Field(key), &field);
    }
  });
  RETURN_IF_ERROR(status);
  return Validate(*out, path);
}

// ---------------------------------------------------------------------------------------------
// Encoding

Json EncodeValue(const std::string& v) { return v; }
Json EncodeValue(bool v) { return v; }
Json EncodeValue(int64_t v) { return v; }
Json EncodeValue(const Quantity& v) { return v.String(); }
Json EncodeValue(const absl::Time& v) { return FormatKubeTime(v); }
Json EncodeValue(const Json& v) { return v; }
Json EncodeValue(const DeviceAttribute& a);
template <typename T>
Json EncodeValue(const std::optional<T>& v);
template <typename T>
Json EncodeValue(const std::vector<T>& v);
template <typename T>
Json EncodeValue(const std::map<std::string, T>& v);
template <typename T>
requires HasFields<T>::value Json EncodeValue(const T& v);

bool IsEmpty(const std::string& v) { return v.empty(); }
bool IsEmpty(int64_t v) { return v == 0; }
bool IsEmpty(const Quantity& /*v*/) { return false; }
bool IsEmpty(const absl::Time& /*v*/) { return false; }
bool IsEmpty(const Json& v) { return v.is_null(); }
template <typename T>
bool IsEmpty(const std::optional<T>& v) {
  return !v.has_value();
}
template <typename T>
bool IsEmpty(const std::vector<T>& v) {
  return v.empty();
}
template <typename T>
bool IsEmpty(const std::map<std::string, T>& v) {
  return v.empty();
}
template <typename T>
requires HasFields<T>::value bool IsEmpty(const T& v) { return v == T{}; }

Json EncodeValue(const DeviceAttribute& a) {
  Json out = Json::object();
  std::visit(
      [&out](const auto& value) {
        using V = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<V, int64_t>) {
          out["int"] = value;
        } else if constexpr (std::is_same_v<V, bool>) {
          out["bool"] = value;
        } else if constexpr (std::is_same_v<V, std::string>) {
          out["string"] = value;
        } else {
          out["version"] = value.value;
        }
      },
      a.value);
  return out;
}

template <typename T>
Json EncodeValue(const std::optional<T>& v) {
  return v.has_value() ? EncodeValue(*v) : Json();
}

template <typename T>
Json EncodeValue(const std::vector<T>& v) {
  Json out = Json::array();
  for (const T& item : v) {
    out.push_back(EncodeValue(item));
  }
  return out;
}

template <typename T>
Json EncodeValue(const std::map<std::string, T>& v) {
  Json out = Json::object();
  for (const auto& [key, value] : v) {
    out[key] = EncodeValue(value);
  }
  return out;
}

template <typename T>
requires HasFields<T>::value Json EncodeValue(const T& v) {
  Json out = Json::object();
  Fields(v, [&out](const char* key, const auto& field, Emit emit = Emit::kOmitEmpty) {
    if (emit == Emit::kAlways || !IsEmpty(field)) {
      out[key] = EncodeValue(field);
    }
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Top-level kinds

template <typename T>
absl::StatusOr<T> DecodeKind(const Json& j, absl::string_view api_version, absl::string_view kind) {
  const std::string context = absl::StrCat("decode ", kind);
  try {
    if (!j.is_object()) {
      return common::Annotate(TypeError(Path(), "object", j), context);
    }
    for (const auto& [field, want] :
         {std::pair<const char*, absl::string_view>{"apiVersion", api_version}, {"kind", kind}}) {
      const auto it = j.find(field);
      if (it == j.end() || it->is_null()) {
        continue;  // Items of a list response carry neither.
      }
      if (!it->is_string()) {
        return common::Annotate(TypeError(Path().Field(field), "string", *it), context);
      }
      if (it->template get_ref<const std::string&>() != want) {
        return common::Annotate(
            PathError(Path().Field(field),
                      absl::StrCat("expected \"", want, "\", got \"",
                                   ShortKey(it->template get_ref<const std::string&>()), "\"")),
            context);
      }
    }
    T out;
    RETURN_IF_ERROR_CTX(DecodeValue(j, Path(), &out), context);
    return out;
  } catch (const std::exception& e) {
    // Not expected: every access above is type-checked first.
    return absl::InternalError(absl::StrCat(context, ": ", e.what()));
  }
}

template <typename T>
Json EncodeKind(const T& object, absl::string_view api_version, absl::string_view kind) {
  Json out = EncodeValue(object);
  out["apiVersion"] = api_version;
  out["kind"] = kind;
  return out;
}

}  // namespace

std::string FormatKubeTime(absl::Time time) {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%SZ", time, absl::UTCTimeZone());
}

absl::StatusOr<absl::Time> ParseKubeTime(absl::string_view text) {
  absl::Time out;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, text, &out, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid RFC 3339 time \"", ShortKey(text), "\": ", error));
  }
  return out;
}

#define DRALENS_KIND(Type, ApiVersion, Kind)                                    \
  template <>                                                                   \
  absl::StatusOr<Type> Decode<Type>(const Json& json) {                         \
    return DecodeKind<Type>(json, ApiVersion, Kind);                            \
  }                                                                             \
  template <>                                                                   \
  absl::StatusOr<ObjectList<Type>> Decode<ObjectList<Type>>(const Json& json) { \
    return DecodeKind<ObjectList<Type>>(json, ApiVersion, Kind "List");         \
  }                                                                             \
  Json Encode(const Type& object) { return EncodeKind(object, ApiVersion, Kind); }

DRALENS_KIND(ResourceSlice, kResourceApiVersion, "ResourceSlice")
DRALENS_KIND(ResourceClaim, kResourceApiVersion, "ResourceClaim")
DRALENS_KIND(DeviceClass, kResourceApiVersion, "DeviceClass")
DRALENS_KIND(ResourceClaimTemplate, kResourceApiVersion, "ResourceClaimTemplate")
DRALENS_KIND(Pod, "v1", "Pod")
DRALENS_KIND(Node, "v1", "Node")

#undef DRALENS_KIND

absl::StatusOr<SliceDevice> DecodeSliceDevice(const Json& json, size_t index) {
  const std::string context = "decode ResourceSlice";
  try {
    const Path root;
    const Path spec = root.Field("spec");
    const Path devices = spec.Field("devices");
    SliceDevice out;
    RETURN_IF_ERROR_CTX(DecodeValue(json, devices.Index(index), &out), context);
    return out;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(context, ": ", e.what()));
  }
}

Json Encode(const ObjectMeta& metadata) { return EncodeValue(metadata); }

}  // namespace dralens::model
