// Every slice the builder makes validates against the official resource.k8s.io/v1 OpenAPI
// document (tests/schema/validate_openapi.py) and is accepted by the embedded API server, whose
// validation implements the API rules, for the 1.34 and the 1.35 rules.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/slices/slice_builder.h"
#include "gtest/gtest.h"
#include "src/k8s/rest_client.h"
#include "src/model/codec.h"
#include "src/sim/api_server.h"
#include "tests/driver/slices/slices_test_util.h"

namespace dralens::driver::slices {
namespace {

using namespace testing;  // NOLINT(build/namespaces): the helpers of this test folder

constexpr char kPython[] = "/usr/bin/python3";

struct Config {
  std::string label;
  model::Inventory inventory;
  SliceBuilderOptions options;
};

std::vector<Config> Configs(int api_minor) {
  std::vector<Config> configs;
  for (const char* profile : {"dgx-h100", "a100-40gb", "mixed"}) {
    for (bool dynamic : {false, true}) {
      configs.push_back({absl::StrCat(profile, dynamic ? " dynamic" : " static", " 1.", api_minor),
                         SimulatedInventory(profile),
                         {.dynamic_mig = dynamic, .api_minor = api_minor, .pool_generation = 3}});
    }
  }
  configs.push_back({absl::StrCat("300 gpus 1.", api_minor),
                     BigInventory(300),
                     {.api_minor = api_minor, .pool_generation = 3}});
  return configs;
}

// Runs the OpenAPI validator on a ResourceSliceList holding `slices`: one Python start per
// configuration instead of one per slice.
void ExpectSchemaValid(const std::vector<model::ResourceSlice>& slices, const std::string& label) {
  const std::string openapi =
      absl::StrCat(DRALENS_SCHEMA_DIR, "/k8s-resource.k8s.io-v1-openapi.json");
  ASSERT_EQ(::access(openapi.c_str(), R_OK), 0) << "no OpenAPI document at " << openapi;
  if (::access(kPython, X_OK) != 0) {
    GTEST_SKIP() << "no " << kPython;
  }
  nlohmann::json list = {{"apiVersion", "resource.k8s.io/v1"},
                         {"kind", "ResourceSliceList"},
                         {"metadata", nlohmann::json::object()},
                         {"items", nlohmann::json::array()}};
  for (const model::ResourceSlice& slice : slices) {
    list["items"].push_back(model::Encode(slice));
  }
  static int counter = 0;
  const std::string path = absl::StrCat(::testing::TempDir(), "/slices_conformance_", ::getpid(),
                                        "_", counter++, ".json");
  {
    std::ofstream out(path);
    out << list.dump();
  }
  const std::string command = absl::StrCat(
      kPython, " '", DRALENS_SOURCE_DIR, "/tests/schema/validate_openapi.py' --openapi '", openapi,
      "' io.k8s.api.resource.v1.ResourceSliceList '", path, "' 2>&1");
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr) << command;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) {
    output.append(buf, n);
  }
  const int status = ::pclose(pipe);
  std::remove(path.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << label << "\n" << output;
}

class SliceConformanceTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    sim::ApiServerOptions options;
    options.git_version = absl::StrCat("v1.", GetParam(), ".0");
    server_ = std::make_unique<sim::ApiServer>(options);
    ASSERT_TRUE(server_->Start().ok());
    k8s::RestConfig config;
    config.server = server_->url();
    auto client = k8s::RestClient::FromConfig(config);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }
  void TearDown() override { server_->Stop(); }

  std::unique_ptr<sim::ApiServer> server_;
  std::unique_ptr<k8s::RestClient> client_;
};

TEST_P(SliceConformanceTest, SchemaValid) {
  for (const Config& config : Configs(GetParam())) {
    auto slices = SliceBuilder({kNode, kNodeUid, kDriver}, config.options).Build(config.inventory);
    ASSERT_TRUE(slices.ok()) << config.label << ": " << slices.status();
    ASSERT_FALSE(slices->empty()) << config.label;
    ExpectSchemaValid(*slices, config.label);
  }
}

TEST_P(SliceConformanceTest, AcceptedByTheApiServer) {
  int node = 0;
  for (const Config& config : Configs(GetParam())) {
    // One node per configuration so pools stay apart.
    const std::string node_name = absl::StrCat("node-", node++);
    auto slices =
        SliceBuilder({node_name, kNodeUid, kDriver}, config.options).Build(config.inventory);
    ASSERT_TRUE(slices.ok()) << config.label << ": " << slices.status();
    for (const model::ResourceSlice& slice : *slices) {
      auto created = client_->Create(k8s::kResourceSlices, "", model::Encode(slice));
      ASSERT_TRUE(created.ok()) << config.label << ": " << created.status();
      auto stored = model::Decode<model::ResourceSlice>(*created);
      ASSERT_TRUE(stored.ok()) << stored.status();
      EXPECT_EQ(stored->spec, slice.spec) << config.label;
    }
  }
}

TEST_P(SliceConformanceTest, ServerRejectsWhatTheBuilderRefuses) {
  // The builder's own limits are the API's: a 65-byte attribute is refused by the server too.
  auto slices = SliceBuilder({kNode, kNodeUid, kDriver}, {.api_minor = GetParam()})
                    .Build(SimulatedInventory("dgx-h100"));
  ASSERT_TRUE(slices.ok());
  model::ResourceSlice slice = (*slices)[0];
  slice.spec.devices[0].attributes["productName"] =
      model::DeviceAttribute::String(std::string(kMaxAttributeValueLength + 1, 'x'));
  auto created = client_->Create(k8s::kResourceSlices, "", model::Encode(slice));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument) << created.status();
}

INSTANTIATE_TEST_SUITE_P(ApiVersions, SliceConformanceTest, ::testing::Values(34, 35),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("v1_", info.param);
                         });

}  // namespace
}  // namespace dralens::driver::slices
