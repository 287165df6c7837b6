// `dralens node` as a kubelet sees it: the real binary with a simulated GPU node, against the
// embedded API server, driven over its real Unix sockets by gRPC clients built from our protos.
// Also the crash-injection loop: kill the node (the preparer's test hook calls _exit(137), as
// SIGKILL would) at every step of prepare and unprepare, restart it, and check that nothing
// leaked, no device is prepared twice and the answer on retry is the same.
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

namespace dralens {
namespace {

namespace fs = std::filesystem;
namespace dra_v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace dra_v1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;
using json = nlohmann::json;
using ::dralens::testing::Subprocess;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const std::string kBinary = DRALENS_BINARY;
constexpr char kNode[] = "node-a";
constexpr char kDriver[] = "gpu.dralens.dev";
constexpr char kNs[] = "ml";

std::unique_ptr<grpc::ClientContext> Context(int seconds = 10) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return context;
}

std::vector<std::string> ListDir(const std::string& dir) {
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
std::vector<std::string> Flatten(const dra_v1::NodePrepareResourceResponse& r) {
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

std::vector<std::string> Flatten(const dra_v1beta1::NodePrepareResourceResponse& r) {
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

TEST_F(NodePluginTest, PublishesSlicesRegistersAndPreparesOverV1AndV1beta1) {
  StartNode();
  // Not ready until the kubelet acknowledged the registration.
  EXPECT_EQ(Readyz(), 503);
  Register();
  int ready = 0;
  for (int i = 0; i < 250 && ready != 200; ++i) {
    ready = Readyz();
    if (ready != 200) {
      usleep(20000);
    }
  }
  EXPECT_EQ(ready, 200) << node_->Output();

  // The node's pool is on the server: 8 full GPUs, owned by the Node, spec.nodeName set.
  k8s::ListOptions options;
  options.field_selector = absl::StrCat("spec.nodeName=", kNode, ",spec.driver=", kDriver);
  auto slices = client_->List(k8s::kResourceSlices, "", options);
  ASSERT_TRUE(slices.ok()) << slices.status();
  std::vector<std::string> names;
  for (const json& s : slices->items) {
    EXPECT_EQ(s["spec"]["pool"]["name"], kNode);
    EXPECT_EQ(s["metadata"]["ownerReferences"][0]["kind"], "Node");
    for (const json& d : s["spec"]["devices"]) {
      names.push_back(d["name"]);
    }
  }
  std::sort(names.begin(), names.end());
  EXPECT_THAT(names,
              ElementsAre("gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7"));

  // An empty request (the liveness probe) gets an empty answer.
  dra_v1::NodePrepareResourcesResponse empty;
  ASSERT_TRUE(PrepareV1({}, &empty).ok());
  EXPECT_THAT(empty.claims(), IsEmpty());

  const Claim a = AllocatedClaim("train-a", "gpu-3");
  const std::string want =
      absl::StrCat("gpu-3|", kNode, "|gpu,|k8s.gpu.dralens.dev/claim=", a.uid, "-gpu-3,");

  // v1 prepare writes the CDI spec and checkpoints the claim.
  dra_v1::NodePrepareResourcesResponse v1;
  ASSERT_TRUE(PrepareV1({a}, &v1).ok());
  ASSERT_EQ(v1.claims().size(), 1u);
  EXPECT_THAT(Flatten(v1.claims().at(a.uid)), ElementsAre(want));
  EXPECT_TRUE(fs::exists(CdiSpecOf(a)));
  EXPECT_THAT(CheckpointedUids(), ElementsAre(a.uid));
  const int validated = std::system(absl::StrCat("/usr/bin/python3 ", DRALENS_SOURCE_DIR,
                                                 "/tests/schema/validate_cdi.py --schema-dir ",
                                                 DRALENS_SCHEMA_DIR, " ", CdiSpecOf(a))
                                        .c_str());
  EXPECT_EQ(validated, 0);

  // v1beta1 re-prepare (the kubelet restarted) returns the same answer.
  {
    dra_v1beta1::NodePrepareResourcesRequest request;
    Add(request, a);
    dra_v1beta1::NodePrepareResourcesResponse response;
    grpc::Status s = V1beta1()->NodePrepareResources(Context().get(), request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(response.claims().size(), 1u);
    EXPECT_THAT(Flatten(response.claims().at(a.uid)), ElementsAre(want));
  }

  // Per-claim errors do not fail the batch: a device we do not own, a claim that was replaced,
  // and a device already prepared for another claim, next to a good claim.
  const Claim foreign = AllocatedClaim("foreign", "gpu-0", "node-b");
  const Claim replaced{"train-a", "00000000-0000-0000-0000-00000000dead"};
  const Claim taken = AllocatedClaim("taken", "gpu-3");
  const Claim b = AllocatedClaim("train-b", "gpu-5");
  dra_v1::NodePrepareResourcesResponse mixed;
  ASSERT_TRUE(PrepareV1({foreign, replaced, taken, b}, &mixed).ok());
  ASSERT_EQ(mixed.claims().size(), 4u);
  EXPECT_THAT(mixed.claims().at(foreign.uid).error(), HasSubstr("node-b"));
  EXPECT_THAT(mixed.claims().at(replaced.uid).error(), HasSubstr("replaced"));
  EXPECT_THAT(mixed.claims().at(taken.uid).error(), HasSubstr("gpu-3"));
  EXPECT_TRUE(mixed.claims().at(b.uid).error().empty()) << mixed.claims().at(b.uid).error();
  EXPECT_FALSE(fs::exists(CdiSpecOf(taken)));

  // Unprepare over v1, then again over v1beta1: both succeed, the spec is gone.
  dra_v1::NodeUnprepareResourcesResponse un;
  ASSERT_TRUE(UnprepareV1({a, b}, &un).ok());
  ASSERT_EQ(un.claims().size(), 2u);
  EXPECT_EQ(un.claims().at(a.uid).error(), "");
  EXPECT_EQ(un.claims().at(b.uid).error(), "");
  EXPECT_FALSE(fs::exists(CdiSpecOf(a)));
  {
    dra_v1beta1::NodeUnprepareResourcesRequest request;
    Add(request, a);
    dra_v1beta1::NodeUnprepareResourcesResponse response;
    grpc::Status s = V1beta1()->NodeUnprepareResources(Context().get(), request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(response.claims().size(), 1u);
    EXPECT_EQ(response.claims().at(a.uid).error(), "");
  }
  EXPECT_THAT(ListDir(CdiRoot()), IsEmpty());
  EXPECT_THAT(CheckpointedUids(), IsEmpty());

  // Now that gpu-3 is free, the claim that was refused prepares.
  dra_v1::NodePrepareResourcesResponse retry;
  ASSERT_TRUE(PrepareV1({taken}, &retry).ok());
  EXPECT_EQ(retry.claims().at(taken.uid).error(), "");

  // The metrics endpoint saw the API requests the driver made.
  {
    httplib::Client c("127.0.0.1", metrics_port_);
    auto res = c.Get("/metrics");
    ASSERT_TRUE(res);
    EXPECT_THAT(res->body, HasSubstr("resource=\"resourceclaims\""));
    EXPECT_THAT(res->body, HasSubstr("resource=\"resourceslices\""));
  }

  StopNode();
  // Slices stay published across a restart (the kubelet, not the plugin, wipes them) and a
  // restarted node finds its prepared claim in the checkpoint without asking again.
  StartNode();
  dra_v1::NodePrepareResourcesResponse again;
  ASSERT_TRUE(PrepareV1({taken}, &again).ok());
  EXPECT_EQ(again.claims().at(taken.uid).error(), "");
  ASSERT_EQ(again.claims().at(taken.uid).devices_size(), 1);
  EXPECT_EQ(again.claims().at(taken.uid).devices(0).device_name(), "gpu-3");
  StopNode();
}

TEST_F(NodePluginTest, RepublishesSlicesTheKubeletWipedAtStart) {
  StartNode();
  StopNode();
  // The kubelet wipes the node's slices when it starts and 30 s after the plugin went away.
  k8s::ListOptions options;
  options.field_selector = absl::StrCat("spec.nodeName=", kNode, ",spec.driver=", kDriver);
  ASSERT_TRUE(client_->DeleteCollection(k8s::kResourceSlices, "", options).ok());
  auto listed = client_->List(k8s::kResourceSlices, "", options);
  ASSERT_TRUE(listed.ok());
  ASSERT_THAT(listed->items, IsEmpty());
  StartNode();
  listed = client_->List(k8s::kResourceSlices, "", options);
  ASSERT_TRUE(listed.ok());
  EXPECT_FALSE(listed->items.empty());
  StopNode();
}

// Kill the node at every step of prepare and unprepare, restart it and retry. The number of
// rounds is DRALENS_CRASH_ROUNDS (default 2); `make crash-loop` runs many more.
TEST_F(NodePluginTest, CrashAtEveryStepLeaksNothingAndNeverPreparesADeviceTwice) {
  int rounds = 2;
  if (const char* env = std::getenv("DRALENS_CRASH_ROUNDS")) {
    ASSERT_TRUE(absl::SimpleAtoi(env, &rounds)) << env;
  }
  const std::vector<std::string> prepare_steps = {"after-started", "after-cdi", "after-completed"};
  const std::vector<std::string> unprepare_steps = {"unprepare-after-cdi-removed",
                                                    "unprepare-after-checkpoint"};
  int crashes = 0;
  for (int round = 0; round < rounds; ++round) {
    for (const std::string& step : prepare_steps) {
      SCOPED_TRACE(absl::StrCat("round ", round, " prepare step ", step));
      const Claim c = AllocatedClaim(absl::StrCat("p-", round, "-", step), "gpu-1");
      const Claim rival = AllocatedClaim(absl::StrCat("r-", round, "-", step), "gpu-1");
      const std::string want =
          absl::StrCat("gpu-1|", kNode, "|gpu,|k8s.gpu.dralens.dev/claim=", c.uid, "-gpu-1,");

      StartNode(step);
      dra_v1::NodePrepareResourcesResponse lost;
      grpc::Status s = PrepareV1({c}, &lost);
      EXPECT_FALSE(s.ok()) << "the node should have died at " << step;
      EXPECT_EQ(node_->Wait(absl::Seconds(15)), 137) << node_->Output();
      node_.reset();
      ++crashes;

      StartNode();
      dra_v1::NodePrepareResourcesResponse retried;
      ASSERT_TRUE(PrepareV1({c}, &retried).ok());
      EXPECT_THAT(Flatten(retried.claims().at(c.uid)), ElementsAre(want));
      EXPECT_THAT(ListDir(CdiRoot()), ElementsAre("k8s.gpu.dralens.dev-claim_" + c.uid + ".json"));
      EXPECT_THAT(CheckpointedUids(), ElementsAre(c.uid));

      // The same device for another claim is refused while `c` holds it.
      dra_v1::NodePrepareResourcesResponse refused;
      ASSERT_TRUE(PrepareV1({rival}, &refused).ok());
      EXPECT_THAT(refused.claims().at(rival.uid).error(), HasSubstr("gpu-1"));
      EXPECT_FALSE(fs::exists(CdiSpecOf(rival)));

      // A second retry is a pure replay: same answer.
      dra_v1::NodePrepareResourcesResponse replay;
      ASSERT_TRUE(PrepareV1({c}, &replay).ok());
      EXPECT_THAT(Flatten(replay.claims().at(c.uid)), ElementsAre(want));

      dra_v1::NodeUnprepareResourcesResponse un;
      ASSERT_TRUE(UnprepareV1({c}, &un).ok());
      EXPECT_EQ(un.claims().at(c.uid).error(), "");
      EXPECT_THAT(ListDir(CdiRoot()), IsEmpty());
      EXPECT_THAT(CheckpointedUids(), IsEmpty());
      StopNode();
    }
    for (const std::string& step : unprepare_steps) {
      SCOPED_TRACE(absl::StrCat("round ", round, " unprepare step ", step));
      const Claim c = AllocatedClaim(absl::StrCat("u-", round, "-", step), "gpu-2");
      StartNode(step);
      dra_v1::NodePrepareResourcesResponse prepared;
      ASSERT_TRUE(PrepareV1({c}, &prepared).ok());
      ASSERT_EQ(prepared.claims().at(c.uid).error(), "");
      dra_v1::NodeUnprepareResourcesResponse lost;
      EXPECT_FALSE(UnprepareV1({c}, &lost).ok()) << "the node should have died at " << step;
      EXPECT_EQ(node_->Wait(absl::Seconds(15)), 137) << node_->Output();
      node_.reset();
      ++crashes;

      // The claim may already be deleted when the kubelet retries: unprepare needs only the
      // checkpoint.
      ASSERT_TRUE(client_->Delete(k8s::kResourceClaims, kNs, c.name, {}).ok());
      StartNode();
      dra_v1::NodeUnprepareResourcesResponse un;
      ASSERT_TRUE(UnprepareV1({c}, &un).ok());
      EXPECT_EQ(un.claims().at(c.uid).error(), "");
      EXPECT_THAT(ListDir(CdiRoot()), IsEmpty());
      EXPECT_THAT(CheckpointedUids(), IsEmpty());
      // gpu-2 is free again.
      const Claim next = AllocatedClaim(absl::StrCat("n-", round, "-", step), "gpu-2");
      dra_v1::NodePrepareResourcesResponse ok;
      ASSERT_TRUE(PrepareV1({next}, &ok).ok());
      EXPECT_EQ(ok.claims().at(next.uid).error(), "");
      ASSERT_TRUE(UnprepareV1({next}, &un).ok());
      StopNode();
    }
  }
  EXPECT_EQ(crashes, rounds * 5);
  RecordProperty("crashes", crashes);
}

// Dynamic MIG through the real binary: the pool carries the GPUs' counter sets and every
// placement; a claim for one creates the instance (its capability nodes are in the CDI spec)
// and unprepare destroys it.
TEST_F(NodePluginTest, DynamicMigClaimCreatesItsInstance) {
  StartNode("", {}, {"--dynamic-mig"});
  k8s::ListOptions options;
  options.field_selector = absl::StrCat("spec.nodeName=", kNode, ",spec.driver=", kDriver);
  auto slices = client_->List(k8s::kResourceSlices, "", options);
  ASSERT_TRUE(slices.ok()) << slices.status();
  bool counters = false;
  std::string placement;
  for (const json& slice : slices->items) {
    counters = counters || !slice["spec"].value("sharedCounters", json::array()).empty();
    for (const json& d : slice["spec"]["devices"]) {
      const std::string name = d["name"];
      if (placement.empty() && absl::StartsWith(name, "gpu-0-mig-1g10gb-")) {
        placement = name;
      }
    }
  }
  EXPECT_TRUE(counters);
  ASSERT_FALSE(placement.empty());

  const Claim c = AllocatedClaim("slice", placement);
  dra_v1::NodePrepareResourcesResponse prepared;
  ASSERT_TRUE(PrepareV1({c}, &prepared).ok());
  ASSERT_EQ(prepared.claims().at(c.uid).error(), "");
  std::ifstream spec(CdiSpecOf(c));
  const std::string text((std::istreambuf_iterator<char>(spec)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("/dev/nvidia-caps/nvidia-cap"));

  httplib::Client metrics("127.0.0.1", metrics_port_);
  auto debug = metrics.Get("/debug/claims");
  ASSERT_TRUE(debug);
  json state = json::parse(debug->body, nullptr, false);
  ASSERT_EQ(state["claims"].size(), 1u);
  EXPECT_TRUE(absl::StartsWith(state["claims"][0]["devices"][0]["uuid"].get<std::string>(), "MIG-"))
      << debug->body;

  dra_v1::NodeUnprepareResourcesResponse un;
  ASSERT_TRUE(UnprepareV1({c}, &un).ok());
  EXPECT_EQ(un.claims().at(c.uid).error(), "");
  EXPECT_THAT(ListDir(CdiRoot()), IsEmpty());
  StopNode();
}

// Every sharing strategy through the kubelet's socket: a time-sliced claim, an MPS claim whose
// CDI edits carry the MPS environment and mounts, a claim shared by two pods, and two
// consumable-capacity shares of one GPU whose shareIDs come back in v1 Device.share_id.
TEST_F(NodePluginTest, EverySharingStrategyThroughTheKubeletSocket) {
  StartNode("", {}, {"--consumable-capacity"});
  Register();

  // Consumable capacity is published on the full GPUs.
  k8s::ListOptions options;
  options.field_selector = absl::StrCat("spec.nodeName=", kNode, ",spec.driver=", kDriver);
  auto slices = client_->List(k8s::kResourceSlices, "", options);
  ASSERT_TRUE(slices.ok()) << slices.status();
  int consumable = 0;
  for (const json& slice : slices->items) {
    for (const json& d : slice["spec"]["devices"]) {
      if (d.value("allowMultipleAllocations", false)) {
        ++consumable;
        EXPECT_EQ(d["capacity"]["memory"]["requestPolicy"]["validRange"]["step"], "1Gi");
      }
    }
  }
  EXPECT_EQ(consumable, 8);

  // claim name -> (results, config, pods that reserve it)
  auto make = [&](const std::string& name, const json& results, const json& config,
                  int pods) -> Claim {
    json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"name", name}, {"namespace", kNs}}}};
    claim["spec"]["devices"]["requests"] = json::array({{{"name", "gpu"},
                                                         {"exactly",
                                                          {{"deviceClassName", kDriver},
                                                           {"allocationMode", "ExactCount"},
                                                           {"count", results.size()}}}}});
    auto created = client_->Create(k8s::kResourceClaims, kNs, claim);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) {
      return {};
    }
    json obj = *created;
    obj["status"]["allocation"]["devices"]["results"] = results;
    if (!config.is_null()) {
      obj["status"]["allocation"]["devices"]["config"] =
          json::array({{{"source", "FromClaim"},
                        {"requests", json::array({"gpu"})},
                        {"opaque", {{"driver", kDriver}, {"parameters", config}}}}});
    }
    for (int i = 0; i < pods; ++i) {
      obj["status"]["reservedFor"].push_back(
          {{"resource", "pods"},
           {"name", absl::StrCat(name, "-pod-", i)},
           {"uid", absl::StrCat("00000000-0000-4000-8000-00000000000", i)}});
    }
    auto updated = client_->Update(k8s::kResourceClaims, kNs, obj, "status");
    EXPECT_TRUE(updated.ok()) << updated.status();
    return {name, (*created)["metadata"]["uid"].get<std::string>()};
  };
  auto result = [](const std::string& device) {
    return json{{"request", "gpu"}, {"driver", kDriver}, {"pool", kNode}, {"device", device}};
  };
  const json time_sliced = json::parse(R"({"apiVersion": "resource.dralens.dev/v1beta1",
      "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing",
      "timeSlicingConfig": {"interval": "Long"}}})");
  const json mps = json::parse(R"({"apiVersion": "resource.dralens.dev/v1beta1",
      "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mpsConfig": {
      "defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": "8Gi"}}})");
  json share_a = result("gpu-3");
  share_a["shareID"] = "9a2f6c1e-0000-4000-8000-00000000000a";
  share_a["consumedCapacity"] = {{"memory", "20Gi"}};
  json share_b = result("gpu-3");
  share_b["shareID"] = "9a2f6c1e-0000-4000-8000-00000000000b";
  share_b["consumedCapacity"] = {{"memory", "40Gi"}};

  const Claim sliced = make("sliced", json::array({result("gpu-0")}), time_sliced, 1);
  const Claim sliced2 = make("sliced-2", json::array({result("gpu-0")}), time_sliced, 1);
  const Claim daemon = make("mps", json::array({result("gpu-1")}), mps, 1);
  const Claim shared = make("shared", json::array({result("gpu-2")}), nullptr, 2);
  const Claim first = make("share-a", json::array({share_a}), nullptr, 1);
  const Claim second = make("share-b", json::array({share_b}), nullptr, 1);

  dra_v1::NodePrepareResourcesResponse prepared;
  ASSERT_TRUE(PrepareV1({sliced, sliced2, daemon, shared, first, second}, &prepared).ok());
  for (const Claim& c : {sliced, sliced2, daemon, shared, first, second}) {
    EXPECT_EQ(prepared.claims().at(c.uid).error(), "") << c.name;
  }
  // Consumable shares: the kubelet gets each allocation's shareID back.
  EXPECT_EQ(prepared.claims().at(first.uid).devices(0).share_id(),
            "9a2f6c1e-0000-4000-8000-00000000000a");
  EXPECT_EQ(prepared.claims().at(second.uid).devices(0).share_id(),
            "9a2f6c1e-0000-4000-8000-00000000000b");

  // MPS: the client environment and the daemon's pipe directory are in the CDI device.
  std::ifstream in(CdiSpecOf(daemon));
  json spec = json::parse(in, nullptr, false);
  ASSERT_FALSE(spec.is_discarded());
  const json& edits = spec["devices"][0]["containerEdits"];
  EXPECT_THAT(edits["env"].dump(), HasSubstr("CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"));
  EXPECT_THAT(edits["env"].dump(), HasSubstr("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"));
  ASSERT_TRUE(edits.contains("mounts")) << edits.dump();
  const std::string pipe = PluginsDir() + "/gpu.dralens.dev/mps/" + daemon.uid + "/pipe";
  EXPECT_EQ(edits["mounts"][0]["hostPath"], pipe);
  EXPECT_TRUE(fs::is_directory(pipe));

  // The shared claim's second pod: prepared once, the same answer again.
  dra_v1::NodePrepareResourcesResponse again;
  ASSERT_TRUE(PrepareV1({shared}, &again).ok());
  EXPECT_EQ(Flatten(again.claims().at(shared.uid)), Flatten(prepared.claims().at(shared.uid)));

  httplib::Client metrics("127.0.0.1", metrics_port_);
  auto scraped = metrics.Get("/metrics");
  ASSERT_TRUE(scraped);
  // Label names are sorted in the exposition.
  auto granted = [](const std::string& strategy, int n) {
    return absl::StrCat(
        "dralens_sharing_decisions_total{reason=\"none\",result=\"granted\",strategy=\"", strategy,
        "\"} ", n, "\n");
  };
  for (const std::string& series :
       {granted("time_slicing", 2), granted("mps", 1), granted("exclusive", 1),
        granted("shared_claim", 1), granted("consumable", 2),
        std::string("dralens_device_consumers{device=\"gpu-3\"} 2\n")}) {
    EXPECT_NE(scraped->body.find(series), std::string::npos) << series;
  }

  // After the last pod the kubelet unprepares every claim: nothing is left.
  dra_v1::NodeUnprepareResourcesResponse un;
  ASSERT_TRUE(UnprepareV1({sliced, sliced2, daemon, shared, first, second}, &un).ok());
  for (const auto& [uid, r] : un.claims()) {
    EXPECT_EQ(r.error(), "") << uid;
  }
  EXPECT_THAT(ListDir(CdiRoot()), IsEmpty());
  EXPECT_FALSE(fs::exists(PluginsDir() + "/gpu.dralens.dev/mps/" + daemon.uid));
  StopNode();
}

