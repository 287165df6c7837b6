// DRAResourceHealth v1alpha1 and v1 over a real gRPC server on a Unix socket in a temp dir,
// read with the generated client stubs as the kubelet reads them.
#include "driver/health/health_service.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "driver/proto/dra-health/v1/api.grpc.pb.h"
#include "driver/proto/dra-health/v1alpha1/api.grpc.pb.h"
#include "tests/driver/health/test_gpus.h"

namespace dralens::driver::health {
namespace {

namespace fs = std::filesystem;
using discovery::HealthEvent;
using discovery::HealthEventKind;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::testing::StartsWith;

TEST(TruncateHealthMessageTest, KeepsShortAndCutsLongTo1024) {
  EXPECT_EQ(TruncateHealthMessage("Xid 48"), "Xid 48");
  const std::string exact(1024, 'a');
  EXPECT_EQ(TruncateHealthMessage(exact), exact);
  const std::string truncated = TruncateHealthMessage(std::string(1025, 'b'));
  EXPECT_EQ(truncated, std::string(1021, 'b') + "...");
  // "é" is two bytes: a cut inside it backs up to the character boundary.
  const std::string accented = std::string(1020, 'c') + "\xC3\xA9" + std::string(10, 'd');
  EXPECT_EQ(TruncateHealthMessage(accented), std::string(1020, 'c') + "...");
}

class HealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dralens-health-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    source_ = testing::MakeSource();
    ASSERT_NE(source_, nullptr);
    inventory_ = testing::Discover(*source_);
    HealthMonitorOptions monitor_options;
    monitor_options.pool_name = "node-a";
    monitor_ = std::make_unique<HealthMonitor>(monitor_options, clock_);
    monitor_->SetInventory(inventory_);
    options_.health_check_timeout_seconds = 45;
    options_.poll_interval = absl::Milliseconds(5);
  }

  void StartServer() {
    services_ = std::make_unique<HealthServices>(*monitor_, clock_, options_);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + Socket(), grpc::InsecureServerCredentials());
    RegisterHealthServices(builder, *services_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel("unix://" + Socket(), grpc::InsecureChannelCredentials());
  }

  void TearDown() override {
    if (services_ != nullptr) {
      services_->Shutdown();
    }
    if (server_ != nullptr) {
      server_->Shutdown();
      server_->Wait();
    }
    server_.reset();
    services_.reset();
    monitor_.reset();
    fs::remove_all(root_);
  }

  std::string Socket() const { return (root_ / "health.sock").string(); }

