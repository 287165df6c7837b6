// The functions and methods of the subset: size, quantity, semver and the string methods.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/cel/internal.h"
#include "src/common/quantity.h"

namespace dralens::cel::internal {
namespace {

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

}  // namespace

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

}  // namespace dralens::cel::internal
