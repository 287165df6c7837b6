#include "exporter/cluster/pricing.h"

#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "src/model/json.h"

namespace dralens::exporter::cluster {
namespace {

absl::StatusOr<double> Price(const nlohmann::json& value, absl::string_view field) {
  if (!value.is_number() || value.get<double>() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("price file: ", field, ": must be a number >= 0"));
  }
  return value.get<double>();
}

absl::Status ParseMap(const nlohmann::json& value, absl::string_view field,
                      std::map<std::string, double, std::less<>>* out) {
  if (!value.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("price file: ", field, ": must be an object"));
  }
  for (const auto& [name, price] : value.items()) {
    absl::StatusOr<double> p = Price(price, absl::StrCat(field, "[\"", name, "\"]"));
    if (!p.ok()) {
      return p.status();
    }
    (*out)[name] = *p;
  }
  return absl::OkStatus();
}

}  // namespace

double PriceTable::PriceOf(absl::string_view device_class, absl::string_view product) const {
  if (auto it = by_class.find(device_class); it != by_class.end()) {
    return it->second;
  }
  if (auto it = by_product.find(product); it != by_product.end()) {
    return it->second;
  }
  return default_price;
}

absl::StatusOr<PriceTable> PriceTable::Parse(absl::string_view json_text, double default_price) {
  absl::StatusOr<nlohmann::json> json = model::ParseJson(json_text);
  if (!json.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("price file: ", json.status().message()));
  }
  if (!json->is_object()) {
    return absl::InvalidArgumentError("price file: must be a JSON object");
  }
  PriceTable table;
  table.default_price = default_price;
  for (const auto& [key, value] : json->items()) {
    if (key == "default") {
      absl::StatusOr<double> p = Price(value, "default");
      if (!p.ok()) {
        return p.status();
      }
      table.default_price = *p;
    } else if (key == "deviceClasses") {
      absl::Status s = ParseMap(value, "deviceClasses", &table.by_class);
      if (!s.ok()) {
        return s;
      }
    } else if (key == "products") {
      absl::Status s = ParseMap(value, "products", &table.by_product);
      if (!s.ok()) {
        return s;
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "price file: unknown field \"", key, "\" (known: default, deviceClasses, products)"));
    }
  }
  return table;
}

absl::StatusOr<PriceTable> PriceTable::Load(const std::string& path, double default_price) {
  if (path.empty()) {
    PriceTable table;
    table.default_price = default_price;
    return table;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("price file ", path, ": cannot be read"));
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<PriceTable> table = Parse(text, default_price);
  if (!table.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", table.status().message()));
  }
  return table;
}

}  // namespace dralens::exporter::cluster
