// NodeDriver end to end in one process: an Xid on a GPU shows as a taint in the published
// ResourceSlice and as UNHEALTHY on the DRAResourceHealth stream the kubelet reads, and the
// registration advertises the health services.
#include "src/app/node_driver.h"

#include <grpcpp/grpcpp.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "driver/proto/dra-health/v1alpha1/api.grpc.pb.h"
#include "driver/proto/dra/v1/api.grpc.pb.h"
#include "driver/proto/pluginregistration/v1/api.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "src/telemetry/exemplar.h"
#include "tests/testing/api_fixture.h"
#include "tests/testing/temp_dir.h"

namespace dralens::app {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;

constexpr char kNode[] = "node-h";

class NodeDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.ok());
    ASSERT_TRUE(
        client()
            .Create(k8s::kNodes, "",
                    {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", kNode}}}})
            .ok());
  }

  void TearDown() override { driver_.reset(); }

  void Start(bool taints, prometheus::Registry* registry = nullptr) {
    NodeDriverOptions options;
    options.node_name = kNode;
    options.registry_dir = (root_ / "registry").string();
    options.plugins_dir = (root_ / "plugins").string();
    options.cdi_root = (root_ / "cdi").string();
    options.device_source.kind = "simulated";
    options.device_source.simulated_profile = "dgx-h100";
    options.device_taints = taints;
    options.registry = registry != nullptr ? registry : &registry_;
    options.exemplars = &exemplars_;
    auto driver = NodeDriver::Start(options, client(), common::RealClock());
    ASSERT_TRUE(driver.ok()) << driver.status();
    driver_ = *std::move(driver);
  }

  // The taints of `device` in the node's pool, as the API server has them.
  nlohmann::json TaintsOf(const std::string& device) {
    k8s::ListOptions options;
    options.field_selector = absl::StrCat("spec.nodeName=", kNode);
    auto list = client().List(k8s::kResourceSlices, "", options);
    EXPECT_TRUE(list.ok()) << list.status();
    if (list.ok()) {
      for (const nlohmann::json& slice : list->items) {
        for (const nlohmann::json& d : slice["spec"]["devices"]) {
          if (d["name"] == device) {
            return d.value("taints", nlohmann::json::array());
          }
        }
      }
    }
    return nlohmann::json::array();
  }

  std::string GpuUuid(uint32_t minor) {
    auto source = driver::discovery::MakeDeviceSource("simulated", "dgx-h100", kNode);
    EXPECT_TRUE(source.ok());
    auto inventory = (*source)->Discover();
    EXPECT_TRUE(inventory.ok());
    return inventory->FindGpuByMinor(minor)->uuid;
  }

  // The value of dralens_device_state{device, state}, or -1 when absent.
  double DeviceState(const std::string& device, const std::string& state) {
    for (const prometheus::MetricFamily& f : registry_.Collect()) {
      if (f.name != "dralens_device_state") {
        continue;
      }
      for (const prometheus::ClientMetric& m : f.metric) {
        std::map<std::string, std::string> labels;
        for (const auto& l : m.label) {
          labels[l.name] = l.value;
        }
        if (labels["device"] == device && labels["state"] == state) {
          return m.gauge.value;
        }
      }
    }
    return -1;
  }

  k8s::RestClient& client() { return api_.client(); }

  testing::TempDir dir_{"dralens-nd"};
  const fs::path root_{dir_.path()};
  prometheus::Registry registry_;
  prometheus::Registry second_registry_;  // for a second start
  telemetry::ExemplarStore exemplars_;
  testing::ApiFixture api_;
  std::unique_ptr<NodeDriver> driver_;
};

