// `dralens node --dynamic-mig` killed (the preparer's crash hook calls _exit(137), as SIGKILL
// would) at every step of a dynamic MIG instance's life, restarted, and driven to unprepare
// over its real kubelet socket. The simulated GPUs live in the node's process, so each restart
// also finds the instances gone and MIG mode off, as after a GPU reset or a driver reload: the
// restarted node must prepare the restored claim again, or drop it when it was deleted, and
// unprepare must always succeed and leave no instance, CDI spec or checkpoint entry.
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "driver/proto/dra/v1/api.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "tests/integration/subprocess.h"
#include "tests/testing/kubeconfig.h"

namespace dralens {
namespace {

namespace fs = std::filesystem;
namespace dra_v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
using json = nlohmann::json;
using ::dralens::testing::Subprocess;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const std::string kBinary = DRALENS_BINARY;
constexpr char kNode[] = "node-m";
constexpr char kDriver[] = "gpu.dralens.dev";
constexpr char kNs[] = "ml";

struct Claim {
  std::string name;
  std::string uid;
};

class DynamicMigCrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dralens-mig-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    ASSERT_TRUE(api_.Start().ok());
    k8s::RestConfig config;
    config.server = api_.url();
    auto client = k8s::RestClient::FromConfig(config);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(client).value();
    ASSERT_TRUE(
        client_
            ->Create(k8s::kNodes, "",
                     {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", kNode}}}})
            .ok());
    kubeconfig_ = (root_ / "kubeconfig").string();
    testing::WriteKubeconfig(kubeconfig_, api_.url());
  }

  void TearDown() override {
    node_.reset();
    api_.Stop();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  std::string PluginsDir() const { return (root_ / "plugins").string(); }
  std::string CdiRoot() const { return (root_ / "cdi").string(); }
  std::string DraSock() const { return PluginsDir() + "/gpu.dralens.dev/dra.sock"; }

  void StartNode(const std::string& crash_at = "") {
    std::map<std::string, std::string> env = {{"NODE_NAME", kNode}, {"KUBECONFIG", kubeconfig_}};
    if (!crash_at.empty()) {
      env["DRALENS_TEST_CRASH_AT"] = crash_at;
    }
    node_ = std::make_unique<Subprocess>(
        std::vector<std::string>{
            kBinary, "node", "--device-source=simulated", "--simulated-profile=dgx-h100",
            "--dynamic-mig", "--metrics-address=127.0.0.1:0",
            "--kubelet-registry-dir=" + (root_ / "registry").string(),
            "--kubelet-plugins-dir=" + PluginsDir(), "--cdi-root=" + CdiRoot()},
        env);
    ASSERT_TRUE(node_->WaitForOutput("kubelet plugin serving", absl::Seconds(30)))
        << node_->Output();
    std::smatch m;
    const std::string out = node_->Output();
    ASSERT_TRUE(
        std::regex_search(out, m, std::regex(R"(serving metrics"? address=\S+ port=(\d+))")))
        << out;
    metrics_port_ = std::stoi(m[1]);
  }

  void StopNode() {
    ASSERT_TRUE(node_);
    EXPECT_EQ(node_->Stop(SIGTERM, absl::Seconds(15)), 0) << node_->Output();
    node_.reset();
  }

  // Expects the node to die at its armed crash point.
  void ExpectCrashed(const grpc::Status& call, const std::string& step) {
    EXPECT_FALSE(call.ok()) << "the node should have died at " << step;
    EXPECT_EQ(node_->Wait(absl::Seconds(15)), 137) << node_->Output();
    node_.reset();
  }

  std::string Get(const std::string& path) {
    httplib::Client c("127.0.0.1", metrics_port_);
    auto res = c.Get(path);
    EXPECT_TRUE(res) << path;
    return res ? res->body : "";
  }

  // The published name of the 1g.10gb placement at memory slice 0 of gpu-1.
  std::string Placement() {
    k8s::ListOptions options;
    options.field_selector = absl::StrCat("spec.nodeName=", kNode, ",spec.driver=", kDriver);
    auto slices = client_->List(k8s::kResourceSlices, "", options);
    EXPECT_TRUE(slices.ok()) << slices.status();
    for (const json& slice : slices.ok() ? slices->items : std::vector<json>{}) {
      for (const json& d : slice["spec"]["devices"]) {
        const std::string name = d["name"];
        if (absl::StartsWith(name, "gpu-1-mig-1g10gb-") && absl::EndsWith(name, "-0")) {
          return name;
        }
      }
    }
    return "";
  }

  Claim AllocatedClaim(const std::string& name, const std::string& device) {
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
             {{{"request", "gpu"}, {"driver", kDriver}, {"pool", kNode}, {"device", device}}}}}}}}};
    EXPECT_TRUE(client_->Update(k8s::kResourceClaims, kNs, obj, "status").ok());
    return {name, (*created)["metadata"]["uid"].get<std::string>()};
  }

  std::unique_ptr<dra_v1::DRAPlugin::Stub> Stub() {
    return dra_v1::DRAPlugin::NewStub(
        grpc::CreateChannel("unix://" + DraSock(), grpc::InsecureChannelCredentials()));
  }
  static std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return context;
  }
  template <typename Request>
  static void Add(Request& request, const Claim& claim) {
    auto* c = request.add_claims();
    c->set_namespace_(kNs);
    c->set_name(claim.name);
    c->set_uid(claim.uid);
  }
  grpc::Status Prepare(const Claim& claim, dra_v1::NodePrepareResourcesResponse* response) {
    dra_v1::NodePrepareResourcesRequest request;
    Add(request, claim);
    return Stub()->NodePrepareResources(Context().get(), request, response);
  }
  grpc::Status Unprepare(const Claim& claim, dra_v1::NodeUnprepareResourcesResponse* response) {
    dra_v1::NodeUnprepareResourcesRequest request;
    Add(request, claim);
    return Stub()->NodeUnprepareResources(Context().get(), request, response);
  }

  std::vector<std::string> CdiFiles() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(CdiRoot(), ec)) {
      out.push_back(e.path().filename().string());
    }
    return out;
  }

  // The claim UIDs the checkpoint on disk records.
  std::vector<std::string> CheckpointedUids() const {
    std::ifstream in(PluginsDir() + "/gpu.dralens.dev/checkpoint.json");
    json file = json::parse(in, nullptr, false);
    std::vector<std::string> uids;
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
    return uids;
  }

  // Whether /metrics says `device` is prepared (dralens_device_state{state="prepared"} 1).
  bool SeriesSaysPrepared(const std::string& device) {
    std::istringstream lines(Get("/metrics"));
    for (std::string line; std::getline(lines, line);) {
      if (absl::StartsWith(line, "dralens_device_state{") &&
          absl::StrContains(line, absl::StrCat("device=\"", device, "\"")) &&
          absl::StrContains(line, "state=\"prepared\"") && absl::EndsWith(line, " 1")) {
        return true;
      }
    }
    return false;
  }

  // Nothing left: no MIG device on the node (no MIG layout series), no spec, no entry.
  void ExpectNothingLeft() {
    EXPECT_THAT(Get("/metrics"), ::testing::Not(HasSubstr("dralens_mig_devices{")));
    EXPECT_THAT(CdiFiles(), IsEmpty());
    EXPECT_THAT(CheckpointedUids(), IsEmpty());
  }

  fs::path root_;
  sim::ApiServer api_;
  std::unique_ptr<k8s::RestClient> client_;
  std::string kubeconfig_;
  std::unique_ptr<Subprocess> node_;
  int metrics_port_ = 0;
};

