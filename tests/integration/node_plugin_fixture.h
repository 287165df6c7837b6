// What the tests of `dralens node` as a kubelet sees it share: the real binary with a simulated
// GPU node against the embedded API server, gRPC clients of its sockets built from our protos,
// and helpers that reduce prepare answers and directories to comparable text.
#pragma once

#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "driver/proto/dra/v1/api.grpc.pb.h"
#include "driver/proto/dra/v1beta1/api.grpc.pb.h"
#include "driver/proto/pluginregistration/v1/api.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "tests/integration/subprocess.h"
#include "tests/testing/kubeconfig.h"

namespace dralens::node_plugin_test {

namespace fs = std::filesystem;
namespace dra_v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace dra_v1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;
using json = nlohmann::json;
using ::dralens::testing::Subprocess;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

inline const std::string kBinary = DRALENS_BINARY;
inline constexpr char kNode[] = "node-a";
inline constexpr char kDriver[] = "gpu.dralens.dev";
inline constexpr char kNs[] = "ml";

inline std::unique_ptr<grpc::ClientContext> Context(int seconds = 10) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return context;
}

inline std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// One claim as the kubelet names it, plus what the test expects back.
struct Claim {
  std::string name;
  std::string uid;
};

// A prepare answer reduced to comparable text: "device|pool|requests|cdi ids" per device, or
// "error: ..." for a failed claim.
inline std::vector<std::string> Flatten(const dra_v1::NodePrepareResourceResponse& r) {
  if (!r.error().empty()) {
    return {"error: " + r.error()};
  }
  std::vector<std::string> out;
  for (const auto& d : r.devices()) {
    std::string line = absl::StrCat(d.device_name(), "|", d.pool_name(), "|");
    for (const auto& req : d.request_names()) {
      absl::StrAppend(&line, req, ",");
    }
    absl::StrAppend(&line, "|");
    for (const auto& id : d.cdi_device_ids()) {
      absl::StrAppend(&line, id, ",");
    }
    out.push_back(line);
  }
  return out;
}

inline std::vector<std::string> Flatten(const dra_v1beta1::NodePrepareResourceResponse& r) {
  dra_v1::NodePrepareResourceResponse v1;
  // The two messages are identical on the wire apart from v1's share_id.
  EXPECT_TRUE(v1.ParseFromString(r.SerializeAsString()));
  return Flatten(v1);
}

class NodePluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dralens-node-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    ASSERT_TRUE(api_.Start().ok());
    k8s::RestConfig config;
    config.server = api_.url();
    auto client = k8s::RestClient::FromConfig(config);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(client).value();
    auto node = client_->Create(
        k8s::kNodes, "", {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", kNode}}}});
    ASSERT_TRUE(node.ok()) << node.status();
    kubeconfig_ = (root_ / "kubeconfig").string();
    testing::WriteKubeconfig(kubeconfig_, api_.url());
  }

  void TearDown() override {
    node_.reset();
    api_.Stop();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  std::string RegistryDir() const { return (root_ / "registry").string(); }
  std::string PluginsDir() const { return (root_ / "plugins").string(); }
  std::string CdiRoot() const { return (root_ / "cdi").string(); }
  std::string RegSock() const { return RegistryDir() + "/gpu.dralens.dev-reg.sock"; }
  std::string DraSock() const { return PluginsDir() + "/gpu.dralens.dev/dra.sock"; }
  std::string Checkpoint() const { return PluginsDir() + "/gpu.dralens.dev/checkpoint.json"; }

  // Starts `dralens node`; `crash_at` arms the preparer's crash hook. Waits until the plugin
  // serves both sockets.
  void StartNode(const std::string& crash_at = "",
                 const std::map<std::string, std::string>& extra_env = {},
                 const std::vector<std::string>& extra_flags = {}) {
    std::map<std::string, std::string> env = {{"NODE_NAME", kNode}, {"KUBECONFIG", kubeconfig_}};
    env.insert(extra_env.begin(), extra_env.end());
    if (!crash_at.empty()) {
      env["DRALENS_TEST_CRASH_AT"] = crash_at;
    }
    std::vector<std::string> argv = {kBinary,
                                     "node",
                                     "--device-source=simulated",
                                     "--simulated-profile=dgx-h100",
                                     "--metrics-address=127.0.0.1:0",
                                     "--kubelet-registry-dir=" + RegistryDir(),
                                     "--kubelet-plugins-dir=" + PluginsDir(),
                                     "--cdi-root=" + CdiRoot()};
    argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
    node_ = std::make_unique<Subprocess>(argv, env);
    ASSERT_TRUE(node_->WaitForOutput("kubelet plugin serving", absl::Seconds(30)))
        << node_->Output();
    std::smatch m;
    const std::string out = node_->Output();
    ASSERT_TRUE(
        std::regex_search(out, m, std::regex(R"(serving metrics"? address=\S+ port=(\d+))")))
        << out;
    metrics_port_ = std::stoi(m[1]);
  }

  // Stops the node with SIGTERM and expects a clean exit that removed both sockets.
  void StopNode() {
    ASSERT_TRUE(node_);
    EXPECT_EQ(node_->Stop(SIGTERM, absl::Seconds(15)), 0) << node_->Output();
    EXPECT_FALSE(fs::exists(RegSock()));
    EXPECT_FALSE(fs::exists(DraSock()));
    node_.reset();
  }

  int Readyz() {
    httplib::Client c("127.0.0.1", metrics_port_);
    auto res = c.Get("/readyz");
    return res ? res->status : 0;
  }

  // The kubelet's side of registration: GetInfo, then NotifyRegistrationStatus.
  void Register() {
    auto stub = ::pluginregistration::Registration::NewStub(
        grpc::CreateChannel("unix://" + RegSock(), grpc::InsecureChannelCredentials()));
    ::pluginregistration::PluginInfo info;
    grpc::Status s = stub->GetInfo(Context(1).get(), {}, &info);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(info.type(), "DRAPlugin");
    EXPECT_EQ(info.name(), kDriver);
    EXPECT_EQ(info.endpoint(), DraSock());
    EXPECT_THAT(info.supported_versions(),
                ::testing::ElementsAreArray(std::vector<std::string>{
                    "v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth",
                    "v1.DRAResourceHealth"}));
    ::pluginregistration::RegistrationStatus status;
    status.set_plugin_registered(true);
    ::pluginregistration::RegistrationStatusResponse response;
    s = stub->NotifyRegistrationStatus(Context(5).get(), status, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  // Creates a claim for one full GPU and allocates `device` of `pool` to it, as the scheduler
  // would.
  Claim AllocatedClaim(const std::string& name, const std::string& device,
                       const std::string& pool = kNode) {
    json claim = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceClaim"},
        {"metadata", {{"name", name}, {"namespace", kNs}}},
        {"spec",
         {{"devices",
           {{"requests", {{{"name", "gpu"}, {"exactly", {{"deviceClassName", kDriver}}}}}}}}}}};
    auto created = client_->Create(k8s::kResourceClaims, kNs, claim);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) {
      return {};
    }
    json obj = *created;
    obj["status"] = {
        {"allocation",
         {{"devices",
           {{"results",
             {{{"request", "gpu"}, {"driver", kDriver}, {"pool", pool}, {"device", device}}}}}}}}};
    auto updated = client_->Update(k8s::kResourceClaims, kNs, obj, "status");
    EXPECT_TRUE(updated.ok()) << updated.status();
    return {name, (*created)["metadata"]["uid"].get<std::string>()};
  }

  template <typename Request>
  static void Add(Request& request, const Claim& claim) {
    auto* c = request.add_claims();
    c->set_namespace_(kNs);
    c->set_name(claim.name);
    c->set_uid(claim.uid);
  }

  std::unique_ptr<dra_v1::DRAPlugin::Stub> V1() {
    return dra_v1::DRAPlugin::NewStub(
        grpc::CreateChannel("unix://" + DraSock(), grpc::InsecureChannelCredentials()));
  }
  std::unique_ptr<dra_v1beta1::DRAPlugin::Stub> V1beta1() {
    return dra_v1beta1::DRAPlugin::NewStub(
        grpc::CreateChannel("unix://" + DraSock(), grpc::InsecureChannelCredentials()));
  }

  // Prepares over v1; a transport failure (the node died) is returned as the gRPC status.
  grpc::Status PrepareV1(const std::vector<Claim>& claims,
                         dra_v1::NodePrepareResourcesResponse* response) {
    dra_v1::NodePrepareResourcesRequest request;
    for (const Claim& c : claims) {
      Add(request, c);
    }
    return V1()->NodePrepareResources(Context().get(), request, response);
  }
  grpc::Status UnprepareV1(const std::vector<Claim>& claims,
                           dra_v1::NodeUnprepareResourcesResponse* response) {
    dra_v1::NodeUnprepareResourcesRequest request;
    for (const Claim& c : claims) {
      Add(request, c);
    }
    return V1()->NodeUnprepareResources(Context().get(), request, response);
  }

  std::string CdiSpecOf(const Claim& c) const {
    return CdiRoot() + "/k8s.gpu.dralens.dev-claim_" + c.uid + ".json";
  }

  // The claim UIDs the checkpoint on disk records.
  std::vector<std::string> CheckpointedUids() const {
    std::ifstream in(Checkpoint());
    if (!in) {
      return {};
    }
    json file = json::parse(in, nullptr, false);
    std::vector<std::string> uids;
    if (file.is_discarded()) {
      ADD_FAILURE() << "checkpoint is not JSON";
      return uids;
    }
    // The body's claims are keyed by UID wherever the format nests them.
    std::function<void(const json&)> walk = [&](const json& j) {
      if (!j.is_object()) {
        return;
      }
      for (const auto& [k, v] : j.items()) {
        if (k == "claims" && v.is_object()) {
          for (const auto& [uid, _] : v.items()) {
            uids.push_back(uid);
          }
        } else {
          walk(v);
        }
      }
    };
    walk(file);
    std::sort(uids.begin(), uids.end());
    return uids;
  }

  fs::path root_;
  sim::ApiServer api_;
  std::unique_ptr<k8s::RestClient> client_;
  std::string kubeconfig_;
  std::unique_ptr<Subprocess> node_;
  int metrics_port_ = 0;
};

}  // namespace dralens::node_plugin_test
