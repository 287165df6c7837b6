// `dralens node` surviving what real nodes do, as the real binary against the embedded API
// server: the kubelet wiping the node's slices (at its start) while the plugin runs, a kubelet
// registering the plugin again, temp files left by a kill, claims orphaned while the plugin was
// away, and sharing settings after a kill -9.
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "driver/proto/dra/v1/api.grpc.pb.h"
#include "driver/proto/pluginregistration/v1/api.grpc.pb.h"
#include "gtest/gtest.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "tests/integration/subprocess.h"
#include "tests/testing/eventually.h"
#include "tests/testing/kubeconfig.h"

namespace dralens {
namespace {

namespace fs = std::filesystem;
namespace dra_v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
using json = nlohmann::json;
using ::dralens::testing::Eventually;
using ::dralens::testing::Subprocess;

const std::string kBinary = DRALENS_BINARY;
constexpr char kNode[] = "node-a";
constexpr char kDriver[] = "gpu.dralens.dev";
constexpr char kNs[] = "ml";

std::unique_ptr<grpc::ClientContext> Context(int seconds) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return context;
}

// The `ts=` of the first log line after byte `from` of `output` that contains `needle`.
std::optional<absl::Time> LogTime(const std::string& output, size_t from,
                                  const std::string& needle) {
  size_t at = output.find(needle, from);
  if (at == std::string::npos) {
    return std::nullopt;
  }
  const size_t line = output.rfind('\n', at);
  const size_t ts = output.find("ts=", line == std::string::npos ? 0 : line);
  if (ts == std::string::npos || ts > at) {
    return std::nullopt;
  }
  const std::string text = output.substr(ts + 3, output.find(' ', ts) - ts - 3);
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &error)) {
    return std::nullopt;
  }
  return t;
}

class NodeReconcileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dralens-reconcile-XXXXXX").string();
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
  std::string DriverDir() const { return PluginsDir() + "/" + kDriver; }
  std::string CdiRoot() const { return (root_ / "cdi").string(); }
  std::string RegSock() const {
    return (root_ / "registry").string() + "/gpu.dralens.dev-reg.sock";
  }
  std::string DraSock() const { return DriverDir() + "/dra.sock"; }

  void StartNode(const std::vector<std::string>& extra_flags = {}) {
    std::vector<std::string> argv = {kBinary,
                                     "node",
                                     "--device-source=simulated",
                                     "--simulated-profile=dgx-h100",
                                     "--metrics-address=127.0.0.1:0",
                                     "--kubelet-registry-dir=" + (root_ / "registry").string(),
                                     "--kubelet-plugins-dir=" + PluginsDir(),
                                     "--cdi-root=" + CdiRoot()};
    argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
    node_ = std::make_unique<Subprocess>(
        argv,
        std::map<std::string, std::string>{{"NODE_NAME", kNode}, {"KUBECONFIG", kubeconfig_}});
    ASSERT_TRUE(node_->WaitForOutput("kubelet plugin serving", absl::Seconds(30)))
        << node_->Output();
    std::smatch m;
    const std::string out = node_->Output();
    ASSERT_TRUE(
        std::regex_search(out, m, std::regex(R"(serving metrics"? address=\S+ port=(\d+))")))
        << out;
    metrics_port_ = std::stoi(m[1]);
  }

  // The kubelet's side of registration.
  void Register() {
    auto stub = ::pluginregistration::Registration::NewStub(
        grpc::CreateChannel("unix://" + RegSock(), grpc::InsecureChannelCredentials()));
    ::pluginregistration::PluginInfo info;
    ASSERT_TRUE(stub->GetInfo(Context(1).get(), {}, &info).ok());
    ::pluginregistration::RegistrationStatus status;
    status.set_plugin_registered(true);
    ::pluginregistration::RegistrationStatusResponse response;
    ASSERT_TRUE(stub->NotifyRegistrationStatus(Context(5).get(), status, &response).ok());
  }

  int Readyz() {
    httplib::Client c("127.0.0.1", metrics_port_);
    auto res = c.Get("/readyz");
    return res ? res->status : 0;
  }

  // The sum of the samples of `family` whose label text contains every one of `labels`
  // (e.g. `kind="deleted"`); -1 when there is none.
  double Metric(const std::string& family, const std::vector<std::string>& labels = {}) {
    httplib::Client c("127.0.0.1", metrics_port_);
    auto res = c.Get("/metrics");
    if (!res || res->status != 200) {
      return -1;
    }
    double sum = -1;
    for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
      if (line.empty() || line[0] == '#' || !absl::StartsWith(line, family) ||
          (line.size() > family.size() && line[family.size()] != '{' &&
           line[family.size()] != ' ')) {
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

  std::vector<json> Slices() {
    k8s::ListOptions options;
    options.field_selector = absl::StrCat("spec.nodeName=", kNode, ",spec.driver=", kDriver);
    auto list = client_->List(k8s::kResourceSlices, "", options);
    EXPECT_TRUE(list.ok()) << list.status();
    return list.ok() ? list->items : std::vector<json>{};
  }
  size_t Devices() {
    size_t n = 0;
    for (const json& s : Slices()) {
      n += s["spec"].value("devices", json::array()).size();
    }
    return n;
  }

  // What a starting kubelet does to the node's slices.
  void Wipe() {
    k8s::ListOptions wipe;
    wipe.field_selector = absl::StrCat("spec.nodeName=", kNode, ",spec.driver=", kDriver);
    ASSERT_TRUE(client_->DeleteCollection(k8s::kResourceSlices, "", wipe).ok());
  }

  void StartReady() {
    StartNode();
    Register();
    ASSERT_TRUE(Eventually([&] { return Readyz() == 200; })) << node_->Output();
  }

  // A claim allocated `device` of this node, with `config` (opaque GpuConfig) unless null.
  std::pair<std::string, std::string> Claim(const std::string& name, const std::string& device,
                                            const json& config = nullptr) {
    json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"name", name}, {"namespace", kNs}}}};
    claim["spec"]["devices"]["requests"] =
        json::array({{{"name", "gpu"}, {"exactly", {{"deviceClassName", kDriver}}}}});
    auto created = client_->Create(k8s::kResourceClaims, kNs, claim);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) {
      return {};
    }
    json obj = *created;
    obj["status"]["allocation"]["devices"]["results"] = json::array(
        {{{"request", "gpu"}, {"driver", kDriver}, {"pool", kNode}, {"device", device}}});
    if (!config.is_null()) {
      obj["status"]["allocation"]["devices"]["config"] =
          json::array({{{"source", "FromClaim"},
                        {"requests", json::array({"gpu"})},
                        {"opaque", {{"driver", kDriver}, {"parameters", config}}}}});
    }
    EXPECT_TRUE(client_->Update(k8s::kResourceClaims, kNs, obj, "status").ok());
    return {name, (*created)["metadata"]["uid"].get<std::string>()};
  }

  std::string Prepare(const std::pair<std::string, std::string>& claim) {
    auto stub = dra_v1::DRAPlugin::NewStub(
        grpc::CreateChannel("unix://" + DraSock(), grpc::InsecureChannelCredentials()));
    dra_v1::NodePrepareResourcesRequest request;
    auto* c = request.add_claims();
    c->set_namespace_(kNs);
    c->set_name(claim.first);
    c->set_uid(claim.second);
    dra_v1::NodePrepareResourcesResponse response;
    grpc::Status s = stub->NodePrepareResources(Context(10).get(), request, &response);
    if (!s.ok()) {
      return "transport: " + s.error_message();
    }
    return response.claims().at(claim.second).error();
  }

  std::string CdiSpec(const std::string& uid) const {
    return CdiRoot() + "/k8s.gpu.dralens.dev-claim_" + uid + ".json";
  }

  fs::path root_;
  sim::ApiServer api_;
  std::unique_ptr<k8s::RestClient> client_;
  std::string kubeconfig_;
  std::unique_ptr<Subprocess> node_;
  int metrics_port_ = 0;
};

