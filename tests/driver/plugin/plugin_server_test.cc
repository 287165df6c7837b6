// PluginServer over real Unix sockets in a temp dir, driven by gRPC clients generated from our
// own protos, as the kubelet would drive it.
#include "driver/plugin/plugin_server.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "driver/proto/dra-health/v1/api.grpc.pb.h"
#include "driver/proto/dra-health/v1alpha1/api.grpc.pb.h"
#include "driver/proto/dra/v1/api.grpc.pb.h"
#include "driver/proto/dra/v1beta1/api.grpc.pb.h"
#include "driver/proto/pluginregistration/v1/api.grpc.pb.h"
#include "prometheus/registry.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "tests/driver/plugin/fake_claim_handler.h"
#include "tests/testing/eventually.h"

namespace dralens::driver::plugin {
namespace {

namespace fs = std::filesystem;
namespace dra_v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace dra_v1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr char kDriver[] = "gpu.dralens.dev";

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return context;
}

template <typename Request>
void AddClaim(Request& request, const std::string& uid, const std::string& name = "claim") {
  auto* claim = request.add_claims();
  claim->set_namespace_("default");
  claim->set_uid(uid);
  claim->set_name(name);
}

// Binds a Unix socket at `path` and closes it without unlinking: what a crashed plugin leaves.
void LeaveStaleSocket(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << path;
  close(fd);
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode;
}

class PluginServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dralens-plugin-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    options_.driver_name = kDriver;
    options_.registry_dir = (root_ / "plugins_registry").string();
    options_.plugins_dir = (root_ / "plugins").string();
    options_.shutdown_grace = std::chrono::milliseconds(200);
  }

  void TearDown() override {
    server_.reset();
    fs::remove_all(root_);
  }

  void StartServer() {
    auto server = PluginServer::Start(options_, handler_, Telemetry());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }

  std::string RegSock() const { return (root_ / "plugins_registry" / "gpu.dralens.dev-reg.sock"); }
  std::string DraSock() const { return (root_ / "plugins" / kDriver / "dra.sock"); }

  std::shared_ptr<grpc::Channel> Channel(const std::string& path) {
    return grpc::CreateChannel("unix://" + path, grpc::InsecureChannelCredentials());
  }

  // One NodePrepareResources call per element of `ok`, all at once, each on its own thread and
  // for its own claim uid-<i>; ok[i] becomes 1 when call i answered OK for its claim, no error.
  std::vector<std::thread> PrepareAtOnce(dra_v1::DRAPlugin::Stub& stub, std::vector<int>& ok) {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < ok.size(); ++i) {
      threads.emplace_back([&stub, &ok, i] {
        dra_v1::NodePrepareResourcesRequest request;
        const std::string uid = "uid-" + std::to_string(i);
        AddClaim(request, uid);
        dra_v1::NodePrepareResourcesResponse response;
        auto context = std::make_unique<grpc::ClientContext>();
        context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        ok[i] = stub.NodePrepareResources(context.get(), request, &response).ok() &&
                response.claims().contains(uid) && response.claims().at(uid).error().empty();
      });
    }
    return threads;
  }

  fs::path root_;
  PluginServerOptions options_;
  CallTelemetry Telemetry() { return CallTelemetry{.metrics = call_metrics_, .tracer = tracer_}; }

  FakeClaimHandler handler_;
  prometheus::Registry registry_;
  KubeletCallMetrics call_metrics_ = KubeletCallMetrics::Create(registry_);
  telemetry::NoopTracer tracer_;
  PluginServerPtr server_;
};

TEST_F(PluginServerTest, GetInfoReportsTypeNameEndpointAndVersionsInOrder) {
  StartServer();
  EXPECT_EQ(server_->registration_socket_path(), RegSock());
  EXPECT_EQ(server_->dra_socket_path(), DraSock());

  auto stub = ::pluginregistration::Registration::NewStub(Channel(RegSock()));
  ::pluginregistration::PluginInfo info;
  grpc::Status status = stub->GetInfo(Context().get(), {}, &info);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(info.type(), "DRAPlugin");
  EXPECT_EQ(info.name(), "gpu.dralens.dev");
  EXPECT_EQ(info.endpoint(), DraSock());
  EXPECT_TRUE(fs::path(info.endpoint()).is_absolute());
  EXPECT_THAT(info.supported_versions(), ElementsAre("v1.DRAPlugin", "v1beta1.DRAPlugin"));
}

