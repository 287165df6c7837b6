// NodeHarness: the real `dralens node` with simulated GPUs against the embedded API server, and
// the kubelet's side of its sockets (registration, v1 prepare and unprepare), for integration
// tests that drive the binary from outside.
//
//   NodeHarness node;                        // API server, Node object, kubeconfig, temp dirs
//   node.Start();                            // `dralens node ...`, waits for the plugin
//   node.Register();
//   NodeHarness::Claim c = node.AllocatedClaim("a", "gpu-0");
//   EXPECT_EQ(node.Prepare(c), "");          // "" or the claim's error
#pragma once

#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "driver/proto/dra/v1/api.grpc.pb.h"
#include "driver/proto/pluginregistration/v1/api.grpc.pb.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "tests/integration/subprocess.h"
#include "tests/testing/api_fixture.h"
#include "tests/testing/eventually.h"
#include "tests/testing/kubeconfig.h"
#include "tests/testing/temp_dir.h"

namespace dralens::testing {

// The sum of the samples of `family` on the metrics endpoint at `port` whose label text
// contains every one of `labels` (e.g. `kind="deleted"`); -1 when there is none (or no answer).
inline double MetricSum(int port, const std::string& family,
                        const std::vector<std::string>& labels = {}) {
  httplib::Client c("127.0.0.1", port);
  auto res = c.Get("/metrics");
  if (!res || res->status != 200) {
    return -1;
  }
  double sum = -1;
  for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
    if (line.empty() || line[0] == '#' || !absl::StartsWith(line, family) ||
        (line.size() > family.size() && line[family.size()] != '{' && line[family.size()] != ' ')) {
      continue;
    }
    bool match = true;
    for (const std::string& l : labels) {
      match = match && absl::StrContains(line, l);
    }
    double v = 0;
    if (match && absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) {
      sum = (sum < 0 ? 0 : sum) + v;
    }
  }
  return sum;
}

class NodeHarness {
 public:
  static constexpr char kNode[] = "node-a";
  static constexpr char kDriver[] = "gpu.dralens.dev";
  static constexpr char kNs[] = "ml";

  struct Claim {
    std::string name;
    std::string uid;
  };
  using Plugin = ::k8s::io::kubelet::pkg::apis::dra::v1::DRAPlugin;
  using PrepareRequest = ::k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesRequest;
  using PrepareResponse = ::k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesResponse;
  using UnprepareRequest = ::k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesRequest;
  using UnprepareResponse = ::k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesResponse;

