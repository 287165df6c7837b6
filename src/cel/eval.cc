// Evaluation of a syntax tree against one device.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/cel/internal.h"
#include "src/model/resource.h"

namespace dralens::cel::internal {
namespace {

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
      return Value{internal::Unsupported{"device.allowMultipleAllocations"}};
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

}  // namespace

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

}  // namespace dralens::cel::internal
