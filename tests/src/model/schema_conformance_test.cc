// Every object we encode must validate against the official resource.k8s.io/v1 OpenAPI
// document, checked by tests/schema/validate_openapi.py (Draft 7 plus unknown-field and int64
// checks). The test also proves the check can fail.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/model/codec.h"
#include "tests/src/model/model_fixtures.h"

namespace dralens::model {
namespace {

using Json = nlohmann::json;

constexpr char kPython[] = "/usr/bin/python3";

struct Result {
  int exit_code = -1;
  std::string output;
};

class SchemaConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    openapi_ = absl::StrCat(DRALENS_SCHEMA_DIR, "/k8s-resource.k8s.io-v1-openapi.json");
    ASSERT_EQ(::access(openapi_.c_str(), R_OK), 0) << "no OpenAPI document at " << openapi_;
    if (::access(kPython, X_OK) != 0) {
      GTEST_SKIP() << "no " << kPython;
    }
  }

  // Writes `object` to a temp file and runs the validator on it.
  Result Validate(const std::string& schema, const Json& object) {
    const std::string path = absl::StrCat(::testing::TempDir(), "/schema_conformance_", ::getpid(),
                                          "_", counter_++, ".json");
    {
      std::ofstream out(path);
      out << object.dump(2);
    }
    const std::string command =
        absl::StrCat(kPython, " '", DRALENS_SOURCE_DIR, "/tests/schema/validate_openapi.py' ",
                     "--openapi '", openapi_, "' ", schema, " '", path, "' 2>&1");
    Result result;
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) {
      ADD_FAILURE() << "popen failed: " << command;
      return result;
    }
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) {
      result.output.append(buf, n);
    }
    const int status = ::pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::remove(path.c_str());
    return result;
  }

  void ExpectValid(const std::string& schema, const Json& object) {
    const Result r = Validate(schema, object);
    EXPECT_EQ(r.exit_code, 0) << r.output << "\n" << object.dump(2);
  }

  std::string openapi_;
  int counter_ = 0;
};

constexpr char kSlice[] = "io.k8s.api.resource.v1.ResourceSlice";
constexpr char kClaim[] = "io.k8s.api.resource.v1.ResourceClaim";
constexpr char kClass[] = "io.k8s.api.resource.v1.DeviceClass";

TEST_F(SchemaConformanceTest, FullResourceSliceIsValid) {
  ExpectValid(kSlice, Encode(testing::FullSlice()));
}

TEST_F(SchemaConformanceTest, PerDeviceNodeSelectionSliceIsValid) {
  ExpectValid(kSlice, Encode(testing::PerDeviceSlice()));
}

TEST_F(SchemaConformanceTest, FullResourceClaimIsValid) {
  ExpectValid(kClaim, Encode(testing::FullClaim()));
}

TEST_F(SchemaConformanceTest, DeviceClassAndTemplateAreValid) {
  ExpectValid(kClass, Encode(testing::FullClass()));
  ResourceClaimTemplate tmpl;
  tmpl.metadata.name = "t";
  tmpl.spec.spec = testing::FullClaim().spec;
  ExpectValid("io.k8s.api.resource.v1.ResourceClaimTemplate", Encode(tmpl));
}

TEST_F(SchemaConformanceTest, RejectsBrokenObjects) {
  Json misspelled = Encode(testing::FullSlice());
  misspelled["spec"]["devices"][0]["capacty"] = misspelled["spec"]["devices"][0]["capacity"];
  Result r = Validate(kSlice, misspelled);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, ::testing::HasSubstr("spec.devices[0]: unknown field 'capacty'"));

  Json wrong_type = Encode(testing::FullClaim());
  wrong_type["spec"]["devices"]["requests"][0]["exactly"]["count"] = "2";
  r = Validate(kClaim, wrong_type);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, ::testing::HasSubstr("'2' is not of type 'integer'"));

  Json overflow = Encode(testing::FullSlice());
  overflow["spec"]["pool"]["generation"] = 18446744073709551615ULL;
  overflow["metadata"]["labelz"] = Json::object();
  r = Validate(kSlice, overflow);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, ::testing::HasSubstr("out of int64 range"));
  EXPECT_THAT(r.output, ::testing::HasSubstr("metadata: unknown field 'labelz'"));
}

}  // namespace
}  // namespace dralens::model