TEST_F(NodeDriverTest, AnXidTaintsTheDeviceAndShowsOnTheHealthStream) {
  Start(/*taints=*/true);

  // The registration advertises the health services next to the DRA services.
  auto registration = ::pluginregistration::Registration::NewStub(grpc::CreateChannel(
      "unix://" + driver_->registration_socket_path(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext info_context;
  info_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ::pluginregistration::PluginInfo info;
  ASSERT_TRUE(registration->GetInfo(&info_context, {}, &info).ok());
  EXPECT_THAT(info.supported_versions(), Contains("v1alpha1.DRAResourceHealth"));
  EXPECT_THAT(info.supported_versions(), Contains("v1.DRAResourceHealth"));

  ASSERT_TRUE(TaintsOf("gpu-2").empty());
  driver::discovery::HealthEvent xid;
  xid.gpu_uuid = GpuUuid(2);
  xid.kind = driver::discovery::HealthEventKind::kXid;
  xid.xid = 48;  // double-bit ECC error: critical
  driver_->health().Apply(xid);

  // The publisher's loop republishes with the taint.
  nlohmann::json taints;
  for (int i = 0; i < 500 && taints.empty(); ++i) {
    taints = TaintsOf("gpu-2");
    if (taints.empty()) {
      usleep(10000);
    }
  }
  ASSERT_EQ(taints.size(), 1u);
  EXPECT_EQ(taints[0]["key"], "gpu.dralens.dev/xid");
  EXPECT_EQ(taints[0]["value"], "48");
  EXPECT_EQ(taints[0]["effect"], "NoSchedule");
  EXPECT_TRUE(TaintsOf("gpu-3").empty());
  EXPECT_EQ(DeviceState("gpu-2", "unhealthy"), 1);
  EXPECT_EQ(DeviceState("gpu-2", "free"), 0);
  EXPECT_EQ(DeviceState("gpu-3", "free"), 1);

  // The kubelet's health stream says the same.
  auto health = ::v1alpha1::DRAResourceHealth::NewStub(grpc::CreateChannel(
      "unix://" + driver_->dra_socket_path(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext stream_context;
  stream_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto reader = health->NodeWatchResources(&stream_context, {});
  ::v1alpha1::NodeWatchResourcesResponse response;
  ASSERT_TRUE(reader->Read(&response));
  int unhealthy = 0;
  for (const auto& d : response.devices()) {
    EXPECT_EQ(d.device().pool_name(), kNode);
    if (d.health() == ::v1alpha1::UNHEALTHY) {
      ++unhealthy;
      EXPECT_EQ(d.device().device_name(), "gpu-2");
      EXPECT_THAT(d.message(), ::testing::HasSubstr("48"));
    }
  }
  EXPECT_EQ(response.devices_size(), 8);
  EXPECT_EQ(unhealthy, 1);

  // Stopping the node ends the open stream with a status, not a hang.
  driver_->Stop();
  while (reader->Read(&response)) {
  }
  grpc::Status ended = reader->Finish();
  EXPECT_FALSE(ended.ok());
}

TEST_F(NodeDriverTest, WithoutTaintsHealthReachesOnlyTheStream) {
  Start(/*taints=*/false);
  driver::discovery::HealthEvent lost;
  lost.gpu_uuid = GpuUuid(1);
  lost.kind = driver::discovery::HealthEventKind::kGpuLost;
  driver_->health().Apply(lost);
  // The device series follow at once (the health change reaches the node view synchronously).
  EXPECT_EQ(DeviceState("gpu-1", "unhealthy"), 1);
  // A convergence pass after the event: with taints off, it has nothing new to publish (it
  // would write the taint if the event had reached the publisher).
  absl::StatusOr<driver::slices::SyncResult> pass = driver_->SyncSlicesForTest();
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_FALSE(pass->changed());
  EXPECT_TRUE(TaintsOf("gpu-1").empty());
  bool unhealthy = false;
  for (const auto& d : driver_->health().Snapshot()) {
    unhealthy = unhealthy ||
                (d.device == "gpu-1" && d.health == driver::health::DeviceHealthStatus::kUnhealthy);
  }
  EXPECT_TRUE(unhealthy);
}

// A kill inside NodeUnprepareResources after the CDI spec went (it goes first) and before the
// checkpoint entry did: the next start finishes that unprepare, so the claim is not reported as
// prepared, nor answered from the checkpoint with a spec that is gone; preparing it again
// writes its spec afresh.
TEST_F(NodeDriverTest, AStartFinishesAnUnprepareInterruptedAfterItsSpecWent) {
  namespace dra = ::k8s::io::kubelet::pkg::apis::dra::v1;
  Start(/*taints=*/false);
  auto created =
      client().Create(k8s::kResourceClaims, "default",
                      {{"apiVersion", "resource.k8s.io/v1"},
                       {"kind", "ResourceClaim"},
                       {"metadata", {{"name", "c"}, {"namespace", "default"}}},
                       {"spec",
                        {{"devices",
                          {{"requests", nlohmann::json::array({{
                                            {"name", "gpu"},
                                            {"exactly", {{"deviceClassName", "gpu.dralens.dev"}}},
                                        }})}}}}}});
  ASSERT_TRUE(created.ok()) << created.status();
  nlohmann::json claim = *created;
  const std::string uid = claim["metadata"]["uid"];
  claim["status"]["allocation"] = {
      {"devices",
       {{"results", nlohmann::json::array({{{"request", "gpu"},
                                            {"driver", "gpu.dralens.dev"},
                                            {"pool", kNode},
                                            {"device", "gpu-1"}}})}}}};
  ASSERT_TRUE(client().Update(k8s::kResourceClaims, "default", claim, "status").ok());
  auto prepare = [&] {
    auto stub = dra::DRAPlugin::NewStub(grpc::CreateChannel("unix://" + driver_->dra_socket_path(),
                                                            grpc::InsecureChannelCredentials()));
    dra::NodePrepareResourcesRequest request;
    auto* c = request.add_claims();
    c->set_namespace_("default");
    c->set_name("c");
    c->set_uid(uid);
    dra::NodePrepareResourcesResponse response;
    grpc::ClientContext context;
    grpc::Status s = stub->NodePrepareResources(&context, request, &response);
    return s.ok() ? response.claims().at(uid).error() : s.error_message();
  };
  auto checkpointed = [&] {
    std::ifstream in(root_ / "plugins/gpu.dralens.dev/checkpoint.json");
    const nlohmann::json file = nlohmann::json::parse(in, nullptr, false);
    return !file.is_discarded() && file.value("claims", nlohmann::json::object()).contains(uid);
  };
  const fs::path spec = root_ / "cdi" / ("k8s.gpu.dralens.dev-claim_" + uid + ".json");
  ASSERT_EQ(prepare(), "");
  ASSERT_TRUE(fs::exists(spec));
  ASSERT_TRUE(checkpointed());

  driver_.reset();
  ASSERT_TRUE(fs::remove(spec));  // what the kill left: the entry without its spec
  ASSERT_TRUE(checkpointed());
  Start(/*taints=*/false, &second_registry_);
  EXPECT_FALSE(checkpointed());
  EXPECT_EQ(prepare(), "");
  EXPECT_TRUE(fs::exists(spec));
  EXPECT_TRUE(checkpointed());
}

}  // namespace
}  // namespace dralens::app