// The telemetry contract end to end: a prepare through the real socket shows up as an
// OpenMetrics exemplar whose trace id is a PrepareClaim span the OTLP receiver got, and the
// classic exposition passes promtool.
TEST_F(NodePluginTest, ASlowBucketsExemplarLeadsToTheClaimsSpanAtTheCollector) {
  std::mutex mu;
  std::vector<json> exports;
  httplib::Server receiver;
  receiver.Post("/v1/traces", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> l(mu);
    exports.push_back(json::parse(req.body, nullptr, false));
    res.set_content("{}", "application/json");
  });
  const int port = receiver.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serve([&] { receiver.listen_after_bind(); });

  StartNode("", {{"OTEL_EXPORTER_OTLP_ENDPOINT", absl::StrCat("http://127.0.0.1:", port)},
                 {"OTEL_BSP_SCHEDULE_DELAY", "50"},
                 {"OTEL_SERVICE_NAME", "dralens-node-it"}});
  Register();
  const Claim c = AllocatedClaim("traced", "gpu-6");
  dra_v1::NodePrepareResourcesResponse prepared;
  ASSERT_TRUE(PrepareV1({c}, &prepared).ok());
  ASSERT_EQ(prepared.claims().at(c.uid).error(), "");

  httplib::Client metrics("127.0.0.1", metrics_port_);
  auto om = metrics.Get("/metrics", {{"Accept", "application/openmetrics-text;version=1.0.0"}});
  ASSERT_TRUE(om);
  EXPECT_THAT(om->get_header_value("Content-Type"), HasSubstr("application/openmetrics-text"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      om->body, m,
      std::regex(
          R"re(dralens_node_claim_duration_seconds_bucket\{operation="prepare",result="ok",le="[^"]+"\} \d+ # \{trace_id="([0-9a-f]{32})"\})re")))
      << om->body;
  const std::string trace_id = m[1];

  // The receiver gets the claim's span with that trace id, from the node's service.
  bool found = false;
  for (int i = 0; i < 500 && !found; ++i) {
    {
      std::lock_guard<std::mutex> l(mu);
      for (const json& body : exports) {
        for (const json& rs : body.value("resourceSpans", json::array())) {
          for (const json& ss : rs.value("scopeSpans", json::array())) {
            for (const json& span : ss.value("spans", json::array())) {
              if (span.value("traceId", "") == trace_id &&
                  span.value("name", "") == "PrepareClaim") {
                found = true;
                EXPECT_EQ(rs["resource"]["attributes"][0]["value"]["stringValue"],
                          "dralens-node-it");
              }
            }
          }
        }
      }
    }
    if (!found) {
      usleep(20000);
    }
  }
  EXPECT_TRUE(found) << "no PrepareClaim span with trace id " << trace_id;

  // /debug/claims says what the node prepared, and the outcome with its trace id.
  auto debug = metrics.Get("/debug/claims");
  ASSERT_TRUE(debug);
  json claims = json::parse(debug->body, nullptr, false);
  ASSERT_FALSE(claims.is_discarded()) << debug->body;
  ASSERT_EQ(claims["claims"].size(), 1u) << debug->body;
  EXPECT_EQ(claims["claims"][0]["uid"], c.uid);
  EXPECT_EQ(claims["claims"][0]["state"], "PrepareCompleted");
  EXPECT_EQ(claims["claims"][0]["devices"][0]["device"], "gpu-6");
  ASSERT_FALSE(claims["recent"].empty());
  EXPECT_EQ(claims["recent"].back()["result"], "ok");
  EXPECT_EQ(claims["recent"].back()["traceID"], trace_id);

  auto text = metrics.Get("/metrics");
  ASSERT_TRUE(text);
  const std::string path = (root_ / "metrics.txt").string();
  std::ofstream(path) << text->body;
  EXPECT_EQ(std::system(("/usr/bin/promtool check metrics < " + path).c_str()), 0) << text->body;
  EXPECT_THAT(text->body, HasSubstr("dralens_otlp_spans_total{outcome=\"exported\"}"));

  StopNode();
  receiver.stop();
  serve.join();
}

}  // namespace
}  // namespace dralens
