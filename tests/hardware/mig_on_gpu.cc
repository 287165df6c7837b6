// mig_on_gpu: the node role on a real GPU, driven as the kubelet drives it.
//
// Not a test of the suite: it needs an NVIDIA GPU (Hopper or later for the MIG steps) and
// changes its MIG mode, so it only runs when asked, on a machine whose GPU may be used. It starts
// an embedded API server, then `dralens node --device-source=nvml --dynamic-mig`, registers the
// plugin as the kubelet would, and through the real dra.sock:
//   1. prepares and unprepares a claim on the first full GPU;
//   2. prepares a claim on its first 1g placement (dralens creates the MIG instance), shows what
//      nvidia-smi then sees, and unprepares it (dralens destroys the instance);
//   3. prepares and unprepares the full GPU again.
// It prints each answer, the CDI specs and `nvidia-smi` after each step. The caller checks the
// GPU's MIG mode before and after (tests/hardware/run-on-gpu.sh restores it if needed).
//
//   mig_on_gpu --dralens=build/dralens
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "driver/proto/dra/v1/api.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "src/sim/kubelet.h"
#include "tests/integration/subprocess.h"
#include "tests/testing/kubeconfig.h"

namespace {

namespace fs = std::filesystem;
namespace dra = ::k8s::io::kubelet::pkg::apis::dra::v1;
using dralens::testing::Subprocess;
using nlohmann::json;

constexpr char kNode[] = "gpu-node";
constexpr char kDriver[] = "gpu.dralens.dev";
constexpr char kNs[] = "default";

std::string Flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i < argc; ++i) {
    if (absl::StartsWith(argv[i], "--" + name + "=")) {
      return std::string(argv[i]).substr(name.size() + 3);
    }
  }
  return fallback;
}

void Shell(const std::string& command) {
  std::printf("$ %s\n", command.c_str());
  std::fflush(stdout);
  if (std::system(command.c_str()) != 0) {
    std::printf("(exit status non-zero)\n");
  }
}

std::string Attribute(const json& device, const std::string& name) {
  const json& a = device.value("attributes", json::object());
  if (!a.contains(name)) {
    return "";
  }
  return a[name].value("string", "");
}

class Kubelet {
 public:
  Kubelet(dralens::k8s::RestClient& client, const std::string& socket)
      : client_(client),
        stub_(dra::DRAPlugin::NewStub(
            grpc::CreateChannel("unix://" + socket, grpc::InsecureChannelCredentials()))) {}

