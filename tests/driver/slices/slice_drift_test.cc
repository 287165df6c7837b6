// SlicePublisher::Observe against the embedded API server: which watch events are drift, that
// drift makes Published() false until a pass converged, and that a watch on the node's slices
// makes the running loop repair a kubelet wipe and an external edit without any timer firing.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/slices/slice_publisher.h"
#include "gtest/gtest.h"
#include "src/common/clock.h"
#include "src/k8s/informer.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "tests/driver/slices/slices_test_util.h"
#include "tests/testing/eventually.h"

namespace dralens::driver::slices {
namespace {

using namespace testing;  // NOLINT(build/namespaces): the helpers of this test folder
using ::dralens::testing::Eventually;
using json = nlohmann::json;

class SliceDriftTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start().ok());
    k8s::RestConfig config;
    config.server = server_.url();
    k8s::RestClientOptions client_options;
    // Let every failure reach the publisher: its own retries are under test.
    client_options.retry.max_attempts = 1;
    client_options.retry.max_retry_after_attempts = 1;
    auto client = k8s::RestClient::FromConfig(config, client_options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    auto node = client_->Create(
        k8s::kNodes, "", {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", kNode}}}});
    ASSERT_TRUE(node.ok()) << node.status();
    SlicePublisherOptions options;
    options.node_name = kNode;
    options.driver_name = kDriver;
    // The resync timer and the backoff never fire: the fake clock does not move.
    options.poll_interval = absl::Milliseconds(2);
    publisher_ = std::make_unique<SlicePublisher>(*client_, clock_, options);
  }

  void TearDown() override {
    if (watch_) {
      watch_->Stop();
    }
    publisher_.reset();
    server_.Stop();
  }

  std::string Selector() const {
    return absl::StrCat("spec.nodeName=", kNode, ",spec.driver=", kDriver);
  }

  std::vector<json> Slices() {
    k8s::ListOptions options;
    options.field_selector = Selector();
    auto list = k8s::ListAll(*client_, k8s::kResourceSlices, "", options);
    EXPECT_TRUE(list.ok()) << list.status();
    return list.ok() ? list->items : std::vector<json>{};
  }

  // The node role's wiring: a watch with the publisher's selector feeding Observe.
  void Watch() {
    k8s::InformerOptions options;
    options.field_selector = Selector();
    watch_ = std::make_unique<k8s::Informer>(*client_, k8s::kResourceSlices, options);
    watch_->SetHandlers({
        .on_add = [this](const json& s) { drifts_ += publisher_->Observe("ADDED", s); },
        .on_update = [this](const json&,
                            const json& s) { drifts_ += publisher_->Observe("MODIFIED", s); },
        .on_delete = [this](const json& s) { drifts_ += publisher_->Observe("DELETED", s); },
    });
    watch_->Start();
    ASSERT_TRUE(watch_->WaitForSync(absl::Seconds(30)));
  }

  // Every slice of the pool at `generation`, and some slices at all.
  bool PoolAt(int64_t generation) {
    std::vector<json> slices = Slices();
    for (const json& s : slices) {
      if (s["spec"]["pool"]["generation"] != generation) {
        return false;
      }
    }
    return !slices.empty();
  }
  size_t DeviceCount() {
    size_t n = 0;
    for (const json& s : Slices()) {
      n += s["spec"].value("devices", json::array()).size();
    }
    return n;
  }

  void Wipe() {
    k8s::ListOptions wipe;
    wipe.field_selector = Selector();
    ASSERT_TRUE(client_->DeleteCollection(k8s::kResourceSlices, "", wipe).ok());
  }

  common::FakeClock clock_;
  sim::ApiServer server_;
  std::unique_ptr<k8s::RestClient> client_;
  std::unique_ptr<SlicePublisher> publisher_;
  std::unique_ptr<k8s::Informer> watch_;
  std::atomic<int> drifts_{0};
};

TEST_F(SliceDriftTest, OnlyChangesTheDriverDidNotMakeAreDrift) {
  SlicePublisher& p = *publisher_;
  p.Publish(SimulatedInventory("dgx-h100"));
  // Before any pass nothing is known: events are not judged.
  EXPECT_FALSE(p.Observe("DELETED", json{{"metadata", {{"name", "x"}}}}));
  ASSERT_TRUE(p.Sync().ok());
  ASSERT_TRUE(p.Published());
  std::vector<json> slices = Slices();
  ASSERT_EQ(slices.size(), 1u);
  json slice = slices[0];

  // What the pass wrote, seen again (a watch's initial list, a relist): not drift.
  EXPECT_FALSE(p.Observe("ADDED", slice));
  EXPECT_FALSE(p.Observe("MODIFIED", slice));
  // Metadata the driver does not own (annotations) may change freely.
  json annotated = slice;
  annotated["metadata"]["annotations"] = {{"note", "x"}};
  EXPECT_FALSE(p.Observe("MODIFIED", annotated));
  // A slice of someone else's node or of a deleted extra: not ours to judge.
  EXPECT_FALSE(p.Observe("DELETED", json{{"metadata", {{"name", "other"}}}}));
  EXPECT_TRUE(p.Published());

  // Spec edited by someone else.
  json edited = slice;
  edited["spec"]["devices"] = json::array();
  EXPECT_TRUE(p.Observe("MODIFIED", edited));
  EXPECT_FALSE(p.Published());
  ASSERT_TRUE(p.Sync().ok());
  EXPECT_TRUE(p.Published());

  // A slice with our selector that the driver did not write.
  json foreign = Slices()[0];
  foreign["metadata"]["name"] = "someone-elses";
  EXPECT_TRUE(p.Observe("ADDED", foreign));
  EXPECT_FALSE(p.Published());
  ASSERT_TRUE(p.Sync().ok());

  // Deleted: the kubelet's wipe.
  EXPECT_TRUE(p.Observe("DELETED", Slices()[0]));
  EXPECT_FALSE(p.Published());
  // A failed pass leaves nothing known, and readiness stays false until one succeeds.
  server_.InjectFault({.kind = sim::FaultRule::Kind::kStatus,
                       .verb = "list",
                       .resource = "resourceslices",
                       .times = 1,
                       .code = 500});
  EXPECT_FALSE(p.Sync().ok());
  EXPECT_FALSE(p.Observe("DELETED", slice));
  EXPECT_FALSE(p.Published());
  ASSERT_TRUE(p.Sync().ok());
  EXPECT_TRUE(p.Published());
}

TEST_F(SliceDriftTest, WatchRepairsAWipeAndAnEditWithoutATimer) {
  SlicePublisher& p = *publisher_;
  p.Publish(SimulatedInventory("dgx-h100"));
  ASSERT_TRUE(p.Sync().ok());
  p.Run();
  Watch();

  // The driver's own writes (a new inventory) are seen on the watch but are not drift.
  p.Publish(SimulatedInventory("mixed"));
  ASSERT_TRUE(Eventually([&] { return p.Published(); }));
  ASSERT_TRUE(Eventually([&] { return PoolAt(2); }));
  const size_t devices = DeviceCount();
  EXPECT_EQ(drifts_.load(), 0);

  const int64_t passes = p.SyncCountForTest();
  Wipe();
  ASSERT_TRUE(Eventually([&] { return PoolAt(3) && p.Published(); }));
  EXPECT_EQ(DeviceCount(), devices);
  EXPECT_GE(drifts_.load(), 1);
  EXPECT_GT(p.SyncCountForTest(), passes);

  // Someone edits the spec, once the repair above is out of the repair window: reverted at a
  // new generation, again without waiting.
  clock_.Advance(absl::Seconds(11));
  json slice = Slices()[0];
  slice["spec"]["devices"][0]["attributes"]["type"] = {{"string", "x"}};
  ASSERT_TRUE(client_->Update(k8s::kResourceSlices, "", slice, "").ok());
  ASSERT_TRUE(Eventually([&] { return PoolAt(4) && p.Published(); }));
  EXPECT_EQ(DeviceCount(), devices);
  for (const json& s : Slices()) {
    EXPECT_NE(s["spec"]["devices"][0]["attributes"]["type"], json({{"string", "x"}}));
  }
}

// A second writer that changes the pool back after every repair (another instance of the driver
// for the same node) gets one immediate repair; the next repair within the window waits for
// the backoff, so the two do not loop as fast as the API server answers.
TEST_F(SliceDriftTest, AWriterThatKeepsChangingThePoolBackIsNotFoughtInALoop) {
  SlicePublisher& p = *publisher_;
  p.Publish(SimulatedInventory("dgx-h100"));
  ASSERT_TRUE(p.Sync().ok());
  p.Run();
  Watch();
  auto edit = [&](const std::string& value) {
    json slice = Slices()[0];
    slice["spec"]["devices"][0]["attributes"]["type"] = {{"string", value}};
    ASSERT_TRUE(client_->Update(k8s::kResourceSlices, "", slice, "").ok());
  };
  auto reverted = [&] {
    return p.Published() &&
           Slices()[0]["spec"]["devices"][0]["attributes"]["type"] != json({{"string", "theirs"}});
  };
  edit("theirs");
  ASSERT_TRUE(Eventually(reverted));  // the first repair: at once
  edit("theirs");
  ASSERT_TRUE(Eventually(reverted));  // the second, within the window: also at once, then a hold
  const int drifts = drifts_.load();
  const int64_t passes = p.SyncCountForTest();
  edit("theirs");
  ASSERT_TRUE(Eventually([&] { return drifts_.load() > drifts; }));
  // The clock has not moved: the third change stays while the hold lasts. (Real time passes
  // here only to give a loop that ignored the hold the chance to show it.)
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(p.SyncCountForTest(), passes);
  EXPECT_FALSE(p.Published());
  // The hold is the initial backoff (500 ms); once it is over, the pool is repaired.
  clock_.Advance(absl::Milliseconds(500));
  ASSERT_TRUE(Eventually(reverted));
}

}  // namespace
}  // namespace dralens::driver::slices