TEST(SupportedVersionsTest, HealthServicesFollowTheNodeService) {
  EXPECT_THAT(SupportedVersions(false), ElementsAre("v1.DRAPlugin", "v1beta1.DRAPlugin"));
  EXPECT_THAT(SupportedVersions(true),
              ElementsAre("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth",
                          "v1.DRAResourceHealth"));
}

TEST_F(PluginServerTest, NotifyRegistrationStatusIsRecorded) {
  StartServer();
  EXPECT_EQ(server_->RegistrationStatus(), RegistrationState{});

  auto stub = ::pluginregistration::Registration::NewStub(Channel(RegSock()));
  ::pluginregistration::RegistrationStatus rejected;
  rejected.set_plugin_registered(false);
  rejected.set_error("no handler registered for plugin type");
  ::pluginregistration::RegistrationStatusResponse response;
  ASSERT_TRUE(stub->NotifyRegistrationStatus(Context().get(), rejected, &response).ok());
  EXPECT_EQ(server_->RegistrationStatus(),
            (RegistrationState{.notified = true,
                               .registered = false,
                               .error = "no handler registered for plugin type"}));

  ::pluginregistration::RegistrationStatus accepted;
  accepted.set_plugin_registered(true);
  ASSERT_TRUE(stub->NotifyRegistrationStatus(Context().get(), accepted, &response).ok());
  EXPECT_EQ(server_->RegistrationStatus(),
            (RegistrationState{.notified = true, .registered = true, .error = ""}));
}

// A restarted kubelet registers the plugin again (and may have wiped its slices): each
// accepted registration runs the hook, a rejected one does not.
TEST_F(PluginServerTest, EveryAcceptedRegistrationRunsTheHook) {
  std::atomic<int> registered{0};
  options_.on_registered = [&registered] { ++registered; };
  StartServer();
  auto stub = ::pluginregistration::Registration::NewStub(Channel(RegSock()));
  ::pluginregistration::RegistrationStatusResponse response;
  ::pluginregistration::RegistrationStatus rejected;
  rejected.set_plugin_registered(false);
  rejected.set_error("refused");
  ASSERT_TRUE(stub->NotifyRegistrationStatus(Context().get(), rejected, &response).ok());
  EXPECT_EQ(registered.load(), 0);
  ::pluginregistration::RegistrationStatus accepted;
  accepted.set_plugin_registered(true);
  ASSERT_TRUE(stub->NotifyRegistrationStatus(Context().get(), accepted, &response).ok());
  ASSERT_TRUE(stub->NotifyRegistrationStatus(Context().get(), accepted, &response).ok());
  EXPECT_EQ(registered.load(), 2);
}

