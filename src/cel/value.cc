// Values: type names, and the runtime errors built from them.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "src/cel/internal.h"

namespace dralens::cel::internal {

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

}  // namespace dralens::cel::internal