  NodeHarness() {
    if (!api_.ok()) {
      return;  // the fixture failed the test already
    }
    auto node = api_.client().Create(
        k8s::kNodes, "", {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", kNode}}}});
    EXPECT_TRUE(node.ok()) << node.status();
    kubeconfig_ = root_.Join("kubeconfig");
    WriteKubeconfig(kubeconfig_, api_.server().url());
  }

  std::string Root() const { return root_.path(); }
  std::string RegistryDir() const { return root_.Join("registry"); }
  std::string PluginsDir() const { return root_.Join("plugins"); }
  std::string PluginDir() const { return PluginsDir() + "/" + kDriver; }
  std::string CdiRoot() const { return root_.Join("cdi"); }
  // A kubeconfig for the harness's API server (what the node gets as $KUBECONFIG).
  std::string Kubeconfig() const { return kubeconfig_; }
  std::string RegSock() const { return RegistryDir() + "/" + kDriver + "-reg.sock"; }
  std::string DraSock() const { return seen_from_ + PluginDir() + "/dra.sock"; }
  // Where this process finds the node's files: "" or, for a node in its own mount namespace,
  // "/proc/<pid>/root" (paths under a mount only it sees).
  std::string SeenFrom() const { return seen_from_; }
  void SeeThroughProcessRoot() { seen_from_ = "/proc/" + std::to_string(node_->pid()) + "/root"; }
  k8s::RestClient& client() { return api_.client(); }
  sim::ApiServer& api() { return api_.server(); }
  Subprocess& process() { return *node_; }

  // The device source flags Start() passes; simulated dgx-h100 (eight H100s) unless changed.
  void UseDeviceSource(std::vector<std::string> flags) { source_flags_ = std::move(flags); }

  // Runs `wrapper` + `dralens node ...` (e.g. wrapper = {"/usr/bin/unshare", "-m", "/bin/sh",
  // "-c", "mount ... && exec \"$@\""} to run it in its own mount namespace) and waits until the
  // plugin serves its sockets. The binary is $DRALENS_BINARY if set, else the build's.
  void Start(const std::vector<std::string>& wrapper = {},
             const std::vector<std::string>& extra_flags = {},
             const std::map<std::string, std::string>& extra_env = {}) {
    Spawn(wrapper, extra_flags, extra_env);
    ASSERT_TRUE(node_->WaitForOutput("kubelet plugin serving", absl::Seconds(60)))
        << node_->Output();
    std::smatch m;
    const std::string out = node_->Output();
    ASSERT_TRUE(
        std::regex_search(out, m, std::regex(R"(serving metrics"? address=\S+ port=(\d+))")))
        << out;
    metrics_port_ = std::stoi(m[1]);
    // The plugin logs that it serves just before the node role hands its driver to the metrics
    // endpoints: until then /debug/claims answers "starting". A started node has both.
    ASSERT_TRUE(Eventually([&] {
      httplib::Client c("127.0.0.1", metrics_port_);
      auto res = c.Get("/debug/claims");
      return res && !absl::StrContains(res->body, "\"starting\"");
    })) << node_->Output();
  }

  // Runs `dralens node ...` as Start() does, but for a node that must refuse to start: waits
  // for it to exit and returns its exit status (-1 if it still ran after 60 s); its output in
  // `output`.
  int StartExpectingExit(std::string* output) {
    Spawn({}, {}, {});
    const int status = node_->Wait(absl::Seconds(60));
    *output = node_->Output();
    node_.reset();
    return status;
  }

  // SIGTERM, and expects a clean exit.
  void Stop() {
    ASSERT_TRUE(node_);
    EXPECT_EQ(node_->Stop(SIGTERM, absl::Seconds(15)), 0) << node_->Output();
    node_.reset();
  }

  // Expects the node to have died at an armed crash point (exit status 137), the call that
  // reached it having failed; `result` is what Prepare or Unprepare returned.
  void ExpectCrashed(const std::string& result, const std::string& step) {
    EXPECT_TRUE(result.rfind("gRPC: ", 0) == 0) << "the node should have died at " << step;
    ExpectKilled();
  }

  // Expects the node to have died at an armed crash point: exit status 137, as SIGKILL gives.
  void ExpectKilled() {
    ASSERT_TRUE(node_);
    EXPECT_EQ(node_->Wait(absl::Seconds(15)), 137) << node_->Output();
    node_.reset();
  }

  int metrics_port() const { return metrics_port_; }
  // GET on the node's metrics endpoint (/metrics, /debug/claims): the body, or "".
  std::string Get(const std::string& path) {
    httplib::Client c("127.0.0.1", metrics_port_);
    auto res = c.Get(path);
    EXPECT_TRUE(res) << path;
    return res ? res->body : "";
  }

  // The HTTP status of a GET on the node's metrics endpoint (e.g. /readyz), or 0.
  int Status(const std::string& path) {
    httplib::Client c("127.0.0.1", metrics_port_);
    auto res = c.Get(path);
    return res ? res->status : 0;
  }

  // The sum of the samples of `family` whose label text contains every one of `labels`
  // (e.g. `kind="deleted"`); -1 when there is none.
  double Metric(const std::string& family, const std::vector<std::string>& labels = {}) {
    return MetricSum(metrics_port_, family, labels);
  }

  // This node's slices of this driver, and their devices.
  std::vector<nlohmann::json> Slices() {
    auto list = api_.client().List(k8s::kResourceSlices, "", Mine());
    EXPECT_TRUE(list.ok()) << list.status();
    return list.ok() ? list->items : std::vector<nlohmann::json>{};
  }
  size_t Devices() {
    size_t n = 0;
    for (const nlohmann::json& s : Slices()) {
      n += s["spec"].value("devices", nlohmann::json::array()).size();
    }
    return n;
  }
  // The first published device of this node whose name starts with `prefix` and ends with
  // `suffix`; "" when there is none.
  std::string PublishedDevice(const std::string& prefix, const std::string& suffix = "") {
    for (const nlohmann::json& slice : Slices()) {
      for (const nlohmann::json& d : slice["spec"].value("devices", nlohmann::json::array())) {
        const std::string name = d.value("name", "");
        if (absl::StartsWith(name, prefix) && absl::EndsWith(name, suffix)) {
          return name;
        }
      }
    }
    return "";
  }
  // What a starting kubelet does to the node's slices.
  void Wipe() {
    ASSERT_TRUE(api_.client().DeleteCollection(k8s::kResourceSlices, "", Mine()).ok());
  }

  // File names in the CDI root, sorted.
  std::vector<std::string> CdiFiles() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(CdiRoot(), ec)) {
      out.push_back(e.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // The claim UIDs the checkpoint on disk records, sorted; a checkpoint that does not parse
  // fails the test.
  std::vector<std::string> CheckpointedUids() const {
    std::ifstream in(seen_from_ + PluginDir() + "/checkpoint.json");
    if (!in) {
      return {};
    }
    nlohmann::json file = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(file.is_discarded()) << "the checkpoint does not parse";
    std::vector<std::string> uids;
    if (file.is_object() && file.contains("claims") && file["claims"].is_object()) {
      for (const auto& [uid, _] : file["claims"].items()) {
        uids.push_back(uid);
      }
    }
    std::sort(uids.begin(), uids.end());
    return uids;
  }

  // The kubelet's side of registration: GetInfo, checked as the kubelet checks it, then
  // NotifyRegistrationStatus(registered).
  void Register() {
    auto stub = ::pluginregistration::Registration::NewStub(
        grpc::CreateChannel("unix://" + RegSock(), grpc::InsecureChannelCredentials()));
    ::pluginregistration::PluginInfo info;
    grpc::Status s = stub->GetInfo(Context(5).get(), {}, &info);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(info.type(), "DRAPlugin");
    EXPECT_EQ(info.name(), kDriver);
    // The path as the node sees it, in whatever mount namespace it runs.
    EXPECT_EQ(info.endpoint(), PluginDir() + "/dra.sock");
    EXPECT_EQ(std::vector<std::string>(info.supported_versions().begin(),
                                       info.supported_versions().end()),
              (std::vector<std::string>{"v1.DRAPlugin", "v1beta1.DRAPlugin",
                                        "v1alpha1.DRAResourceHealth", "v1.DRAResourceHealth"}));
    ::pluginregistration::RegistrationStatus status;
    status.set_plugin_registered(true);
    ::pluginregistration::RegistrationStatusResponse response;
    s = stub->NotifyRegistrationStatus(Context(5).get(), status, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  // A claim for one device of `pool` (this node's unless named), allocated as the scheduler
  // would, with `config` (the opaque parameters of this driver, from the claim) unless null.
  Claim AllocatedClaim(const std::string& name, const std::string& device,
                       const nlohmann::json& config = nullptr, const std::string& pool = kNode) {
    nlohmann::json claim = {{"apiVersion", "resource.k8s.io/v1"},
                            {"kind", "ResourceClaim"},
                            {"metadata", {{"name", name}, {"namespace", kNs}}}};
    claim["spec"]["devices"]["requests"] =
        nlohmann::json::array({{{"name", "gpu"}, {"exactly", {{"deviceClassName", kDriver}}}}});
    auto created = api_.client().Create(k8s::kResourceClaims, kNs, claim);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) {
      return {};
    }
    nlohmann::json obj = *created;
    obj["status"]["allocation"]["devices"]["results"] = nlohmann::json::array(
        {{{"request", "gpu"}, {"driver", kDriver}, {"pool", pool}, {"device", device}}});
    if (!config.is_null()) {
      obj["status"]["allocation"]["devices"]["config"] =
          nlohmann::json::array({{{"source", "FromClaim"},
                                  {"requests", nlohmann::json::array({"gpu"})},
                                  {"opaque", {{"driver", kDriver}, {"parameters", config}}}}});
    }
    auto updated = api_.client().Update(k8s::kResourceClaims, kNs, obj, "status");
    EXPECT_TRUE(updated.ok()) << updated.status();
    return {name, obj["metadata"]["uid"].get<std::string>()};
  }

  // v1 NodePrepareResources for one claim: "" on success, the claim's error, or "gRPC: ...".
  // `cdi_ids` (optional) receives the CDI device ids of a success.
  std::string Prepare(const Claim& claim, std::vector<std::string>* cdi_ids = nullptr) {
    PrepareRequest request;
    Fill(*request.add_claims(), claim);
    PrepareResponse response;
    grpc::Status s = Stub()->NodePrepareResources(Context(120).get(), request, &response);
    if (!s.ok()) {
      return "gRPC: " + s.error_message();
    }
    auto it = response.claims().find(claim.uid);
    if (it == response.claims().end()) {
      return "no entry for the claim";
    }
    for (const auto& device : it->second.devices()) {
      for (const std::string& id : device.cdi_device_ids()) {
        if (cdi_ids != nullptr) {
          cdi_ids->push_back(id);
        }
      }
    }
    return it->second.error();
  }

  std::string Unprepare(const Claim& claim) {
    UnprepareRequest request;
    Fill(*request.add_claims(), claim);
    UnprepareResponse response;
    grpc::Status s = Stub()->NodeUnprepareResources(Context(120).get(), request, &response);
    if (!s.ok()) {
      return "gRPC: " + s.error_message();
    }
    auto it = response.claims().find(claim.uid);
    return it == response.claims().end() ? "no entry for the claim" : it->second.error();
  }

 private:
  void Spawn(const std::vector<std::string>& wrapper, const std::vector<std::string>& extra_flags,
             const std::map<std::string, std::string>& extra_env) {
    const char* binary = std::getenv("DRALENS_BINARY");
    std::vector<std::string> argv = wrapper;
    argv.push_back(binary != nullptr ? binary : DRALENS_BINARY);
    argv.push_back("node");
    argv.insert(argv.end(), source_flags_.begin(), source_flags_.end());
    for (const std::string& flag :
         {std::string("--metrics-address=127.0.0.1:0"), "--kubelet-registry-dir=" + RegistryDir(),
          "--kubelet-plugins-dir=" + PluginsDir(), "--cdi-root=" + CdiRoot()}) {
      argv.push_back(flag);
    }
    argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
    std::map<std::string, std::string> env = {{"NODE_NAME", kNode}, {"KUBECONFIG", kubeconfig_}};
    env.insert(extra_env.begin(), extra_env.end());
    node_ = std::make_unique<Subprocess>(argv, env);
  }

  static k8s::ListOptions Mine() {
    k8s::ListOptions options;
    options.field_selector = std::string("spec.nodeName=") + kNode + ",spec.driver=" + kDriver;
    return options;
  }

  static std::unique_ptr<grpc::ClientContext> Context(int seconds) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
    return context;
  }

  template <typename ClaimMessage>
  static void Fill(ClaimMessage& message, const Claim& claim) {
    message.set_namespace_(kNs);
    message.set_name(claim.name);
    message.set_uid(claim.uid);
  }

  std::unique_ptr<Plugin::Stub> Stub() {
    return Plugin::NewStub(
        grpc::CreateChannel("unix://" + DraSock(), grpc::InsecureChannelCredentials()));
  }

  // Declared in the order they start, so they go in reverse: the node process first, then the
  // API server, then the directory.
  TempDir root_{"dralens-harness"};
  ApiFixture api_;
  std::string kubeconfig_;
  std::vector<std::string> source_flags_ = {"--device-source=simulated",
                                            "--simulated-profile=dgx-h100"};
  std::string seen_from_;
  std::unique_ptr<Subprocess> node_;
  int metrics_port_ = 0;
};

}  // namespace dralens::testing