TEST_F(PluginServerTest, PrepareAndUnprepareV1WithShareId) {
  handler_.SetDevices("uid-a", {PreparedDevice{.request_names = {"gpu", "mig"},
                                               .pool_name = "node-a",
                                               .device_name = "gpu-1",
                                               .cdi_device_ids = {"k8s.gpu.dralens.dev/claim=x"},
                                               .share_id = "share-7"}});
  handler_.SetError("uid-b", "device gpu-2 is unhealthy");
  StartServer();
  auto stub = dra_v1::DRAPlugin::NewStub(Channel(DraSock()));

  dra_v1::NodePrepareResourcesRequest request;
  AddClaim(request, "uid-a", "a");
  AddClaim(request, "uid-b", "b");
  AddClaim(request, "uid-c", "c");
  dra_v1::NodePrepareResourcesResponse response;
  grpc::Status status = stub->NodePrepareResources(Context().get(), request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_THAT(response.claims(), SizeIs(3));

  const auto& a = response.claims().at("uid-a");
  EXPECT_EQ(a.error(), "");
  ASSERT_THAT(a.devices(), SizeIs(1));
  EXPECT_THAT(a.devices(0).request_names(), ElementsAre("gpu", "mig"));
  EXPECT_EQ(a.devices(0).pool_name(), "node-a");
  EXPECT_EQ(a.devices(0).device_name(), "gpu-1");
  EXPECT_THAT(a.devices(0).cdi_device_ids(), ElementsAre("k8s.gpu.dralens.dev/claim=x"));
  ASSERT_TRUE(a.devices(0).has_share_id());
  EXPECT_EQ(a.devices(0).share_id(), "share-7");

  EXPECT_EQ(response.claims().at("uid-b").error(), "device gpu-2 is unhealthy");
  EXPECT_THAT(response.claims().at("uid-b").devices(), IsEmpty());

  const auto& c = response.claims().at("uid-c");
  ASSERT_THAT(c.devices(), SizeIs(1));
  EXPECT_FALSE(c.devices(0).has_share_id());  // optional: absent, not ""

  ASSERT_THAT(handler_.PrepareCalls(), SizeIs(1));
  const ClaimRef ref = handler_.PrepareCalls()[0][0];
  EXPECT_EQ(ref.namespace_name, "default");
  EXPECT_EQ(ref.uid, "uid-a");
  EXPECT_EQ(ref.name, "a");

  dra_v1::NodeUnprepareResourcesRequest unprepare;
  AddClaim(unprepare, "uid-a");
  AddClaim(unprepare, "uid-b");
  dra_v1::NodeUnprepareResourcesResponse unprepared;
  ASSERT_TRUE(stub->NodeUnprepareResources(Context().get(), unprepare, &unprepared).ok());
  ASSERT_THAT(unprepared.claims(), SizeIs(2));
  EXPECT_EQ(unprepared.claims().at("uid-a").error(), "");
  EXPECT_EQ(unprepared.claims().at("uid-b").error(), "device gpu-2 is unhealthy");
}

TEST_F(PluginServerTest, PrepareAndUnprepareV1beta1DropsShareId) {
  PreparedDevice device = FakeClaimHandler::DefaultDevice("uid-a");
  device.share_id = "share-7";
  handler_.SetDevices("uid-a", {device});
  StartServer();
  auto stub = dra_v1beta1::DRAPlugin::NewStub(Channel(DraSock()));

  dra_v1beta1::NodePrepareResourcesRequest request;
  AddClaim(request, "uid-a", "a");
  dra_v1beta1::NodePrepareResourcesResponse response;
  ASSERT_TRUE(stub->NodePrepareResources(Context().get(), request, &response).ok());
  ASSERT_THAT(response.claims(), SizeIs(1));
  const auto& a = response.claims().at("uid-a");
  EXPECT_EQ(a.error(), "");
  ASSERT_THAT(a.devices(), SizeIs(1));
  EXPECT_THAT(a.devices(0).request_names(), ElementsAre("gpu"));
  EXPECT_EQ(a.devices(0).pool_name(), "node-a");
  EXPECT_EQ(a.devices(0).device_name(), "gpu-0");
  EXPECT_THAT(a.devices(0).cdi_device_ids(), ElementsAre("k8s.gpu.dralens.dev/claim=uid-a-gpu-0"));
  // Same wire format as v1 except field #5: read the bytes as v1 and look for it.
  dra_v1::NodePrepareResourcesResponse as_v1;
  ASSERT_TRUE(as_v1.ParseFromString(response.SerializeAsString()));
  const dra_v1::Device& v1_device = as_v1.claims().at("uid-a").devices(0);
  EXPECT_FALSE(v1_device.has_share_id());
  EXPECT_TRUE(v1_device.GetReflection()->GetUnknownFields(v1_device).empty());

  dra_v1beta1::NodeUnprepareResourcesRequest unprepare;
  AddClaim(unprepare, "uid-a");
  dra_v1beta1::NodeUnprepareResourcesResponse unprepared;
  ASSERT_TRUE(stub->NodeUnprepareResources(Context().get(), unprepare, &unprepared).ok());
  ASSERT_THAT(unprepared.claims(), SizeIs(1));
  EXPECT_EQ(unprepared.claims().at("uid-a").error(), "");
  EXPECT_THAT(handler_.UnprepareCalls(), SizeIs(1));
}

TEST_F(PluginServerTest, DuplicateUidsGetOneEntryAndOneHandlerCall) {
  StartServer();
  auto stub = dra_v1::DRAPlugin::NewStub(Channel(DraSock()));
  dra_v1::NodePrepareResourcesRequest request;
  AddClaim(request, "uid-a");
  AddClaim(request, "uid-a");
  dra_v1::NodePrepareResourcesResponse response;
  ASSERT_TRUE(stub->NodePrepareResources(Context().get(), request, &response).ok());
  ASSERT_THAT(response.claims(), SizeIs(1));
  EXPECT_THAT(response.claims().at("uid-a").devices(), SizeIs(1));
  ASSERT_THAT(handler_.PrepareCalls(), SizeIs(1));
  EXPECT_THAT(handler_.PrepareCalls()[0], SizeIs(1));

  dra_v1::NodeUnprepareResourcesRequest unprepare;
  AddClaim(unprepare, "uid-a");
  AddClaim(unprepare, "uid-a");
  dra_v1::NodeUnprepareResourcesResponse unprepared;
  ASSERT_TRUE(stub->NodeUnprepareResources(Context().get(), unprepare, &unprepared).ok());
  EXPECT_THAT(unprepared.claims(), SizeIs(1));
}

TEST_F(PluginServerTest, OmittedUidBecomesErrorEntryNotGrpcError) {
  handler_.Omit("uid-b");
  handler_.AddUnrequested("uid-z");
  StartServer();
  auto stub = dra_v1::DRAPlugin::NewStub(Channel(DraSock()));
  dra_v1::NodePrepareResourcesRequest request;
  AddClaim(request, "uid-a");
  AddClaim(request, "uid-b");
  dra_v1::NodePrepareResourcesResponse response;
  ASSERT_TRUE(stub->NodePrepareResources(Context().get(), request, &response).ok());
  ASSERT_THAT(response.claims(), SizeIs(2));  // uid-z dropped
  EXPECT_EQ(response.claims().at("uid-a").error(), "");
  EXPECT_EQ(response.claims().at("uid-b").error(), "driver returned no result for this claim");

  dra_v1beta1::NodeUnprepareResourcesRequest unprepare;
  AddClaim(unprepare, "uid-b");
  dra_v1beta1::NodeUnprepareResourcesResponse unprepared;
  auto beta = dra_v1beta1::DRAPlugin::NewStub(Channel(DraSock()));
  ASSERT_TRUE(beta->NodeUnprepareResources(Context().get(), unprepare, &unprepared).ok());
  ASSERT_THAT(unprepared.claims(), SizeIs(1));
  EXPECT_EQ(unprepared.claims().at("uid-b").error(), "driver returned no result for this claim");
}

TEST_F(PluginServerTest, EmptyRequestsAnswerAtOnceWithEmptyMaps) {
  StartServer();
  auto v1 = dra_v1::DRAPlugin::NewStub(Channel(DraSock()));
  dra_v1::NodePrepareResourcesResponse prepared;
  ASSERT_TRUE(v1->NodePrepareResources(Context().get(), {}, &prepared).ok());
  EXPECT_THAT(prepared.claims(), IsEmpty());
  dra_v1::NodeUnprepareResourcesResponse unprepared;
  ASSERT_TRUE(v1->NodeUnprepareResources(Context().get(), {}, &unprepared).ok());
  EXPECT_THAT(unprepared.claims(), IsEmpty());

  auto beta = dra_v1beta1::DRAPlugin::NewStub(Channel(DraSock()));
  dra_v1beta1::NodePrepareResourcesResponse beta_prepared;
  ASSERT_TRUE(beta->NodePrepareResources(Context().get(), {}, &beta_prepared).ok());
  EXPECT_THAT(beta_prepared.claims(), IsEmpty());

  EXPECT_THAT(handler_.PrepareCalls(), IsEmpty());
  EXPECT_THAT(handler_.UnprepareCalls(), IsEmpty());
}

TEST_F(PluginServerTest, UnadvertisedHealthServicesAreUnimplemented) {
  StartServer();
  {
    auto stub = ::v1alpha1::DRAResourceHealth::NewStub(Channel(DraSock()));
    auto context = Context();
    auto reader = stub->NodeWatchResources(context.get(), {});
    ::v1alpha1::NodeWatchResourcesResponse response;
    EXPECT_FALSE(reader->Read(&response));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);
  }
  {
    auto stub = ::v1::DRAResourceHealth::NewStub(Channel(DraSock()));
    auto context = Context();
    auto reader = stub->NodeWatchResources(context.get(), {});
    ::v1::NodeWatchResourcesResponse response;
    EXPECT_FALSE(reader->Read(&response));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);
  }
}