TEST_F(NodeReconcileTest, KubeletWipeIsRepublishedAndNotReadyInBetween) {
  StartReady();
  ASSERT_EQ(Devices(), 8u);
  const int64_t generation = Slices()[0]["spec"]["pool"]["generation"];

  // While the API server refuses new slices, the wiped pool stays empty: not ready.
  api_.InjectFault({.kind = sim::FaultRule::Kind::kStatus,
                    .verb = "create",
                    .resource = "resourceslices",
                    .times = -1,
                    .code = 500});
  Wipe();
  ASSERT_TRUE(Eventually([&] { return Readyz() == 503; })) << node_->Output();
  EXPECT_TRUE(Slices().empty());
  EXPECT_GE(Metric("dralens_slices_drift_total", {"kind=\"deleted\""}), 1);
  // The pass that tries to repair it fails (after the client's own retries).
  ASSERT_TRUE(
      Eventually([&] { return Metric("dralens_slices_syncs_total", {"result=\"error\""}) >= 1; }));
  EXPECT_EQ(Readyz(), 503);
  // The API server recovers: the backoff retries, the pool is back at a higher generation.
  api_.ClearFaults();
  ASSERT_TRUE(Eventually([&] { return Devices() == 8 && Readyz() == 200; })) << node_->Output();
  EXPECT_GT(Slices()[0]["spec"]["pool"]["generation"].get<int64_t>(), generation);

  // A plain wipe, as a kubelet restart does: the watch sees it and the pool is republished
  // without waiting for any timer (the periodic pass is minutes away). The time from the wipe
  // to the republish, from the binary's own log timestamps, is printed for the record.
  const size_t log_from = node_->Output().size();
  const double changed = Metric("dralens_slices_syncs_total", {"result=\"changed\""});
  const absl::Time wiped = absl::Now();
  Wipe();
  ASSERT_TRUE(Eventually([&] { return Devices() == 8; })) << node_->Output();
  ASSERT_TRUE(Eventually([&] { return Readyz() == 200; }));
  EXPECT_EQ(Metric("dralens_slices_syncs_total", {"result=\"changed\""}), changed + 1);
  ASSERT_TRUE(node_->WaitForOutput("slices published", absl::Seconds(5)));
  std::optional<absl::Time> detected = LogTime(node_->Output(), log_from, "slice drift");
  std::optional<absl::Time> published = LogTime(node_->Output(), log_from, "slices published");
  ASSERT_TRUE(detected.has_value() && published.has_value()) << node_->Output().substr(log_from);
  EXPECT_LE(*detected, *published);
  const absl::Duration republish = *published - wiped;
  RecordProperty("wipe_to_republish_ms", absl::StrCat(absl::ToInt64Milliseconds(republish)));
  std::printf("wipe to republish: %s (drift seen after %s)\n",
              absl::FormatDuration(republish).c_str(),
              absl::FormatDuration(*detected - wiped).c_str());
}

TEST_F(NodeReconcileTest, ARegistrationByTheKubeletTriggersACheck) {
  StartReady();
  auto passes = [&] {
    return Metric("dralens_slices_syncs_total", {"result=\"unchanged\""}) +
           Metric("dralens_slices_syncs_total", {"result=\"changed\""});
  };
  const double before = passes();
  // A restarted kubelet registers the plugin again; nothing else changed on the server.
  Register();
  ASSERT_TRUE(Eventually([&] { return passes() > before; })) << node_->Output();
  EXPECT_EQ(Readyz(), 200);
}

TEST_F(NodeReconcileTest, StartRemovesOnlyOurOwnTempFiles) {
  fs::create_directories(DriverDir());
  fs::create_directories(CdiRoot());
  const std::vector<std::string> ours = {
      DriverDir() + "/.checkpoint.json.tmp-a1B2c3",
      CdiRoot() + "/.k8s.gpu.dralens.dev-claim_9d1e.json.tmp-x9Y8z7"};
  const std::vector<std::string> foreign = {CdiRoot() + "/.nvidia.yaml.tmp-abcdef",
                                            CdiRoot() + "/vendor.json", DriverDir() + "/notes.txt"};
  for (const std::string& path : ours) {
    std::ofstream(path) << "{\"partial";
  }
  for (const std::string& path : foreign) {
    std::ofstream(path) << "keep";
  }
  StartNode();
  for (const std::string& path : ours) {
    EXPECT_FALSE(fs::exists(path)) << path;
  }
  for (const std::string& path : foreign) {
    EXPECT_TRUE(fs::exists(path)) << path;
  }
  EXPECT_EQ(Metric("dralens_node_temp_files_removed_total", {"location=\"plugin_dir\""}), 1);
  EXPECT_EQ(Metric("dralens_node_temp_files_removed_total", {"location=\"cdi_root\""}), 1);
  EXPECT_NE(node_->Output().find("removed a temp file left by an interrupted write"),
            std::string::npos);
}

