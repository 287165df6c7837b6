// SlicePublisher against the embedded API server: create, no-op re-sync, update with a bumped
// generation, deletion of extras, recreation after a kubelet wipe, API faults and conflicts.
#include "driver/slices/slice_publisher.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/k8s/rest_client.h"
#include "src/model/codec.h"
#include "src/sim/api_server.h"
#include "tests/driver/slices/slices_test_util.h"

namespace dralens::driver::slices {
namespace {

using ::testing::HasSubstr;
using namespace testing;  // NOLINT(build/namespaces): the helpers of this test folder

class SlicePublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<sim::ApiServer>();
    ASSERT_TRUE(server_->Start().ok());
    k8s::RestConfig config;
    config.server = server_->url();
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
    node_uid_ = (*node)["metadata"]["uid"];
  }

  void TearDown() override {
    publisher_.reset();
    server_->Stop();
  }

  SlicePublisher& Publisher(SlicePublisherOptions options = {}) {
    options.node_name = kNode;
    options.driver_name = kDriver;
    options.poll_interval = absl::Milliseconds(2);
    publisher_ = std::make_unique<SlicePublisher>(*client_, clock_, options);
    return *publisher_;
  }

  // The slices of our node and driver, by name.
  std::vector<model::ResourceSlice> Slices(const std::string& node = kNode) {
    k8s::ListOptions options;
    options.field_selector = absl::StrCat("spec.nodeName=", node, ",spec.driver=", kDriver);
    auto list = k8s::ListAll(*client_, k8s::kResourceSlices, "", options);
    EXPECT_TRUE(list.ok()) << list.status();
    std::vector<model::ResourceSlice> out;
    if (list.ok()) {
      for (const nlohmann::json& item : list->items) {
        auto slice = model::Decode<model::ResourceSlice>(item);
        EXPECT_TRUE(slice.ok()) << slice.status();
        if (slice.ok()) {
          out.push_back(*slice);
        }
      }
    }
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.metadata.name < b.metadata.name; });
    return out;
  }

  SyncResult SyncOk(SlicePublisher& publisher) {
    absl::StatusOr<SyncResult> result = publisher.Sync();
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : SyncResult{};
  }

  // Every slice of the pool at one generation, with a matching resourceSliceCount.
  void ExpectConsistentPool(int64_t generation, size_t count) {
    const auto slices = Slices();
    ASSERT_EQ(slices.size(), count);
    for (const model::ResourceSlice& s : slices) {
      EXPECT_EQ(s.spec.pool.generation, generation) << s.metadata.name;
      EXPECT_EQ(s.spec.pool.resource_slice_count, int64_t(count)) << s.metadata.name;
      ASSERT_EQ(s.metadata.owner_references.size(), 1u);
      EXPECT_EQ(s.metadata.owner_references[0].uid, node_uid_);
    }
  }

  // Drives the background loop: advances fake time in small steps until `done` holds. Bounded by
  // iterations, never by wall-clock time.
  bool DriveUntil(const std::function<bool()>& done) {
    for (int i = 0; i < 5000; ++i) {
      if (done()) {
        return true;
      }
      clock_.Advance(absl::Milliseconds(250));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done();
  }

  common::FakeClock clock_;
  std::unique_ptr<sim::ApiServer> server_;
  std::unique_ptr<k8s::RestClient> client_;
  std::unique_ptr<SlicePublisher> publisher_;
  std::string node_uid_;
};