// Rounds: DRALENS_CRASH_ROUNDS (default 1); `make crash-loop` runs many more.
TEST_F(DynamicMigCrashTest, CrashAtEveryDynamicMigStepLeavesNoInstanceSpecOrEntry) {
  int rounds = 1;
  if (const char* env = std::getenv("DRALENS_CRASH_ROUNDS")) {
    ASSERT_TRUE(absl::SimpleAtoi(env, &rounds)) << env;
  }
  StartNode();
  const std::string device = Placement();
  StopNode();
  ASSERT_FALSE(device.empty());

  const std::vector<std::string> prepare_steps = {"after-started", "after-mig-created", "after-cdi",
                                                  "after-completed"};
  const std::vector<std::string> unprepare_steps = {
      "unprepare-after-cdi-removed", "unprepare-after-mig-destroyed", "unprepare-after-checkpoint"};
  int crashes = 0;
  for (int round = 0; round < rounds; ++round) {
    for (const std::string& step : prepare_steps) {
      SCOPED_TRACE(absl::StrCat("round ", round, " prepare step ", step));
      const Claim c = AllocatedClaim(absl::StrCat("p-", round, "-", step), device);
      StartNode(step);
      dra_v1::NodePrepareResourcesResponse lost;
      ExpectCrashed(Prepare(c, &lost), step);
      ++crashes;

      StartNode();
      if (step == "after-completed") {
        // Restored at start, before the kubelet asks again: the instance exists once more and
        // the device keeps its series.
        EXPECT_THAT(Get("/debug/claims"), HasSubstr("\"MIG-"));
        EXPECT_TRUE(SeriesSaysPrepared(device)) << Get("/metrics");
      }
      dra_v1::NodePrepareResourcesResponse retried;
      ASSERT_TRUE(Prepare(c, &retried).ok());
      EXPECT_EQ(retried.claims().at(c.uid).error(), "") << node_->Output();
      EXPECT_THAT(CdiFiles(), ElementsAre("k8s.gpu.dralens.dev-claim_" + c.uid + ".json"));
      EXPECT_THAT(CheckpointedUids(), ElementsAre(c.uid));
      // Its instance exists: the claim answers for a real MIG device.
      EXPECT_THAT(Get("/debug/claims"), HasSubstr("\"MIG-"));
      EXPECT_THAT(Get("/metrics"), HasSubstr("dralens_mig_devices{"));

      dra_v1::NodeUnprepareResourcesResponse un;
      ASSERT_TRUE(Unprepare(c, &un).ok());
      EXPECT_EQ(un.claims().at(c.uid).error(), "") << node_->Output();
      ExpectNothingLeft();
      StopNode();
    }
    for (const std::string& step : unprepare_steps) {
      for (bool deleted : {false, true}) {
        SCOPED_TRACE(absl::StrCat("round ", round, " unprepare step ", step,
                                  deleted ? ", claim deleted" : ""));
        const std::string suffix = absl::StrCat(round, "-", step, deleted ? "-d" : "");
        const Claim c = AllocatedClaim("u-" + suffix, device);
        StartNode(step);
        dra_v1::NodePrepareResourcesResponse prepared;
        ASSERT_TRUE(Prepare(c, &prepared).ok());
        ASSERT_EQ(prepared.claims().at(c.uid).error(), "");
        dra_v1::NodeUnprepareResourcesResponse lost;
        ExpectCrashed(Unprepare(c, &lost), step);
        ++crashes;

        // The kubelet's retry may come after the claim was deleted.
        if (deleted) {
          ASSERT_TRUE(client_->Delete(k8s::kResourceClaims, kNs, c.name, {}).ok());
        }
        StartNode();
        if (!deleted && step != "unprepare-after-checkpoint") {
          // Still prepared on disk: restored at start with a new instance and its series.
          EXPECT_THAT(Get("/debug/claims"), HasSubstr("\"MIG-"));
          EXPECT_TRUE(SeriesSaysPrepared(device)) << Get("/metrics");
        }
        dra_v1::NodeUnprepareResourcesResponse un;
        ASSERT_TRUE(Unprepare(c, &un).ok());
        EXPECT_EQ(un.claims().at(c.uid).error(), "") << node_->Output();
        ExpectNothingLeft();

        // The placement is free again.
        const Claim next = AllocatedClaim("n-" + suffix, device);
        dra_v1::NodePrepareResourcesResponse ok;
        ASSERT_TRUE(Prepare(next, &ok).ok());
        EXPECT_EQ(ok.claims().at(next.uid).error(), "");
        ASSERT_TRUE(Unprepare(next, &un).ok());
        EXPECT_EQ(un.claims().at(next.uid).error(), "");
        ExpectNothingLeft();
        StopNode();
      }
    }
  }
  EXPECT_EQ(crashes, rounds * 10);
  RecordProperty("crashes", crashes);
}

}  // namespace
}  // namespace dralens
