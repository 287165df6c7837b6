// The kubelet stand-in's registration, against a plugin served over a real Unix socket.
#include "src/sim/kubelet.h"

#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "driver/proto/pluginregistration/v1/api.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::sim {
namespace {

using ::testing::HasSubstr;

// A registration service that answers GetInfo with `info` and records what it was told.
class FakePlugin final : public ::pluginregistration::Registration::Service {
 public:
  explicit FakePlugin(::pluginregistration::PluginInfo info) : info_(std::move(info)) {}

  grpc::Status GetInfo(grpc::ServerContext*, const ::pluginregistration::InfoRequest*,
                       ::pluginregistration::PluginInfo* out) override {
    *out = info_;
    return grpc::Status::OK;
  }
  grpc::Status NotifyRegistrationStatus(
      grpc::ServerContext*, const ::pluginregistration::RegistrationStatus* status,
      ::pluginregistration::RegistrationStatusResponse*) override {
    std::lock_guard<std::mutex> l(mu_);
    told_ = *status;
    return grpc::Status::OK;
  }
  std::optional<::pluginregistration::RegistrationStatus> told() {
    std::lock_guard<std::mutex> l(mu_);
    return told_;
  }

 private:
  const ::pluginregistration::PluginInfo info_;
  std::mutex mu_;
  std::optional<::pluginregistration::RegistrationStatus> told_;
};

class KubeletTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dralens-kubelet-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/gpu.dralens.dev-reg.sock";
  }
  void TearDown() override {
    if (server_) {
      server_->Shutdown();
    }
    std::filesystem::remove_all(dir_);
  }

  FakePlugin& Serve(std::vector<std::string> versions, std::string type = "DRAPlugin",
                    std::string endpoint = "/var/lib/kubelet/plugins/gpu.dralens.dev/dra.sock") {
    ::pluginregistration::PluginInfo info;
    info.set_type(type);
    info.set_name("gpu.dralens.dev");
    info.set_endpoint(endpoint);
    for (const std::string& v : versions) {
      info.add_supported_versions(v);
    }
    plugin_ = std::make_unique<FakePlugin>(info);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(plugin_.get());
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr);
    return *plugin_;
  }

  std::string dir_;
  std::string socket_;
  std::unique_ptr<FakePlugin> plugin_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(KubeletTest, PicksThePluginsFirstSupportedServiceAndAcknowledges) {
  FakePlugin& plugin = Serve({"v2.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAPlugin"});
  auto registered = RegisterPlugin(socket_);
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_EQ(registered->driver_name, "gpu.dralens.dev");
  EXPECT_EQ(registered->endpoint, "/var/lib/kubelet/plugins/gpu.dralens.dev/dra.sock");
  // The plugin's order decides, not the kubelet's.
  EXPECT_EQ(registered->service_version, "v1beta1.DRAPlugin");
  ASSERT_TRUE(plugin.told().has_value());
  EXPECT_TRUE(plugin.told()->plugin_registered());
  EXPECT_EQ(plugin.told()->error(), "");
}

TEST_F(KubeletTest, RefusesAndTellsThePluginWhy) {
  FakePlugin& plugin = Serve({"v1alpha4.Node"});
  auto registered = RegisterPlugin(socket_);
  EXPECT_EQ(registered.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(registered.status().message(), HasSubstr("v1alpha4.Node"));
  ASSERT_TRUE(plugin.told().has_value());
  EXPECT_FALSE(plugin.told()->plugin_registered());
  EXPECT_THAT(plugin.told()->error(), HasSubstr("v1.DRAPlugin"));
}

TEST_F(KubeletTest, RefusesOtherPluginTypesAndRelativeEndpoints) {
  Serve({"v1.DRAPlugin"}, "CSIPlugin");
  EXPECT_THAT(RegisterPlugin(socket_).status().message(), HasSubstr("CSIPlugin"));
  server_->Shutdown();
  server_.reset();
  std::filesystem::remove(socket_);
  Serve({"v1.DRAPlugin"}, "DRAPlugin", "dra.sock");
  EXPECT_THAT(RegisterPlugin(socket_).status().message(), HasSubstr("absolute"));
}

TEST_F(KubeletTest, NoPluginIsUnavailable) {
  auto registered = RegisterPlugin(socket_);
  EXPECT_FALSE(registered.ok());
  EXPECT_TRUE(absl::IsUnavailable(registered.status()) ||
              absl::IsDeadlineExceeded(registered.status()))
      << registered.status();
}

}  // namespace
}  // namespace dralens::sim
