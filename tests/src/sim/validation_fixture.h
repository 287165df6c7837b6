// The fixture of the API server's write validation tests: two servers, a 1.34 and a 1.35 (the
// ResourceSlice limits differ), and table cases, each a mutation of a valid object with what
// each server must answer.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/src/sim/sim_test_util.h"

namespace dralens::sim::testing {

using Mutator = std::function<void(json&)>;

struct Expect {
  int code = 201;
  std::string field;  // the first cause's field for failures
};

struct Case {
  std::string label;
  Mutator mutate;
  Expect v134;
  Expect v135;
};

inline Expect Pass() { return {201, ""}; }
inline Expect Fail(const std::string& field, int code = 422) { return {code, field}; }
inline Case Both(std::string label, Mutator m, Expect e) {
  return {std::move(label), std::move(m), e, e};
}

inline json Device(const std::string& name) {
  return {{"name", name}, {"attributes", {{"type", {{"string", "gpu"}}}}}};
}

inline json& Dev0(json& s) { return s["spec"]["devices"][0]; }
inline json& Req0(json& c) { return c["spec"]["devices"]["requests"][0]; }

class ValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ApiServerOptions o34;
    o34.git_version = "v1.34.1";
    ApiServerOptions o35;
    o35.git_version = "v1.35.0";
    s34_ = std::make_unique<ApiServer>(o34);
    s35_ = std::make_unique<ApiServer>(o35);
    ASSERT_TRUE(s34_->Start().ok());
    ASSERT_TRUE(s35_->Start().ok());
    h34_ = std::make_unique<Http>(s34_->port());
    h35_ = std::make_unique<Http>(s35_->port());
  }

  void Run(const std::string& collection, const json& base, const std::vector<Case>& cases) {
    int n = 0;
    for (const Case& c : cases) {
      json obj = base;
      // Unique names so passing cases do not collide.
      std::string suffix = "-" + std::to_string(n++);
      if (obj["metadata"].contains("name") && !obj["metadata"]["name"].get<std::string>().empty()) {
        obj["metadata"]["name"] = obj["metadata"]["name"].get<std::string>() + suffix;
      }
      c.mutate(obj);
      for (auto [http, want, version] :
           {std::tuple{h34_.get(), c.v134, "1.34"}, std::tuple{h35_.get(), c.v135, "1.35"}}) {
        SCOPED_TRACE(c.label + " on " + version);
        Reply r = http->Post(collection, obj);
        EXPECT_EQ(r.status, want.code) << r.raw;
        if (want.code != 201 && r.status == want.code) {
          ASSERT_TRUE(r.body["details"]["causes"].is_array()) << r.raw;
          std::vector<std::string> fields;
          for (const json& cause : r.body["details"]["causes"]) {
            fields.push_back(cause["field"]);
          }
          EXPECT_EQ(fields.front(), want.field) << r.raw;
          EXPECT_EQ(r.Reason(), want.code == 422 ? "Invalid" : "BadRequest");
        }
      }
    }
  }

  std::unique_ptr<ApiServer> s34_;
  std::unique_ptr<ApiServer> s35_;
  std::unique_ptr<Http> h34_;
  std::unique_ptr<Http> h35_;
};

}  // namespace dralens::sim::testing
