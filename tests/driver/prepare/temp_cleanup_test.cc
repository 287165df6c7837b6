#include "driver/prepare/temp_cleanup.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "tests/testing/temp_dir.h"

namespace dralens::driver::prepare {
namespace {

namespace fs = std::filesystem;
using ::testing::UnorderedElementsAre;

void Touch(const std::string& path) { std::ofstream(path) << "partial"; }

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    out.push_back(e.path().filename().string());
  }
  return out;
}

double Removed(prometheus::Registry& registry, const std::string& location) {
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    if (f.name != "dralens_node_temp_files_removed_total") {
      continue;
    }
    for (const prometheus::ClientMetric& m : f.metric) {
      if (m.label.size() == 1 && m.label[0].value == location) {
        return m.counter.value;
      }
    }
  }
  return -1;
}

TEST(TempCleanupTest, RemovesOurLeftoversOnlyAndCountsThem) {
  testing::TempDir plugin("plugin");
  testing::TempDir cdi("cdi");
  // Ours in the plugin directory: the checkpoint's and any other base.
  Touch(plugin.Join(".checkpoint.json.tmp-AbC123"));
  Touch(plugin.Join(".checkpoint.json.tmp-zzzzzz"));
  Touch(plugin.Join("checkpoint.json"));
  // The CDI root is shared: only our spec files' temp files go.
  const std::string ours = ".k8s.gpu.dralens.dev-claim_5f0c.json.tmp-q1w2e3";
  Touch(cdi.Join(ours));
  Touch(cdi.Join("k8s.gpu.dralens.dev-claim_5f0c.json"));
  Touch(cdi.Join(".nvidia.yaml.tmp-abcdef"));  // another tool's, same pattern
  Touch(cdi.Join(".k8s.gpu.nvidia.com-claim_1.json.tmp-abcdef"));
  Touch(cdi.Join("k8s.gpu.dralens.dev-claim_x.json.tmp-abcdef"));  // not hidden: not ours

  prometheus::Registry registry;
  TempCleanupResult result = RemoveStaleTempFiles(plugin.path(), cdi.path(), registry);
  EXPECT_EQ(result.plugin_dir, 2);
  EXPECT_EQ(result.cdi_root, 1);
  EXPECT_EQ(result.errors, 0);
  EXPECT_THAT(Names(plugin.path()), UnorderedElementsAre("checkpoint.json"));
  EXPECT_THAT(Names(cdi.path()),
              UnorderedElementsAre("k8s.gpu.dralens.dev-claim_5f0c.json", ".nvidia.yaml.tmp-abcdef",
                                   ".k8s.gpu.nvidia.com-claim_1.json.tmp-abcdef",
                                   "k8s.gpu.dralens.dev-claim_x.json.tmp-abcdef"));
  EXPECT_EQ(Removed(registry, "plugin_dir"), 2);
  EXPECT_EQ(Removed(registry, "cdi_root"), 1);

  // Nothing left: a second start removes nothing; directories that do not exist yet are fine.
  result = RemoveStaleTempFiles(plugin.path(), plugin.Join("missing"), registry);
  EXPECT_EQ(result.plugin_dir + result.cdi_root + result.errors, 0);
  EXPECT_EQ(Removed(registry, "plugin_dir"), 2);
}

}  // namespace
}  // namespace dralens::driver::prepare