TEST_F(SlicePublisherTest, SyncBeforePublishIsAnError) {
  SlicePublisher& p = Publisher();
  EXPECT_EQ(p.Sync().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(p.Published());
  EXPECT_FALSE(p.LastSuccess().has_value());
}

TEST_F(SlicePublisherTest, FirstPublishCreatesAndResyncIsANoOp) {
  SlicePublisher& p = Publisher();
  p.Publish(SimulatedInventory("dgx-h100"));
  SyncResult first = SyncOk(p);
  EXPECT_EQ(first.created, 1);
  EXPECT_EQ(first.updated + first.deleted, 0);
  EXPECT_EQ(first.generation, 1);
  EXPECT_EQ(first.devices, 8u);
  EXPECT_TRUE(p.Published());
  EXPECT_EQ(p.LastSuccess(), clock_.Now());
  ExpectConsistentPool(1, 1);
  const auto before = Slices();
  EXPECT_EQ(before[0].spec.devices.size(), 8u);
  EXPECT_TRUE(absl::StartsWith(before[0].metadata.name, "node-a-gpu.dralens.dev-"));

  clock_.Advance(absl::Seconds(10));
  SyncResult second = SyncOk(p);
  EXPECT_FALSE(second.changed());
  EXPECT_EQ(second.generation, 1);
  EXPECT_EQ(p.LastSuccess(), clock_.Now());
  const auto after = Slices();
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].metadata.resource_version, before[0].metadata.resource_version);

  // Publishing an equal inventory changes nothing either.
  p.Publish(SimulatedInventory("dgx-h100"));
  EXPECT_FALSE(SyncOk(p).changed());
}

TEST_F(SlicePublisherTest, InventoryChangeUpdatesWithBumpedGeneration) {
  SlicePublisher& p = Publisher();
  p.Publish(SimulatedInventory("dgx-h100"));
  SyncOk(p);
  const std::string name = Slices()[0].metadata.name;

  p.Publish(SimulatedInventory("mixed"));
  EXPECT_FALSE(p.Published());
  SyncResult result = SyncOk(p);
  EXPECT_EQ(result.updated, 1);
  EXPECT_EQ(result.created + result.deleted, 0);
  EXPECT_EQ(result.generation, 2);
  ExpectConsistentPool(2, 1);
  const auto slices = Slices();
  EXPECT_EQ(slices[0].metadata.name, name);
  EXPECT_EQ(slices[0].spec.devices.size(), 16u);
  EXPECT_NE(FindDevice(slices, "gpu-0-mig-3g40gb-9-0"), nullptr);
  EXPECT_TRUE(p.Published());
}

TEST_F(SlicePublisherTest, GrowingAndShrinkingThePool) {
  SlicePublisher& p = Publisher();
  p.Publish(SimulatedInventory("dgx-h100"));
  SyncOk(p);
  p.Publish(BigInventory(300));
  SyncResult grown = SyncOk(p);
  EXPECT_EQ(grown.updated, 1);
  EXPECT_EQ(grown.created, 2);
  ExpectConsistentPool(2, 3);

  p.Publish(SimulatedInventory("a100-40gb"));
  SyncResult shrunk = SyncOk(p);
  EXPECT_EQ(shrunk.updated, 1);
  EXPECT_EQ(shrunk.deleted, 2);
  ExpectConsistentPool(3, 1);
}

TEST_F(SlicePublisherTest, ExtraSlicesAreDeletedOthersLeftAlone) {
  // A stray slice of ours (e.g. from an older pod) and one of another node.
  auto stray = SliceBuilder({kNode, node_uid_, kDriver}, {.pool_generation = 5})
                   .Build(SimulatedInventory("a100-40gb"));
  ASSERT_TRUE(stray.ok());
  ASSERT_TRUE(client_->Create(k8s::kResourceSlices, "", model::Encode((*stray)[0])).ok());
  auto other = SliceBuilder({"node-b", "", kDriver}, {}).Build(SimulatedInventory("a100-40gb"));
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(client_->Create(k8s::kResourceSlices, "", model::Encode((*other)[0])).ok());
  ASSERT_TRUE(client_->Create(k8s::kResourceSlices, "", model::Encode((*stray)[0])).ok());

  SlicePublisher& p = Publisher();
  p.Publish(SimulatedInventory("dgx-h100"));
  SyncResult result = SyncOk(p);
  EXPECT_EQ(result.updated, 1);
  EXPECT_EQ(result.deleted, 1);
  EXPECT_EQ(result.generation, 6);  // max seen (5) + 1
  ExpectConsistentPool(6, 1);
  EXPECT_EQ(Slices()[0].spec.devices.size(), 8u);
  EXPECT_EQ(Slices("node-b").size(), 1u);
}

