#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "driver/discovery/nvml/nvml_internal.h"

namespace dralens::driver::discovery::nvml_internal {

bool IsGpuLost(const absl::Status& status) {
  return absl::StrContains(status.message(), "NVML_ERROR_GPU_IS_LOST");
}

bool IsNoPermission(const absl::Status& status) {
  return absl::StrContains(status.message(), "NVML_ERROR_NO_PERMISSION");
}

std::string CString(const char* buffer, size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

std::string SysfsPciDevice(absl::string_view sysfs_root, absl::string_view bdf) {
  return absl::StrCat(sysfs_root, "/bus/pci/devices/", bdf);
}

std::optional<int> SysfsNumaNode(absl::string_view sysfs_root, absl::string_view bdf) {
  std::ifstream in(absl::StrCat(SysfsPciDevice(sysfs_root, bdf), "/numa_node"));
  std::string text;
  int node = -1;
  if (!in || !std::getline(in, text) ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &node) || node < 0) {
    return std::nullopt;
  }
  return node;
}

std::string SysfsPcieRoot(absl::string_view sysfs_root, absl::string_view bdf) {
  std::error_code ec;
  const std::filesystem::path resolved =
      std::filesystem::canonical(SysfsPciDevice(sysfs_root, bdf), ec);
  if (ec) {
    return "";
  }
  std::string root;
  for (const auto& part : resolved) {
    const std::string name = part.string();
    if (name.size() == 10 && absl::StartsWith(name, "pci") && name[7] == ':') {
      root = name;  // the innermost "pciDDDD:BB" wins; there is normally exactly one
    }
  }
  return root;
}

}  // namespace dralens::driver::discovery::nvml_internal
