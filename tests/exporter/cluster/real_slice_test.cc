// The physical GPU families over a ResourceSlice that `dralens node --dynamic-mig` published for
// a real NVIDIA H200 (tests/fixtures/slices/h200-dynamic-mig.json, docs/hardware.md): the full
// GPU and 25 MIG placements consuming one counter set of 8 memory slices and one OFA engine.
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/feed.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "tests/exporter/cluster/scenario_util.h"

namespace dralens::exporter::cluster {
namespace {

using nlohmann::json;
using testing::Exported;
using testing::Value;

json H200Slice() {
  std::ifstream in(std::string(DRALENS_SOURCE_DIR) +
                   "/tests/fixtures/slices/h200-dynamic-mig.json");
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

std::string Profile(const std::string& profile) {
  return absl::StrCat("device.attributes['", testing::kDriver, "'].profile == '", profile, "'");
}

class H200SliceTest : public ::testing::Test {
 protected:
  H200SliceTest() : analyzer_(registry_, tracer_, AnalyzerOptions{{}, &clock_}) {
    HandlersFor(k8s::kDeviceClasses, analyzer_)
        .on_add(testing::Class("gpu", absl::StrCat("device.driver == '", testing::kDriver, "'")));
    HandlersFor(k8s::kNodes, analyzer_).on_add(testing::Node("gpu-node", true));
    HandlersFor(k8s::kResourceSlices, analyzer_).on_add(H200Slice());
    analyzer_.SetNodesSynced();
  }

  double Gpus(const std::string& state) {
    return Value(Exported(registry_, analyzer_), "dralens_cluster_gpus",
                 {{"node", "gpu-node"}, {"product", "NVIDIA H200"}, {"state", state}});
  }
  double Stranded(const std::string& kind) {
    return Value(Exported(registry_, analyzer_), "dralens_cluster_stranded_gpus",
                 {{"kind", kind}, {"node", "gpu-node"}});
  }

  prometheus::Registry registry_;
  telemetry::NoopTracer tracer_;
  common::FakeClock clock_;
  Analyzer analyzer_;
  k8s::InformerHandlers claims_ = HandlersFor(k8s::kResourceClaims, analyzer_);
};

TEST_F(H200SliceTest, TheFullGpuAndItsPlacementsAreOneGpu) {
  EXPECT_DOUBLE_EQ(Gpus("free"), 1);
  EXPECT_LE(Gpus("allocated"), 0);
  EXPECT_LE(Gpus("unavailable"), 0);
}

TEST_F(H200SliceTest, PlacementsHoldTheirMemorySlices) {
  // 1g.35gb is one compute slice but two memory slices wide; 1g.18gb+me is one.
  claims_.on_add(testing::Holding("wide", {"gpu-0-mig-1g35gb-15-0"}, "gpu-node"));
  claims_.on_add(testing::Holding("media", {"gpu-0-mig-1g18gb-me-20-2"}, "gpu-node"));
  EXPECT_DOUBLE_EQ(Gpus("allocated"), 3.0 / 8);
  EXPECT_DOUBLE_EQ(Gpus("free"), 5.0 / 8);
  EXPECT_DOUBLE_EQ(Gpus("allocated") + Gpus("free"), 1);
}

TEST_F(H200SliceTest, TheSingleOfaEngineLetsOneMediaInstanceFitAtATime) {
  claims_.on_add(testing::Holding("media", {"gpu-0-mig-1g18gb-me-20-2"}, "gpu-node"));
  // Memory slices 3-7 are free, but every other 1g.18gb+me placement needs the OFA engine the
  // allocated one holds: the free part fits nothing that pends.
  claims_.on_add(testing::Claim("team", "second-media", "gpu", Profile("1g.18gb+me")));
  EXPECT_DOUBLE_EQ(Stranded("unplaceable_fragment"), 7.0 / 8);
  EXPECT_LE(Stranded("free_while_pending"), 0);

  // A 3g.71gb placement (memory slices 4-7) fits beside it.
  claims_.on_add(testing::Claim("team", "half", "gpu", Profile("3g.71gb")));
  EXPECT_DOUBLE_EQ(Stranded("free_while_pending"), 7.0 / 8);
  EXPECT_LE(Stranded("unplaceable_fragment"), 0);
}

}  // namespace
}  // namespace dralens::exporter::cluster
