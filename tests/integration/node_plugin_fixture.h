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
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/k8s/rest_client.h"
#include "tests/integration/node_harness.h"
#include "tests/integration/subprocess.h"

namespace dralens::node_plugin_test {

namespace fs = std::filesystem;
namespace dra_v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace dra_v1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;
using json = nlohmann::json;
using ::dralens::testing::Subprocess;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

inline constexpr const auto& kNode = testing::NodeHarness::kNode;
inline constexpr const auto& kDriver = testing::NodeHarness::kDriver;
inline constexpr const auto& kNs = testing::NodeHarness::kNs;

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

using Claim = ::dralens::testing::NodeHarness::Claim;

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

// The node under test comes from NodeHarness (a temp dir, the API server with the Node, a
// kubeconfig, the process); this fixture adds the full v1 and v1beta1 answers the tests compare.
class NodePluginTest : public ::testing::Test {
 protected:
  std::string PluginsDir() const { return harness_.PluginsDir(); }
  std::string CdiRoot() const { return harness_.CdiRoot(); }
  std::string RegSock() const { return harness_.RegSock(); }
  std::string DraSock() const { return harness_.DraSock(); }
  k8s::RestClient& client() { return harness_.client(); }
  Subprocess& node() { return harness_.process(); }
  int metrics_port() const { return harness_.metrics_port(); }

  // Starts `dralens node` on eight simulated H100s; `crash_at` arms the preparer's crash hook.
  // Waits until the plugin serves both sockets.
  void StartNode(const std::string& crash_at = "",
                 const std::map<std::string, std::string>& extra_env = {},
                 const std::vector<std::string>& extra_flags = {}) {
    std::map<std::string, std::string> env = extra_env;
    if (!crash_at.empty()) {
      env["DRALENS_TEST_CRASH_AT"] = crash_at;
    }
    harness_.Start(/*wrapper=*/{}, extra_flags, env);
  }

  // Stops the node with SIGTERM and expects a clean exit that removed both sockets.
  void StopNode() {
    harness_.Stop();
    EXPECT_FALSE(fs::exists(RegSock()));
    EXPECT_FALSE(fs::exists(DraSock()));
  }

  // Expects the node to have died at its armed crash point.
  void ExpectKilled() { harness_.ExpectKilled(); }

  int Readyz() { return harness_.Status("/readyz"); }

  // The kubelet's side of registration: GetInfo, checked, then NotifyRegistrationStatus.
  void Register() { harness_.Register(); }

  // Creates a claim for one full GPU and allocates `device` of `pool` to it, as the scheduler
  // would.
  Claim AllocatedClaim(const std::string& name, const std::string& device,
                       const std::string& pool = kNode) {
    return harness_.AllocatedClaim(name, device, /*config=*/nullptr, pool);
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

  // The claim UIDs the checkpoint on disk records, sorted.
  std::vector<std::string> CheckpointedUids() const { return harness_.CheckpointedUids(); }

  testing::NodeHarness harness_;
};

}  // namespace dralens::node_plugin_test
