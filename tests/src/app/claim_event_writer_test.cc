// The Events on pending claims, written through the REST client to the embedded API server and
// read back the way kubectl reads them (core/v1).
#include "src/app/claim_event_writer.h"

#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"

namespace dralens::app {
namespace {

const k8s::ResourceType kCoreEvents{"", "v1", "events", "Event", true};

exporter::cluster::ClaimEvent Event(const std::string& claim) {
  return {"team",
          claim,
          "uid-" + claim,
          "NoCapacity",
          "Warning",
          "request gpu: class gpu: 4 devices; 0 free",
          absl::FromUnixMicros(1795000000123456)};
}

class ClaimEventWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.Start().ok());
    k8s::RestConfig config;
    config.server = api_.url();
    auto client = k8s::RestClient::FromConfig(config);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }
  sim::ApiServer api_;
  std::unique_ptr<k8s::RestClient> client_;
};

TEST_F(ClaimEventWriterTest, CreatesAnEventsV1EventThatKubectlReads) {
  ClaimEventWriter writer(*client_, "replica-a");
  absl::StatusOr<std::string> name = writer.Create(Event("train"));
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(*name, "train.18e91efd632f4a00");  // client-go's "<name>.<hex unix nanos>"
  absl::StatusOr<nlohmann::json> core = client_->Get(kCoreEvents, "team", *name);
  ASSERT_TRUE(core.ok()) << core.status();
  EXPECT_EQ((*core)["involvedObject"]["kind"], "ResourceClaim");
  EXPECT_EQ((*core)["involvedObject"]["name"], "train");
  EXPECT_EQ((*core)["involvedObject"]["uid"], "uid-train");
  EXPECT_EQ((*core)["reason"], "NoCapacity");
  EXPECT_EQ((*core)["type"], "Warning");
  EXPECT_EQ((*core)["message"], "request gpu: class gpu: 4 devices; 0 free");
  EXPECT_EQ((*core)["reportingComponent"], "dralens.dev/cluster");
  EXPECT_EQ((*core)["reportingInstance"], "replica-a");
  EXPECT_EQ((*core)["eventTime"], "2026-11-18T11:06:40.123456Z");

  ASSERT_TRUE(writer.UpdateSeries("team", *name, 2, absl::FromUnixSeconds(1795000600)).ok());
  core = client_->Get(kCoreEvents, "team", *name);
  ASSERT_TRUE(core.ok());
  EXPECT_EQ((*core)["series"]["count"], 2);
  EXPECT_EQ((*core)["series"]["lastObservedTime"], "2026-11-18T11:16:40.000000Z");
  EXPECT_TRUE(absl::IsNotFound(writer.UpdateSeries("team", "gone.1", 2, absl::Now())));
}

TEST_F(ClaimEventWriterTest, LongClaimNamesStayValidEventNames) {
  ClaimEventWriter writer(*client_, "replica-a");
  std::string long_name(240, 'a');
  long_name[235] = '-';  // the cut lands right after a dash, which a name may not end with
  absl::StatusOr<std::string> name = writer.Create(Event(long_name));
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_LE(name->size(), 253u);
  EXPECT_EQ(name->find("-."), std::string::npos) << *name;
}

}  // namespace
}  // namespace dralens::app
