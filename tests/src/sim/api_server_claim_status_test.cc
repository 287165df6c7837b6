// ResourceClaim status.devices in the embedded API server: stored and validated with the
// DRAResourceClaimDeviceStatus gate on; silently dropped with it off, as the real server does,
// unless the claim already has some.
#include <string>

#include "gtest/gtest.h"
#include "tests/src/sim/sim_test_util.h"

namespace dralens::sim::testing {
namespace {

// Creates claim `name` and allocates gpu-0 of node-a to it; returns the stored claim.
json Allocated(Http& http, const std::string& name) {
  Reply created = http.Post(Claims(), Claim(name));
  EXPECT_EQ(created.status, 201) << created.raw;
  json claim = created.body;
  claim["status"]["allocation"]["devices"]["results"] = json::array({{{"request", "gpu"},
                                                                      {"driver", "gpu.dralens.dev"},
                                                                      {"pool", "node-a"},
                                                                      {"device", "gpu-0"}}});
  Reply allocated = http.Put(Claims() + "/" + name + "/status", claim);
  EXPECT_EQ(allocated.status, 200) << allocated.raw;
  return allocated.body;
}

json Entry(const std::string& device) {
  return {{"driver", "gpu.dralens.dev"},
          {"pool", "node-a"},
          {"device", device},
          {"conditions", json::array({{{"type", "Ready"},
                                       {"status", "True"},
                                       {"reason", "Prepared"},
                                       {"message", ""},
                                       {"lastTransitionTime", "2026-11-25T10:00:00Z"}}})},
          {"data", {{"uuid", "GPU-0"}}}};
}

class ClaimDeviceStatusTest : public ServerTest {};

TEST_F(ClaimDeviceStatusTest, EntriesOfAllocatedDevicesAreStored) {
  json claim = Allocated(*http_, "stored");
  claim["status"]["devices"] = json::array({Entry("gpu-0")});
  Reply put = http_->Put(Claims() + "/stored/status", claim);
  ASSERT_EQ(put.status, 200) << put.raw;
  EXPECT_EQ(put.body["status"]["devices"][0]["device"], "gpu-0");
  EXPECT_EQ(http_->Get(Claims() + "/stored").body["status"]["devices"].size(), 1u);
}

TEST_F(ClaimDeviceStatusTest, AnEntryForADeviceNotAllocatedIsInvalid) {
  json claim = Allocated(*http_, "invalid");
  claim["status"]["devices"] = json::array({Entry("gpu-7")});
  Reply put = http_->Put(Claims() + "/invalid/status", claim);
  EXPECT_EQ(put.status, 422) << put.raw;
  EXPECT_NE(put.raw.find("must be an allocated device in the claim"), std::string::npos);
}

class GateOffTest : public ServerTest {
 protected:
  ApiServerOptions Options() override {
    ApiServerOptions o;
    o.resource_claim_device_status = false;
    return o;
  }
};

TEST_F(GateOffTest, TheFieldIsDroppedWithoutAnError) {
  json claim = Allocated(*http_, "dropped");
  claim["status"]["devices"] = json::array({Entry("gpu-0")});
  Reply put = http_->Put(Claims() + "/dropped/status", claim);
  ASSERT_EQ(put.status, 200) << put.raw;
  EXPECT_FALSE(put.body["status"].contains("devices"));
  EXPECT_TRUE(put.body["status"].contains("allocation"));  // the rest is written
  // Nothing else changed: the write was a no-op and kept the resourceVersion.
  EXPECT_EQ(put.Rv(), claim["metadata"]["resourceVersion"]);
}

}  // namespace
}  // namespace dralens::sim::testing