TEST_F(SlicePublisherTest, KubeletWipeIsRepublishedWithAHigherGeneration) {
  SlicePublisher& p = Publisher();
  p.Publish(SimulatedInventory("mixed"));
  SyncOk(p);
  p.Publish(SimulatedInventory("dgx-h100"));
  EXPECT_EQ(SyncOk(p).generation, 2);

  // What the kubelet does at its start and 30 s after the plugin went away.
  k8s::ListOptions wipe;
  wipe.field_selector = absl::StrCat("spec.nodeName=", kNode, ",spec.driver=", kDriver);
  ASSERT_TRUE(client_->DeleteCollection(k8s::kResourceSlices, "", wipe).ok());
  ASSERT_TRUE(Slices().empty());

  SyncResult result = SyncOk(p);
  EXPECT_EQ(result.created, 1);
  EXPECT_EQ(result.generation, 3);
  ExpectConsistentPool(3, 1);
}

TEST_F(SlicePublisherTest, NewPublisherRepublishesOnStart) {
  {
    SlicePublisher& p = Publisher();
    p.Publish(SimulatedInventory("dgx-h100"));
    SyncOk(p);
  }
  // A restarted plugin lists first: the same inventory writes nothing, a new one continues
  // from the generation the server holds.
  SlicePublisher& restarted = Publisher();
  restarted.Publish(SimulatedInventory("dgx-h100"));
  EXPECT_FALSE(SyncOk(restarted).changed());
  restarted.Publish(SimulatedInventory("mixed"));
  EXPECT_EQ(SyncOk(restarted).generation, 2);
}

TEST_F(SlicePublisherTest, ExternalEditIsReverted) {
  SlicePublisher& p = Publisher();
  p.Publish(SimulatedInventory("dgx-h100"));
  SyncOk(p);
  const std::string name = Slices()[0].metadata.name;
  auto patched = client_->MergePatch(
      k8s::kResourceSlices, "", name,
      {{"spec",
        {{"devices", {{{"name", "gpu-0"}, {"attributes", {{"type", {{"string", "x"}}}}}}}}}}},
      "");
  ASSERT_TRUE(patched.ok()) << patched.status();

  SyncResult result = SyncOk(p);
  EXPECT_EQ(result.updated, 1);
  EXPECT_EQ(result.generation, 2);
  EXPECT_EQ(Slices()[0].spec.devices.size(), 8u);
  EXPECT_FALSE(SyncOk(p).changed());
}

TEST_F(SlicePublisherTest, ConflictStartsThePassOver) {
  SlicePublisher& p = Publisher();
  p.Publish(SimulatedInventory("dgx-h100"));
  SyncOk(p);
  p.Publish(SimulatedInventory("mixed"));
  server_->InjectFault({.kind = sim::FaultRule::Kind::kStatus,
                        .verb = "update",
                        .resource = "resourceslices",
                        .times = 1,
                        .code = 409});
  SyncResult result = SyncOk(p);
  EXPECT_EQ(result.updated, 1);
  ExpectConsistentPool(2, 1);
  EXPECT_EQ(p.SyncCountForTest(), 2);

  // Conflicts on every pass: the error comes back after max_conflict_passes.
  p.Publish(SimulatedInventory("a100-40gb"));
  server_->InjectFault({.kind = sim::FaultRule::Kind::kStatus,
                        .verb = "update",
                        .resource = "resourceslices",
                        .times = -1,
                        .code = 409});
  absl::StatusOr<SyncResult> failed = p.Sync();
  EXPECT_TRUE(k8s::IsConflict(failed.status())) << failed.status();
  EXPECT_THAT(failed.status().message(), HasSubstr("publish slices: update slice"));
  EXPECT_FALSE(p.Published());
  server_->ClearFaults();
  EXPECT_EQ(SyncOk(p).updated, 1);
  EXPECT_TRUE(p.Published());
}