  // Creates a claim allocated to `device` of this node, as the scheduler would.
  bool Allocate(const std::string& name, const std::string& device) {
    json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"name", name}, {"namespace", kNs}}}};
    claim["spec"]["devices"]["requests"] =
        json::array({{{"name", "gpu"}, {"exactly", {{"deviceClassName", kDriver}}}}});
    auto created = client_.Create(dralens::k8s::kResourceClaims, kNs, claim);
    if (!created.ok()) {
      std::printf("create claim %s: %s\n", name.c_str(), created.status().ToString().c_str());
      return false;
    }
    json obj = *created;
    obj["status"]["allocation"]["devices"]["results"] = json::array(
        {{{"request", "gpu"}, {"driver", kDriver}, {"pool", kNode}, {"device", device}}});
    auto updated = client_.Update(dralens::k8s::kResourceClaims, kNs, obj, "status");
    if (!updated.ok()) {
      std::printf("allocate claim %s: %s\n", name.c_str(), updated.status().ToString().c_str());
      return false;
    }
    uids_[name] = obj["metadata"]["uid"].get<std::string>();
    return true;
  }

  bool Prepare(const std::string& name) {
    dra::NodePrepareResourcesRequest request;
    Fill(*request.add_claims(), name);
    dra::NodePrepareResourcesResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    grpc::Status s = stub_->NodePrepareResources(&context, request, &response);
    if (!s.ok()) {
      std::printf("prepare %s: gRPC %s\n", name.c_str(), s.error_message().c_str());
      return false;
    }
    const auto& entry = response.claims().at(uids_[name]);
    if (!entry.error().empty()) {
      std::printf("prepare %s: error: %s\n", name.c_str(), entry.error().c_str());
      return false;
    }
    for (const auto& d : entry.devices()) {
      std::printf("prepare %s: device %s, CDI %s\n", name.c_str(), d.device_name().c_str(),
                  absl::StrJoin(d.cdi_device_ids(), ",").c_str());
    }
    return true;
  }

  bool Unprepare(const std::string& name) {
    dra::NodeUnprepareResourcesRequest request;
    Fill(*request.add_claims(), name);
    dra::NodeUnprepareResourcesResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    grpc::Status s = stub_->NodeUnprepareResources(&context, request, &response);
    if (!s.ok()) {
      std::printf("unprepare %s: gRPC %s\n", name.c_str(), s.error_message().c_str());
      return false;
    }
    const std::string& error = response.claims().at(uids_[name]).error();
    std::printf("unprepare %s: %s\n", name.c_str(), error.empty() ? "ok" : error.c_str());
    return error.empty();
  }

 private:
  template <typename Claim>
  void Fill(Claim& claim, const std::string& name) {
    claim.set_namespace_(kNs);
    claim.set_name(name);
    claim.set_uid(uids_[name]);
  }

  dralens::k8s::RestClient& client_;
  std::unique_ptr<dra::DRAPlugin::Stub> stub_;
  std::map<std::string, std::string> uids_;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string dralens = Flag(argc, argv, "dralens", "build/dralens");
  std::string tmpl = (fs::temp_directory_path() / "dralens-gpu-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const fs::path root = tmpl;
  dralens::sim::ApiServer api;
  if (!api.Start().ok()) {
    std::fprintf(stderr, "cannot start the embedded API server\n");
    return 1;
  }
  dralens::k8s::RestConfig config;
  config.server = api.url();
  auto client = *dralens::k8s::RestClient::FromConfig(config);
  (void)client->Create(dralens::k8s::kNodes, "",
                       {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", kNode}}}});
  const std::string kubeconfig = (root / "kubeconfig").string();
  dralens::testing::WriteKubeconfig(kubeconfig, api.url());
  const std::string registry = (root / "registry").string();
  const std::string plugins = (root / "plugins").string();
  const std::string cdi = (root / "cdi").string();
  Subprocess node({dralens, "node", "--device-source=nvml", "--dynamic-mig",
                   "--metrics-address=127.0.0.1:0", "--kubelet-registry-dir=" + registry,
                   "--kubelet-plugins-dir=" + plugins, "--cdi-root=" + cdi},
                  {{"NODE_NAME", kNode}, {"KUBECONFIG", kubeconfig}});
  if (!node.WaitForOutput("kubelet plugin serving", absl::Seconds(60))) {
    std::printf("node did not start:\n%s\n", node.Output().c_str());
    return 1;
  }
  if (auto registered = dralens::sim::RegisterPlugin(registry + "/gpu.dralens.dev-reg.sock");
      !registered.ok()) {
    std::printf("registration failed: %s\n", registered.status().ToString().c_str());
    return 1;
  }

  std::string full;
  std::string mig;
  auto slices = client->List(dralens::k8s::kResourceSlices, "", {});
  if (!slices.ok()) {
    std::printf("list slices: %s\n", slices.status().ToString().c_str());
    return 1;
  }
  int devices = 0;
  for (const json& slice : slices->items) {
    for (const json& device : slice["spec"].value("devices", json::array())) {
      ++devices;
      const std::string type = Attribute(device, "type");
      if (type == "gpu" && full.empty()) {
        full = device["name"];
      }
      if (type == "mig" && mig.empty() && absl::StartsWith(Attribute(device, "profile"), "1g.") &&
          !absl::StrContains(Attribute(device, "profile"), "+")) {
        mig = device["name"];
      }
    }
  }
  std::printf("published %d devices; full GPU %s, first 1g placement %s\n", devices, full.c_str(),
              mig.empty() ? "(none)" : mig.c_str());
  Kubelet kubelet(*client, plugins + "/gpu.dralens.dev/dra.sock");
  int failures = 0;
  const std::string smi =
      "nvidia-smi --query-gpu=mig.mode.current,mig.mode.pending --format=csv,noheader; "
      "nvidia-smi mig -lgi 2>&1 | tail -n +1 | head -12; ls " +
      cdi;

  std::printf("\n== 1. the full GPU\n");
  if (full.empty() || !kubelet.Allocate("full-1", full) || !kubelet.Prepare("full-1")) {
    ++failures;
  }
  Shell(smi);
  failures += kubelet.Unprepare("full-1") ? 0 : 1;

  if (!mig.empty()) {
    std::printf("\n== 2. a MIG instance on %s\n", mig.c_str());
    if (!kubelet.Allocate("mig-1", mig) || !kubelet.Prepare("mig-1")) {
      ++failures;
    }
    Shell(smi + " && cat " + cdi + "/*.json | head -c 1500; echo; nvidia-smi -L");
    failures += kubelet.Unprepare("mig-1") ? 0 : 1;
    Shell(smi);
  }

  std::printf("\n== 3. the full GPU again\n");
  if (!kubelet.Allocate("full-2", full) || !kubelet.Prepare("full-2")) {
    ++failures;
  }
  failures += kubelet.Unprepare("full-2") ? 0 : 1;
  Shell(smi);

  const int code = node.Stop(SIGTERM, absl::Seconds(20));
  const std::string log = node.Output();
  std::printf(
      "\n== node exited with %d; its log from discovery on:\n%s\n", code,
      log.substr(std::min(log.size(), log.find("discovered devices") == std::string::npos
                                          ? size_t{0}
                                          : log.rfind('\n', log.find("discovered devices"))))
          .c_str());
  std::printf("%d step(s) failed\n", failures);
  return failures == 0 ? 0 : 1;
}
