// Runs the real dralens binary: CLI errors, the demo's embedded API server with the real kubectl,
// and the node and cluster roles against it through a kubeconfig.
#include <httplib.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"

namespace dralens {
namespace {

using ::dralens::testing::RunToCompletion;
using ::dralens::testing::Subprocess;
using ::testing::HasSubstr;

const std::string kBinary = DRALENS_BINARY;

// The first number captured by `pattern` in `text`, or 0.
int Capture(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (std::regex_search(text, m, std::regex(pattern))) {
    return std::stoi(m[1]);
  }
  return 0;
}

// GET http://127.0.0.1:port/path, polled until it answers `want` or the deadline passes.
int PollStatus(int port, const std::string& path, int want) {
  int status = 0;
  for (int i = 0; i < 500 && status != want; ++i) {
    httplib::Client c("127.0.0.1", port);
    auto res = c.Get(path.c_str());
    status = res ? res->status : 0;
    if (status != want) {
      usleep(20000);
    }
  }
  return status;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/dralens-it-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf " + path_).c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(BinaryTest, HelpListsRolesAndFlags) {
  auto [code, out] = RunToCompletion({kBinary, "--help"});
  EXPECT_EQ(code, 0);
  EXPECT_THAT(out, HasSubstr("node"));
  EXPECT_THAT(out, HasSubstr("cluster"));
  EXPECT_THAT(out, HasSubstr("demo"));
  std::tie(code, out) = RunToCompletion({kBinary, "node", "--help"});
  EXPECT_EQ(code, 0);
  EXPECT_THAT(out, HasSubstr("--kubelet-plugins-dir (DRALENS_KUBELET_PLUGINS_DIR)"));
}

TEST(BinaryTest, UnknownFlagsBadValuesAndUnknownRolesExitWithUsageErrors) {
  auto [code, out] = RunToCompletion({kBinary, "node", "--gpu-count=3"});
  EXPECT_EQ(code, 2);
  EXPECT_THAT(out, HasSubstr("unknown flag --gpu-count"));
  std::tie(code, out) = RunToCompletion({kBinary, "node"}, {{"DRALENS_DEVICE_SOURCE", "rocm"}});
  EXPECT_EQ(code, 2);
  EXPECT_THAT(out, HasSubstr("DRALENS_DEVICE_SOURCE"));
  std::tie(code, out) = RunToCompletion({kBinary, "scheduler"});
  EXPECT_EQ(code, 2);
  EXPECT_THAT(out, HasSubstr("unknown role \"scheduler\""));
}

TEST(BinaryTest, NodeWithoutNodeNameFailsClearly) {
  auto [code, out] =
      RunToCompletion({kBinary, "node", "--kubeconfig=/nonexistent"}, {{"NODE_NAME", ""}});
  EXPECT_EQ(code, 2);  // an empty NODE_NAME is not a DNS subdomain
  std::tie(code, out) = RunToCompletion({kBinary, "node", "--metrics-address=127.0.0.1:0"});
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("--node-name (NODE_NAME) is required"));
}

TEST(BinaryTest, DemoServesKubectlAndTheNodeAndClusterRolesConnectThroughAKubeconfig) {
  TempDir dir;
  Subprocess demo(
      {kBinary, "demo", "--api-server-address=127.0.0.1:0", "--metrics-address=127.0.0.1:0"});
  ASSERT_TRUE(demo.WaitForOutput("Press Ctrl-C", absl::Seconds(20))) << demo.Output();
  const int api_port = Capture(demo.Output(), R"(API server:\s+http://127\.0\.0\.1:(\d+))");
  const int demo_metrics = Capture(demo.Output(), R"(metrics:\s+http://127\.0\.0\.1:(\d+))");
  ASSERT_GT(api_port, 0);
  ASSERT_GT(demo_metrics, 0);
  EXPECT_EQ(PollStatus(demo_metrics, "/readyz", 200), 200);

  // The real kubectl lists the simulated nodes.
  if (access("/usr/bin/kubectl", X_OK) == 0) {
    auto [code, out] =
        RunToCompletion({"/usr/bin/kubectl", "--server",
                         absl::StrCat("http://127.0.0.1:", api_port), "get", "nodes", "-o", "name"},
                        {{"HOME", dir.path()}, {"KUBECONFIG", ""}});
    EXPECT_EQ(code, 0) << out;
    EXPECT_THAT(out, HasSubstr("node/dgx-h100-0"));
    EXPECT_THAT(out, HasSubstr("node/a100-0"));
  }

  const std::string kubeconfig = dir.path() + "/kubeconfig";
  std::ofstream(kubeconfig) << "apiVersion: v1\nkind: Config\ncurrent-context: demo\n"
                               "clusters:\n- name: demo\n  cluster:\n    server: http://127.0.0.1:"
                            << api_port
                            << "\ncontexts:\n- name: demo\n  context:\n    cluster: demo\n"
                               "    user: demo\nusers:\n- name: demo\n  user: {}\n";

  // node with the default device source on a machine without an NVIDIA driver: a clear error
  // that names the library.
  auto [nvml_code, nvml_out] = RunToCompletion(
      {kBinary, "node", "--metrics-address=127.0.0.1:0",
       "--kubelet-registry-dir=" + dir.path() + "/nvml-reg",
       "--kubelet-plugins-dir=" + dir.path() + "/nvml-plugins",
       "--cdi-root=" + dir.path() + "/cdi"},
      {{"NODE_NAME", "dgx-h100-0"}, {"KUBECONFIG", kubeconfig}, {"LD_LIBRARY_PATH", ""}});
  if (access("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", F_OK) != 0) {
    EXPECT_EQ(nvml_code, 1);
    EXPECT_THAT(nvml_out, HasSubstr("libnvidia-ml.so.1"));
  }

  // node with simulated GPUs: healthy at once, not ready until the kubelet registers it (the
  // registration itself is covered in node_plugin_test.cc); SIGTERM ends it cleanly.
  Subprocess node(
      {kBinary, "node", "--metrics-address=127.0.0.1:0", "--device-source=simulated",
       "--kubelet-registry-dir=" + dir.path() + "/reg",
       "--kubelet-plugins-dir=" + dir.path() + "/plugins", "--cdi-root=" + dir.path() + "/cdi"},
      {{"NODE_NAME", "dgx-h100-0"}, {"KUBECONFIG", kubeconfig}});
  ASSERT_TRUE(node.WaitForOutput("kubelet plugin serving", absl::Seconds(20))) << node.Output();
  const int node_metrics = Capture(node.Output(), R"(serving metrics"? address=\S+ port=(\d+))");
  ASSERT_GT(node_metrics, 0);
  EXPECT_EQ(PollStatus(node_metrics, "/healthz", 200), 200);
  {
    httplib::Client c("127.0.0.1", node_metrics);
    auto res = c.Get("/readyz");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 503);
    EXPECT_THAT(res->body, HasSubstr("kubelet"));
    res = c.Get("/metrics");
    ASSERT_TRUE(res);
    EXPECT_THAT(
        res->body,
        HasSubstr(R"(dralens_kube_requests_total{code="200",resource="nodes",verb="get"})"));
  }
  EXPECT_EQ(node.Stop(SIGTERM, absl::Seconds(10)), 0) << node.Output();

  // node: a Node that does not exist is a clear failure, not a hang.
  auto [code, out] = RunToCompletion({kBinary, "node", "--metrics-address=127.0.0.1:0"},
                                     {{"NODE_NAME", "no-such-node"}, {"KUBECONFIG", kubeconfig}});
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("get node no-such-node"));

  // cluster: ready once its informers synced.
  Subprocess cluster(
      {kBinary, "cluster", "--metrics-address=127.0.0.1:0", "--kubeconfig=" + kubeconfig});
  ASSERT_TRUE(cluster.WaitForOutput("serving metrics", absl::Seconds(20))) << cluster.Output();
  const int cluster_metrics =
      Capture(cluster.Output(), R"(serving metrics"? address=\S+ port=(\d+))");
  EXPECT_EQ(PollStatus(cluster_metrics, "/readyz", 200), 200) << cluster.Output();
  EXPECT_EQ(cluster.Stop(SIGINT, absl::Seconds(10)), 0) << cluster.Output();
  EXPECT_THAT(cluster.Output(), HasSubstr("nodes=2"));

  EXPECT_EQ(demo.Stop(SIGINT, absl::Seconds(10)), 0) << demo.Output();
}

}  // namespace
}  // namespace dralens