TEST_F(PluginServerTest, SocketsAre0600WhileServingAndRemovedAfterStop) {
  StartServer();
  EXPECT_TRUE(S_ISSOCK(ModeOf(RegSock())));
  EXPECT_TRUE(S_ISSOCK(ModeOf(DraSock())));
  EXPECT_EQ(ModeOf(RegSock()) & 0777, 0600u);
  EXPECT_EQ(ModeOf(DraSock()) & 0777, 0600u);

  server_->Stop();
  EXPECT_FALSE(fs::exists(fs::symlink_status(RegSock())));
  EXPECT_FALSE(fs::exists(fs::symlink_status(DraSock())));
  server_->Stop();  // idempotent
  server_.reset();
  EXPECT_TRUE(fs::is_directory(root_ / "plugins" / kDriver));  // the directory stays
}

TEST_F(PluginServerTest, StaleSocketFilesAreReplacedAtStart) {
  fs::create_directories(root_ / "plugins_registry");
  fs::create_directories(root_ / "plugins" / kDriver);
  LeaveStaleSocket(RegSock());
  { std::ofstream(DraSock()) << "left over"; }  // not even a socket
  ASSERT_TRUE(S_ISSOCK(ModeOf(RegSock())));

  StartServer();
  auto stub = ::pluginregistration::Registration::NewStub(Channel(RegSock()));
  ::pluginregistration::PluginInfo info;
  ASSERT_TRUE(stub->GetInfo(Context().get(), {}, &info).ok());
  auto dra = dra_v1::DRAPlugin::NewStub(Channel(DraSock()));
  dra_v1::NodePrepareResourcesResponse response;
  ASSERT_TRUE(dra->NodePrepareResources(Context().get(), {}, &response).ok());
  EXPECT_TRUE(S_ISSOCK(ModeOf(DraSock())));
}