TEST_F(SlicePublisherTest, ApiErrorsAreReturnedThenConverge) {
  SlicePublisher& p = Publisher();
  p.Publish(SimulatedInventory("dgx-h100"));
  server_->InjectFault({.kind = sim::FaultRule::Kind::kStatus,
                        .verb = "create",
                        .resource = "resourceslices",
                        .times = 1,
                        .code = 500});
  absl::StatusOr<SyncResult> failed = p.Sync();
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable) << failed.status();
  EXPECT_FALSE(p.Published());
  EXPECT_FALSE(p.LastError().ok());
  EXPECT_EQ(SyncOk(p).created, 1);
  EXPECT_TRUE(p.Published());
  EXPECT_TRUE(p.LastError().ok());
  ExpectConsistentPool(1, 1);
}

TEST_F(SlicePublisherTest, MetricsFollowEveryPass) {
  prometheus::Registry registry;
  SliceMetrics metrics(registry);
  SlicePublisherOptions options;
  options.metrics = &metrics;
  SlicePublisher& p = Publisher(options);
  auto value = [&](const std::string& family, const prometheus::Labels& labels) -> double {
    for (const prometheus::MetricFamily& f : registry.Collect()) {
      if (f.name != family) {
        continue;
      }
      for (const prometheus::ClientMetric& m : f.metric) {
        prometheus::Labels have;
        for (const auto& l : m.label) {
          have[l.name] = l.value;
        }
        if (have == labels) {
          return f.type == prometheus::MetricType::Counter     ? m.counter.value
                 : f.type == prometheus::MetricType::Histogram ? m.histogram.sample_count
                                                               : m.gauge.value;
        }
      }
    }
    return -1;
  };
  p.Publish(SimulatedInventory("dgx-h100"));
  SyncOk(p);
  EXPECT_EQ(value("dralens_slices_syncs_total", {{"result", "changed"}}), 1);
  EXPECT_EQ(value("dralens_slices_pool_generation", {}), 1);
  EXPECT_EQ(value("dralens_slices_published_devices", {}), 8);
  EXPECT_EQ(value("dralens_slices_published", {}), 1);
  SyncOk(p);
  EXPECT_EQ(value("dralens_slices_syncs_total", {{"result", "unchanged"}}), 1);

  server_->InjectFault({.kind = sim::FaultRule::Kind::kStatus,
                        .verb = "list",
                        .resource = "resourceslices",
                        .times = 1,
                        .code = 500});
  EXPECT_FALSE(p.Sync().ok());
  EXPECT_EQ(value("dralens_slices_syncs_total", {{"result", "error"}}), 1);
  EXPECT_EQ(value("dralens_slices_pool_generation", {}), 1);  // the last good pass stands

  p.Publish(SimulatedInventory("mixed"));
  SyncOk(p);
  EXPECT_EQ(value("dralens_slices_syncs_total", {{"result", "changed"}}), 2);
  EXPECT_EQ(value("dralens_slices_pool_generation", {}), 2);
  EXPECT_EQ(value("dralens_slices_published_devices", {}), 16);
  EXPECT_EQ(value("dralens_slices_sync_duration_seconds", {}), 4);
}

TEST_F(SlicePublisherTest, TaintsAreRepublishedOnChangeOnly) {
  SlicePublisher& p = Publisher();
  p.Publish(SimulatedInventory("dgx-h100"));
  SyncOk(p);
  model::DeviceTaint lost{.key = "gpu.dralens.dev/gpu-lost",
                          .value = "",
                          .effect = "NoSchedule",
                          .time_added = absl::FromUnixSeconds(1700000000)};
  p.SetTaints({{"gpu-5", {lost}}});
  EXPECT_FALSE(p.Published());
  SyncResult tainted = SyncOk(p);
  EXPECT_TRUE(tainted.changed());
  EXPECT_EQ(tainted.generation, 2);
  const std::vector<model::ResourceSlice> slices = Slices();
  const model::SliceDevice* gpu5 = FindDevice(slices, "gpu-5");
  ASSERT_NE(gpu5, nullptr);
  ASSERT_EQ(gpu5->taints.size(), 1u);
  EXPECT_EQ(gpu5->taints[0].key, "gpu.dralens.dev/gpu-lost");

  p.SetTaints({{"gpu-5", {lost}}});  // the same again: nothing to write
  EXPECT_FALSE(SyncOk(p).changed());
  p.SetTaints({});
  SyncResult cleared = SyncOk(p);
  EXPECT_TRUE(cleared.changed());
  EXPECT_EQ(cleared.generation, 3);
  const std::vector<model::ResourceSlice> after = Slices();
  ASSERT_NE(FindDevice(after, "gpu-5"), nullptr);
  EXPECT_TRUE(FindDevice(after, "gpu-5")->taints.empty());
}

