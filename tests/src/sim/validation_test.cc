// The validation rules called directly (the HTTP-level tests are api_server_validation_test.cc):
// each rule's field path, error type and limit, and the defaults clients observe.
#include "src/sim/validation.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::sim {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

json Claim() {
  return {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata", {{"name", "c"}, {"namespace", "ml"}}},
      {"spec",
       {{"devices",
         {{"requests", json::array({{{"name", "gpu"},
                                     {"exactly", {{"deviceClassName", "gpu.dralens.dev"}}}}})}}}}}};
}

json Allocated() {
  json c = Claim();
  c["status"]["allocation"]["devices"]["results"] = json::array({{{"request", "gpu"},
                                                                  {"driver", "gpu.dralens.dev"},
                                                                  {"pool", "node-a"},
                                                                  {"device", "gpu-0"}}});
  return c;
}

json Entry(const std::string& device) {
  return {{"driver", "gpu.dralens.dev"}, {"pool", "node-a"}, {"device", device}};
}

// The only error of `errors`, as "<reason> <field>: <message>" (or every one, joined).
std::string Only(const FieldErrors& errors) {
  std::string out;
  for (const FieldError& e : errors) {
    out += (out.empty() ? "" : "; ") + e.Reason() + " " + e.ToString();
  }
  return out;
}

const ValidationOptions kOptions{.minor = 34, .namespaced = true, .name_is_dns_label = false};

TEST(ValidationRulesTest, AValidClaimPassesAndItsDefaultsAreApplied) {
  json c = Claim();
  ApplyDefaults(ObjectKind::kResourceClaim, c, absl::FromUnixSeconds(0));
  EXPECT_EQ(c["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"], "ExactCount");
  EXPECT_EQ(c["spec"]["devices"]["requests"][0]["exactly"]["count"], 1);
  EXPECT_THAT(ValidateCreate(ObjectKind::kResourceClaim, c, kOptions), IsEmpty());
}

TEST(ValidationRulesTest, ARequestNeedsAName) {
  json c = Claim();
  c["spec"]["devices"]["requests"][0].erase("name");
  EXPECT_THAT(Only(ValidateCreate(ObjectKind::kResourceClaim, c, kOptions)),
              HasSubstr("FieldValueRequired spec.devices.requests[0].name"));
}

TEST(ValidationRulesTest, StatusDevicesMustBeAllocatedDevices) {
  json c = Allocated();
  c["status"]["devices"] = json::array({Entry("gpu-0")});
  EXPECT_THAT(ValidateStatusUpdate(ObjectKind::kResourceClaim, c, Allocated(), kOptions),
              IsEmpty());
  c["status"]["devices"] = json::array({Entry("gpu-7")});
  EXPECT_THAT(Only(ValidateStatusUpdate(ObjectKind::kResourceClaim, c, Allocated(), kOptions)),
              HasSubstr("FieldValueInvalid status.devices[0]"));
}

TEST(ValidationRulesTest, StatusDevicesConditionsAndDataAreBounded) {
  json c = Allocated();
  json entry = Entry("gpu-0");
  entry["conditions"] = json::array();
  for (int i = 0; i < 9; ++i) {
    entry["conditions"].push_back({{"type", "T" + std::to_string(i)}, {"status", "True"}});
  }
  c["status"]["devices"] = json::array({entry});
  EXPECT_THAT(Only(ValidateStatusUpdate(ObjectKind::kResourceClaim, c, Allocated(), kOptions)),
              HasSubstr("FieldValueTooMany status.devices[0].conditions"));

  entry.erase("conditions");
  entry["data"] = {{"blob", std::string(10 * 1024, 'x')}};
  c["status"]["devices"] = json::array({entry});
  EXPECT_THAT(Only(ValidateStatusUpdate(ObjectKind::kResourceClaim, c, Allocated(), kOptions)),
              HasSubstr("FieldValueTooLong status.devices[0].data"));
}

TEST(ValidationRulesTest, AnAllocationIsImmutableAndReservedForNeedsOne) {
  json changed = Allocated();
  changed["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-1";
  EXPECT_THAT(
      Only(ValidateStatusUpdate(ObjectKind::kResourceClaim, changed, Allocated(), kOptions)),
      HasSubstr("status.allocation: Invalid value"));

  json reserved = Claim();
  reserved["status"]["reservedFor"] =
      json::array({{{"resource", "pods"}, {"name", "p"}, {"uid", "u"}}});
  EXPECT_THAT(Only(ValidateStatusUpdate(ObjectKind::kResourceClaim, reserved, Claim(), kOptions)),
              HasSubstr("FieldValueForbidden status.reservedFor"));
}

TEST(ValidationRulesTest, ErrorsSayTheirReasonAndField) {
  FieldError e{FieldError::Type::kTooLong, "spec.devices[0].name", "Too long"};
  EXPECT_EQ(e.Reason(), "FieldValueTooLong");
  EXPECT_EQ(e.ToString(), "spec.devices[0].name: Too long");
  EXPECT_EQ(FormatK8sTime(absl::FromUnixSeconds(1764064800)), "2025-11-25T10:00:00Z");
}

}  // namespace
}  // namespace dralens::sim
