// Prices per GPU-hour, which turn stranded GPU-seconds into dralens_cluster_stranded_cost_total
// (a MIG instance or a share costs its fraction of a GPU).
//
// File format (JSON, strict: an unknown field is an error naming it):
//   {"default": 2.0,
//    "deviceClasses": {"gpu.dralens.dev": 3.5},
//    "products": {"NVIDIA H100 80GB HBM3": 4.0}}
// A GPU's price is its class's, else its product's, else the default (from the file, else
// --price-per-device-hour, else 0: no cost accrues).
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dralens::exporter::cluster {

struct PriceTable {
  double default_price = 0;
  std::map<std::string, double, std::less<>> by_class;
  std::map<std::string, double, std::less<>> by_product;

  // Per GPU-hour.
  double PriceOf(absl::string_view device_class, absl::string_view product) const;

  // Parses the file text; `default_price` applies unless the file sets "default".
  static absl::StatusOr<PriceTable> Parse(absl::string_view json_text, double default_price);
  // Reads `path` (empty: no file) and parses it.
  static absl::StatusOr<PriceTable> Load(const std::string& path, double default_price);
};

}  // namespace dralens::exporter::cluster