TEST_F(NodeReconcileTest, OrphansAreReportedAndUnpreparedOnlyWhenAskedTo) {
  StartReady();
  auto kept = Claim("kept", "gpu-0");
  auto gone = Claim("gone", "gpu-1");
  ASSERT_EQ(Prepare(kept), "");
  ASSERT_EQ(Prepare(gone), "");
  // Killed, and meanwhile the claim is deleted: nobody will ask for its unprepare.
  EXPECT_EQ(node_->Stop(SIGKILL, absl::Seconds(10)), 128 + SIGKILL);
  ASSERT_TRUE(client_->Delete(k8s::kResourceClaims, kNs, "gone", {}).ok());

  // Found at start and reported; not touched without the option.
  StartNode();
  ASSERT_TRUE(Eventually([&] {
    return Metric("dralens_node_orphaned_claims", {"reason=\"gone\""}) == 1;
  })) << node_->Output();
  EXPECT_EQ(Metric("dralens_node_orphaned_claims", {"reason=\"replaced\""}), 0);
  EXPECT_EQ(Metric("dralens_node_orphaned_claim_age_seconds", {"uid=\"" + gone.second + "\""}), 0);
  EXPECT_EQ(Metric("dralens_node_orphaned_claim_age_seconds", {"uid=\"" + kept.second + "\""}), -1);
  EXPECT_TRUE(fs::exists(CdiSpec(gone.second)));
  EXPECT_EQ(node_->Stop(SIGTERM, absl::Seconds(15)), 0);

  // With --unprepare-orphans-after, released through the kubelet's unprepare path.
  StartNode({"--orphan-check-interval=1s", "--unprepare-orphans-after=1s"});
  ASSERT_TRUE(Eventually([&] {
    return Metric("dralens_node_orphans_unprepared_total", {"result=\"ok\""}) == 1;
  })) << node_->Output();
  EXPECT_FALSE(fs::exists(CdiSpec(gone.second)));
  EXPECT_TRUE(fs::exists(CdiSpec(kept.second)));
  EXPECT_EQ(Metric("dralens_node_orphaned_claims", {"reason=\"gone\""}), 0);
  EXPECT_EQ(Metric("dralens_node_orphaned_claim_age_seconds", {"uid=\"" + gone.second + "\""}), -1);
  EXPECT_NE(node_->Output().find("orphaned claim unprepared"), std::string::npos);
  // Its device is free again.
  auto next = Claim("next", "gpu-1");
  EXPECT_EQ(Prepare(next), "");
}

TEST_F(NodeReconcileTest, SharingOfRestoredClaimsIsAppliedAgainAfterAKill) {
  StartReady();
  const json time_slicing = {
      {"apiVersion", "resource.dralens.dev/v1beta1"},
      {"kind", "GpuConfig"},
      {"sharing", {{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", "Long"}}}}}};
  const json mps = {
      {"apiVersion", "resource.dralens.dev/v1beta1"},
      {"kind", "GpuConfig"},
      {"sharing", {{"strategy", "MPS"}, {"mpsConfig", {{"defaultActiveThreadPercentage", 50}}}}}};
  ASSERT_EQ(Prepare(Claim("ts", "gpu-2", time_slicing)), "");
  ASSERT_EQ(Prepare(Claim("mps", "gpu-3", mps)), "");
  EXPECT_EQ(node_->Stop(SIGKILL, absl::Seconds(10)), 128 + SIGKILL);

  // The new process's GPUs and daemons start from nothing: the settings are applied again.
  StartNode();
  EXPECT_EQ(
      Metric("dralens_sharing_restores_total", {"strategy=\"time_slicing\"", "result=\"ok\""}), 1);
  EXPECT_EQ(Metric("dralens_sharing_restores_total", {"strategy=\"mps\"", "result=\"ok\""}), 1);
  EXPECT_EQ(Metric("dralens_sharing_restores_total", {"result=\"error\""}), 0);
}

}  // namespace
}  // namespace dralens