  static std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    // Only a guard against a hung test; no assertion depends on it.
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return context;
  }

  // Waits (bounded) until the server has `n` open streams.
  bool WaitForOpenStreams(int n) {
    for (int i = 0; i < 2000; ++i) {
      if (services_->OpenStreams() == n) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  std::string Gpu1() const { return inventory_.gpus()[1].uuid; }

  fs::path root_;
  common::FakeClock clock_;
  std::unique_ptr<discovery::SimulatedDeviceSource> source_;
  model::Inventory inventory_;
  std::unique_ptr<HealthMonitor> monitor_;
  HealthServiceOptions options_;
  std::unique_ptr<HealthServices> services_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

// The same checks for both API versions.
template <typename Api>
class HealthStreamTest : public HealthServiceTest {
 protected:
  using Stub = typename Api::DRAResourceHealth::Stub;
  using Request = typename Api::NodeWatchResourcesRequest;
  using Response = typename Api::NodeWatchResourcesResponse;
  using Reader = grpc::ClientReader<Response>;

  std::unique_ptr<Reader> Open(grpc::ClientContext& context) {
    stub_ = Api::DRAResourceHealth::NewStub(channel_);
    return stub_->NodeWatchResources(&context, Request());
  }

  static std::map<std::string, typename Api::DeviceHealth> Devices(const Response& response) {
    std::map<std::string, typename Api::DeviceHealth> devices;
    for (const auto& device : response.devices()) {
      devices[device.device().device_name()] = device;
    }
    return devices;
  }

  std::unique_ptr<Stub> stub_;
};

struct V1alpha1Api {
  using DRAResourceHealth = ::v1alpha1::DRAResourceHealth;
  using NodeWatchResourcesRequest = ::v1alpha1::NodeWatchResourcesRequest;
  using NodeWatchResourcesResponse = ::v1alpha1::NodeWatchResourcesResponse;
  using DeviceHealth = ::v1alpha1::DeviceHealth;
  static constexpr int kHealthy = ::v1alpha1::HEALTHY;
  static constexpr int kUnhealthy = ::v1alpha1::UNHEALTHY;
};
struct V1Api {
  using DRAResourceHealth = ::v1::DRAResourceHealth;
  using NodeWatchResourcesRequest = ::v1::NodeWatchResourcesRequest;
  using NodeWatchResourcesResponse = ::v1::NodeWatchResourcesResponse;
  using DeviceHealth = ::v1::DeviceHealth;
  static constexpr int kHealthy = ::v1::HEALTHY;
  static constexpr int kUnhealthy = ::v1::UNHEALTHY;
};
using Apis = ::testing::Types<V1alpha1Api, V1Api>;
TYPED_TEST_SUITE(HealthStreamTest, Apis);

TYPED_TEST(HealthStreamTest, SendsTheFullListOnConnect) {
  this->StartServer();
  auto context = this->Context();
  auto reader = this->Open(*context);
  typename TestFixture::Response response;
  ASSERT_TRUE(reader->Read(&response));
  ASSERT_THAT(response.devices(), SizeIs(5));
  for (const auto& device : response.devices()) {
    EXPECT_EQ(device.device().pool_name(), "node-a");
    EXPECT_EQ(device.health(), TypeParam::kHealthy);
    EXPECT_EQ(device.last_updated_time(), absl::ToUnixSeconds(this->clock_.Now()));
    EXPECT_EQ(device.health_check_timeout_seconds(), 45);
    EXPECT_EQ(device.message(), "");
  }
  auto devices = TestFixture::Devices(response);
  EXPECT_TRUE(devices.contains("gpu-1"));
  EXPECT_TRUE(devices.contains(slices::MigDeviceName(this->inventory_.mig_devices()[0])));
  context->TryCancel();
}

TYPED_TEST(HealthStreamTest, ResendsOnChangeAndOnHeartbeat) {
  this->StartServer();
  auto context = this->Context();
  auto reader = this->Open(*context);
  typename TestFixture::Response response;
  ASSERT_TRUE(reader->Read(&response));

  // Before the heartbeat is due, only the change produces a response: a premature heartbeat
  // would show gpu-1 still healthy here.
  this->clock_.Advance(absl::Seconds(29));
  // Ten poll intervals for a premature heartbeat to show up (a correct server sends nothing).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  this->monitor_->Apply(HealthEvent{this->Gpu1(), HealthEventKind::kXid, 48});
  ASSERT_TRUE(reader->Read(&response));
  auto devices = TestFixture::Devices(response);
  ASSERT_THAT(devices, SizeIs(5));
  EXPECT_EQ(devices["gpu-1"].health(), TypeParam::kUnhealthy);
  EXPECT_THAT(devices["gpu-1"].message(), HasSubstr("Xid 48"));
  EXPECT_EQ(devices["gpu-2"].health(), TypeParam::kHealthy);
  const int64_t changed_at = absl::ToUnixSeconds(this->clock_.Now());
  EXPECT_EQ(devices["gpu-2"].last_updated_time(), changed_at);

  // Nothing changes; 30 s of the clock later the same list comes again, freshly stamped.
  this->clock_.Advance(absl::Seconds(30));
  ASSERT_TRUE(reader->Read(&response));
  devices = TestFixture::Devices(response);
  ASSERT_THAT(devices, SizeIs(5));
  EXPECT_EQ(devices["gpu-1"].health(), TypeParam::kUnhealthy);
  EXPECT_EQ(devices["gpu-1"].last_updated_time(), changed_at + 30);
  context->TryCancel();
}

TYPED_TEST(HealthStreamTest, LongMessagesAreTruncated) {
  // Enough distinct Xids to make the message longer than 1024 bytes.
  for (uint64_t xid = 1000; xid < 1100; ++xid) {
    this->monitor_->Apply(HealthEvent{this->Gpu1(), HealthEventKind::kXid, xid});
  }
  this->StartServer();
  auto context = this->Context();
  auto reader = this->Open(*context);
  typename TestFixture::Response response;
  ASSERT_TRUE(reader->Read(&response));
  const std::string message = TestFixture::Devices(response)["gpu-1"].message();
  EXPECT_EQ(message.size(), 1024u);
  EXPECT_THAT(message, StartsWith("Xid 1000 (critical)"));
  EXPECT_THAT(message, EndsWith("..."));
  context->TryCancel();
}

TYPED_TEST(HealthStreamTest, ShutdownEndsABlockedStreamWithUnavailable) {
  this->StartServer();
  auto context = this->Context();
  auto reader = this->Open(*context);
  typename TestFixture::Response response;
  ASSERT_TRUE(reader->Read(&response));
  ASSERT_TRUE(this->WaitForOpenStreams(1));

  std::thread shutdown([this] {
    // The reader below is (or soon will be) blocked waiting for the next response.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    this->services_->Shutdown();
  });
  EXPECT_FALSE(reader->Read(&response));
  grpc::Status status = reader->Finish();
  shutdown.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(status.error_message(), "plugin shutting down");
  EXPECT_EQ(this->services_->OpenStreams(), 0);

  // New streams are refused the same way, and the server stops without waiting on them.
  auto late_context = this->Context();
  auto late = this->Open(*late_context);
  EXPECT_FALSE(late->Read(&response));
  EXPECT_EQ(late->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  this->server_->Shutdown();
  this->server_->Wait();
  this->server_.reset();
}

TEST_F(HealthServiceTest, ClientCancelClosesTheStream) {
  StartServer();
  auto stub = ::v1alpha1::DRAResourceHealth::NewStub(channel_);
  auto context = Context();
  auto reader = stub->NodeWatchResources(context.get(), {});
  ::v1alpha1::NodeWatchResourcesResponse response;
  ASSERT_TRUE(reader->Read(&response));
  ASSERT_TRUE(WaitForOpenStreams(1));
  context->TryCancel();
  EXPECT_FALSE(reader->Read(&response));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitForOpenStreams(0));
}

TEST_F(HealthServiceTest, SeveralStreamsOfBothVersionsSeeTheSameChange) {
  StartServer();
  auto stub_a = ::v1alpha1::DRAResourceHealth::NewStub(channel_);
  auto stub_b = ::v1::DRAResourceHealth::NewStub(channel_);
  auto context_a = Context();
  auto context_b = Context();
  auto context_c = Context();
  auto reader_a = stub_a->NodeWatchResources(context_a.get(), {});
  auto reader_b = stub_b->NodeWatchResources(context_b.get(), {});
  auto reader_c = stub_b->NodeWatchResources(context_c.get(), {});
  ::v1alpha1::NodeWatchResourcesResponse response_a;
  ::v1::NodeWatchResourcesResponse response_b, response_c;
  ASSERT_TRUE(reader_a->Read(&response_a));
  ASSERT_TRUE(reader_b->Read(&response_b));
  ASSERT_TRUE(reader_c->Read(&response_c));
  ASSERT_TRUE(WaitForOpenStreams(3));

  monitor_->Apply(HealthEvent{"", HealthEventKind::kGpuLost, 79});
  ASSERT_TRUE(reader_a->Read(&response_a));
  ASSERT_TRUE(reader_b->Read(&response_b));
  ASSERT_TRUE(reader_c->Read(&response_c));
  for (const auto& device : response_a.devices()) {
    EXPECT_EQ(device.health(), ::v1alpha1::UNHEALTHY) << device.device().device_name();
  }
  for (const auto* response : {&response_b, &response_c}) {
    ASSERT_THAT(response->devices(), SizeIs(5));
    for (const auto& device : response->devices()) {
      EXPECT_EQ(device.health(), ::v1::UNHEALTHY) << device.device().device_name();
      EXPECT_THAT(device.message(), HasSubstr("GPU lost"));
    }
  }

  // Shutdown ends all of them.
  services_->Shutdown();
  EXPECT_FALSE(reader_a->Read(&response_a));
  EXPECT_FALSE(reader_b->Read(&response_b));
  EXPECT_FALSE(reader_c->Read(&response_c));
  EXPECT_EQ(reader_a->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(reader_b->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(reader_c->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace dralens::driver::health