TEST_F(SlicePublisherTest, MissingNodeIsAnError) {
  SlicePublisher p(*client_, clock_, {.node_name = "no-such-node"});
  p.Publish(SimulatedInventory("dgx-h100"));
  absl::StatusOr<SyncResult> result = p.Sync();
  EXPECT_TRUE(k8s::IsNotFound(result.status())) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("get node no-such-node"));
}

TEST_F(SlicePublisherTest, LoopRetriesWithBackoffUntilConverged) {
  SlicePublisherOptions options;
  options.initial_backoff = absl::Seconds(1);
  SlicePublisher& p = Publisher(options);
  server_->InjectFault({.kind = sim::FaultRule::Kind::kTooManyRequests,
                        .verb = "list",
                        .resource = "resourceslices",
                        .times = 2,
                        .retry_after_seconds = 2});
  server_->InjectFault({.kind = sim::FaultRule::Kind::kStatus,
                        .verb = "create",
                        .resource = "resourceslices",
                        .times = 1,
                        .code = 500});
  p.Run();
  p.Publish(SimulatedInventory("dgx-h100"));
  ASSERT_TRUE(DriveUntil([&] { return p.Published(); })) << p.LastError();
  // Two 429s on the list, one 500 on the create, then success.
  EXPECT_EQ(p.SyncCountForTest(), 4);
  ExpectConsistentPool(1, 1);

  // A later inventory goes out at once.
  p.Publish(SimulatedInventory("mixed"));
  ASSERT_TRUE(DriveUntil([&] { return p.Published(); })) << p.LastError();
  ExpectConsistentPool(2, 1);
  p.Stop();
  p.Stop();
}

TEST_F(SlicePublisherTest, LoopWaitsForTheBackoffOnTheInjectedClock) {
  SlicePublisherOptions options;
  options.initial_backoff = absl::Seconds(30);
  SlicePublisher& p = Publisher(options);
  server_->InjectFault({.kind = sim::FaultRule::Kind::kStatus,
                        .verb = "create",
                        .resource = "resourceslices",
                        .times = 1,
                        .code = 503});
  p.Run();
  p.Publish(SimulatedInventory("dgx-h100"));
  // The first attempt runs without any time passing.
  for (int i = 0; i < 5000 && p.SyncCountForTest() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(p.SyncCountForTest(), 1);
  for (int i = 0; i < 5000 && p.LastError().ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_FALSE(p.LastError().ok());
  // Short of the backoff, nothing happens however long we wait in real time.
  clock_.Advance(absl::Seconds(29));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(p.SyncCountForTest(), 1);
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(DriveUntil([&] { return p.Published(); }));
  EXPECT_EQ(p.SyncCountForTest(), 2);
}

TEST_F(SlicePublisherTest, LoopResyncsPeriodicallyAndRepairsAWipe) {
  SlicePublisherOptions options;
  options.resync_interval = absl::Seconds(60);
  SlicePublisher& p = Publisher(options);
  p.Run();
  p.Publish(SimulatedInventory("dgx-h100"));
  ASSERT_TRUE(DriveUntil([&] { return p.Published(); }));
  k8s::ListOptions wipe;
  wipe.field_selector = absl::StrCat("spec.nodeName=", kNode, ",spec.driver=", kDriver);
  ASSERT_TRUE(client_->DeleteCollection(k8s::kResourceSlices, "", wipe).ok());
  const std::optional<absl::Time> first = p.LastSuccess();
  ASSERT_TRUE(first.has_value());
  // Nothing triggers a pass but the resync timer.
  clock_.Advance(absl::Seconds(60));
  ASSERT_TRUE(DriveUntil([&] { return p.LastSuccess() > first; }));
  ExpectConsistentPool(2, 1);
}

}  // namespace
}  // namespace dralens::driver::slices
