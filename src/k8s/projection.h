// Projection: the fields of an object that a consumer reads, and a parser that builds only them.
//
// The cluster role reads a few fields of each Pod (its phase, its node, its claims) out of an
// object of several kilobytes, most of it containers, volumes and conditions; a full DOM parse
// of each watch event costs tens of microseconds and allocates every one of those fields.
// ParseProjected walks the text once with simdjson's On-Demand parser, skips what the projection
// does not name without building it, and builds only the named values as nlohmann::json
// (strings unescaped by simdjson, numbers and literals read by nlohmann from their token), so
// the decoders downstream see the same values, of the same types, as in a full parse.
//
// Rules:
//  - a whole projection keeps the value as it is;
//  - an object keeps the named fields that are present (absent ones stay absent) and drops the
//    rest; a field named twice keeps the last, as a full parse does;
//  - an array applies the projection to each element;
//  - any other value (a string where an object was expected, null) is kept as it is, so a
//    decoder reports the same error it would have without the projection;
//  - a text path keeps its value as its JSON text, a string, or an array's elements each as
//    its own text: for a consumer that decodes parts lazily (the cluster role decodes only the
//    devices of a republished ResourceSlice whose text changed).
// Malformed text is an error, as in a full parse. Values that the projection skips are checked
// for their structure (brackets, strings, UTF-8), not for the spelling of their numbers and
// literals.
#pragma once

#include <initializer_list>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"

namespace dralens::k8s {

class Projection {
 public:
  // Keeps the whole value.
  Projection() = default;
  // Keeps the values at these dotted paths ("metadata.name", "spec.resourceClaims"); a path
  // keeps its whole value, and a path under one already kept adds nothing.
  static Projection Paths(absl::Span<const absl::string_view> paths,
                          absl::Span<const absl::string_view> text_paths = {});
  // Keeps these fields of an object, each through its own projection.
  static Projection Fields(std::initializer_list<std::pair<const std::string, Projection>> fields);

  bool whole() const { return whole_; }
  // Kept as JSON text (a text path).
  bool text() const { return text_; }
  // The projection of field `name`, or null when it is dropped. Not for a whole projection.
  const Projection* Field(absl::string_view name) const;

 private:
  Projection* AddPath(absl::string_view path);

  bool whole_ = true;
  bool text_ = false;
  std::map<std::string, Projection, std::less<>> fields_;
};

// Parses one JSON document, keeping what `projection` names (the rules above).
// InvalidArgument on malformed text.
absl::StatusOr<nlohmann::json> ParseProjected(absl::string_view text, const Projection& projection);

// ParseProjected keeps its parse buffers per thread (a LIST page's are megabytes); this frees
// the calling thread's, e.g. once an informer's LIST is done.
void ReleaseProjectionBuffers();

// The same projection applied to a parsed value: what ParseProjected returns for its text (a
// text path's text is the value serialized, where ParseProjected keeps it as it was sent).
nlohmann::json Project(const nlohmann::json& value, const Projection& projection);

}  // namespace dralens::k8s