TEST_F(PluginServerTest, RestartAfterStopServesAgain) {
  StartServer();
  server_.reset();
  StartServer();
  auto stub = ::pluginregistration::Registration::NewStub(Channel(RegSock()));
  ::pluginregistration::PluginInfo info;
  EXPECT_TRUE(stub->GetInfo(Context().get(), {}, &info).ok());
}

TEST_F(PluginServerTest, ConcurrentCallsEachGetTheirOwnAnswer) {
  StartServer();
  auto stub = dra_v1::DRAPlugin::NewStub(Channel(DraSock()));
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      dra_v1::NodePrepareResourcesRequest request;
      std::string uid = "uid-" + std::to_string(i);
      AddClaim(request, uid);
      dra_v1::NodePrepareResourcesResponse response;
      ok[i] = stub->NodePrepareResources(Context().get(), request, &response).ok() &&
              response.claims_size() == 1 && response.claims().contains(uid);
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  EXPECT_THAT(ok, ::testing::Each(1));
}

// More calls than workers: the surplus waits in the queue (no thread per call), the gauge says
// so, and every call is answered once the workers are free.
TEST_F(PluginServerTest, CallsBeyondTheWorkersWaitInTheQueue) {
  options_.call_workers = 2;
  StartServer();
  handler_.Hold();
  auto stub = dra_v1::DRAPlugin::NewStub(Channel(DraSock()));
  constexpr int kCalls = 10;
  std::vector<int> ok(kCalls, 0);
  std::vector<std::thread> threads = PrepareAtOnce(*stub, ok);
  EXPECT_TRUE(testing::Eventually([&] {
    return call_metrics_.queued->Value() == kCalls - 2 && call_metrics_.running->Value() == 2;
  }));
  EXPECT_EQ(handler_.InPrepare(), 2);  // only the two workers reached the handler
  handler_.Release();
  for (std::thread& thread : threads) {
    thread.join();
  }
  EXPECT_THAT(ok, ::testing::Each(1));
  EXPECT_THAT(handler_.PrepareCalls(), SizeIs(kCalls));
  EXPECT_TRUE(testing::Eventually(
      [&] { return call_metrics_.queued->Value() == 0 && call_metrics_.running->Value() == 0; }));
}

