#include "driver/prepare/temp_cleanup.h"

#include "absl/strings/str_cat.h"
#include "driver/prepare/cdi.h"
#include "src/common/atomic_file.h"
#include "src/common/log.h"
#include "src/telemetry/catalog.h"

namespace dralens::driver::prepare {
namespace {

constexpr char kComponent[] = "node";

// Removes, logs and counts; returns how many files went.
int Clean(const std::string& dir, const std::string& base_prefix, const char* location,
          prometheus::Family<prometheus::Counter>& removed, int* errors) {
  common::TempCleanup cleanup = common::RemoveStaleTempFiles(dir, base_prefix);
  for (const std::string& path : cleanup.removed) {
    DLOG(kInfo, kComponent, "removed a temp file left by an interrupted write",
         {{"path", path}, {"location", location}});
  }
  for (const std::string& error : cleanup.errors) {
    DLOG(kWarn, kComponent, "could not remove a leftover temp file",
         {{"location", location}, {"error", error}});
  }
  removed.Add({{"location", location}}).Increment(static_cast<double>(cleanup.removed.size()));
  *errors += static_cast<int>(cleanup.errors.size());
  return static_cast<int>(cleanup.removed.size());
}

}  // namespace

TempCleanupResult RemoveStaleTempFiles(const std::string& plugin_dir, const std::string& cdi_root,
                                       prometheus::Registry& registry) {
  prometheus::Family<prometheus::Counter>& removed =
      telemetry::BuildCounter(registry, "dralens_node_temp_files_removed_total");
  TempCleanupResult result;
  result.plugin_dir = Clean(plugin_dir, "", "plugin_dir", removed, &result.errors);
  result.cdi_root = Clean(cdi_root, absl::StrCat(kCdiVendor, "-", kCdiClass, "_"), "cdi_root",
                          removed, &result.errors);
  if (result.plugin_dir + result.cdi_root > 0) {
    DLOG(kInfo, kComponent, "start-up cleanup of temp files",
         {{"plugin_dir", result.plugin_dir}, {"cdi_root", result.cdi_root}});
  }
  return result;
}

}  // namespace dralens::driver::prepare