// Beyond max_open_calls the surplus waits in the kubelet's own connection, not in the server:
// at most that many calls are open (and cost memory) in the node at once, and every call is
// still answered, the first burst on a fresh connection included.
TEST_F(PluginServerTest, CallsBeyondTheOpenCallCapWaitInTheClientsConnection) {
  options_.call_workers = 2;
  options_.max_open_calls = 4;
  StartServer();
  handler_.Hold();
  auto stub = dra_v1::DRAPlugin::NewStub(Channel(DraSock()));
  constexpr int kCalls = 12;
  std::vector<int> ok(kCalls, 0);
  std::vector<std::thread> threads = PrepareAtOnce(*stub, ok);
  EXPECT_TRUE(testing::Eventually(
      [&] { return call_metrics_.queued->Value() == 2 && call_metrics_.running->Value() == 2; }));
  for (int i = 0; i < 20; ++i) {  // the other 8 never reach the server while the 4 are open
    EXPECT_LE(call_metrics_.queued->Value() + call_metrics_.running->Value(), 4);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(handler_.InPrepare(), 2);
  handler_.Release();
  for (std::thread& thread : threads) {
    thread.join();
  }
  EXPECT_THAT(ok, ::testing::Each(1));
  EXPECT_THAT(handler_.PrepareCalls(), SizeIs(kCalls));
}

// Stopping with calls still queued answers each of them (CANCELLED or UNAVAILABLE once the
// grace period is over) instead of hanging the kubelet or the node's shutdown.
TEST_F(PluginServerTest, StopAnswersQueuedCalls) {
  options_.call_workers = 1;
  StartServer();
  handler_.Hold();
  auto stub = dra_v1::DRAPlugin::NewStub(Channel(DraSock()));
  constexpr int kCalls = 4;
  std::vector<std::thread> threads;
  std::vector<int> answered(kCalls, 0);
  for (int i = 0; i < kCalls; ++i) {
    threads.emplace_back([&, i] {
      dra_v1::NodePrepareResourcesRequest request;
      AddClaim(request, "uid-" + std::to_string(i));
      dra_v1::NodePrepareResourcesResponse response;
      auto context = std::make_unique<grpc::ClientContext>();
      context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      stub->NodePrepareResources(context.get(), request, &response);
      answered[i] = 1;
    });
  }
  EXPECT_TRUE(testing::Eventually([&] { return call_metrics_.queued->Value() == kCalls - 1; }));
  std::thread stopper([&] { server_->Stop(); });
  handler_.Release();  // the one running call finishes; the queued ones are cancelled
  stopper.join();
  for (std::thread& thread : threads) {
    thread.join();
  }
  EXPECT_THAT(answered, ::testing::Each(1));
}

TEST_F(PluginServerTest, RejectsBadOptions) {
  options_.driver_name = "a/b";
  EXPECT_EQ(PluginServer::Start(options_, handler_, Telemetry()).status().code(),
            absl::StatusCode::kInvalidArgument);
  options_.driver_name = "";
  EXPECT_EQ(PluginServer::Start(options_, handler_, Telemetry()).status().code(),
            absl::StatusCode::kInvalidArgument);
  options_.driver_name = kDriver;
  options_.plugins_dir = (root_ / std::string(120, 'x')).string();
  absl::Status status = PluginServer::Start(options_, handler_, Telemetry()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("AF_UNIX"));
  EXPECT_FALSE(fs::exists(RegSock()));  // nothing was served
}

TEST_F(PluginServerTest, RelativeDirectoriesGiveAnAbsoluteEndpoint) {
  EXPECT_TRUE(fs::path(DraSocketPath("plugins", kDriver)).is_absolute());
  EXPECT_EQ(DraSocketPath("/var/lib/kubelet/plugins/", kDriver),
            "/var/lib/kubelet/plugins/gpu.dralens.dev/dra.sock");
  EXPECT_EQ(RegistrationSocketPath("/var/lib/kubelet/plugins_registry", kDriver),
            "/var/lib/kubelet/plugins_registry/gpu.dralens.dev-reg.sock");
}

}  // namespace
}  // namespace dralens::driver::plugin
