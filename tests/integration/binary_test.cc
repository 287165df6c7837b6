// Runs the real dralens binary: CLI errors, the demo's embedded API server with the real kubectl,
// and the node and cluster roles against it through a kubeconfig.
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
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
using ::testing::Not;

const std::string kBinary = DRALENS_BINARY;

// The first number captured by `pattern` in `text`, or 0.
int Capture(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (std::regex_search(text, m, std::regex(pattern))) {
    return std::stoi(m[1]);
  }
  return 0;
}

// The first text captured by `pattern` in `text`, or "".
std::string CaptureText(const std::string& text, const std::string& pattern) {
  std::smatch m;
  return std::regex_search(text, m, std::regex(pattern)) ? m[1].str() : "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
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
  // The banner is the first screen; the log goes to a file in the demo's directory.
  const std::string first_screen = demo.Output();
  EXPECT_THAT(first_screen.substr(0, first_screen.find("Press Ctrl-C")), Not(HasSubstr("ts=")))
      << first_screen;
  const std::string demo_log = CaptureText(first_screen, R"(log:\s+(/\S+/demo\.log))");
  ASSERT_FALSE(demo_log.empty()) << first_screen;
  EXPECT_THAT(ReadFile(demo_log), HasSubstr("kubelet stand-in registered the plugin"));
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
  // Ctrl-C removes the demo's directory, log included.
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(demo_log).parent_path()));
}

TEST(BinaryTest, DemoVerboseShowsEveryLineAndAFailedStartKeepsItsLog) {
  Subprocess verbose({kBinary, "demo", "-v", "--demo-nodes=1", "--api-server-address=127.0.0.1:0",
                      "--metrics-address=127.0.0.1:0"});
  ASSERT_TRUE(verbose.WaitForOutput("Press Ctrl-C", absl::Seconds(20))) << verbose.Output();
  EXPECT_THAT(verbose.Output(), HasSubstr("level=info component=demo msg=\"kubelet stand-in "
                                          "registered the plugin\" node=dgx-h100-0"));
  EXPECT_THAT(verbose.Output(), HasSubstr("every line also shows below"));
  EXPECT_EQ(verbose.Stop(SIGINT, absl::Seconds(10)), 0) << verbose.Output();

  // A port that is taken: exit 1, the error on the terminal names the log, which stays behind
  // alone in the demo's directory.
  const int taken = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(taken, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(taken, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(taken, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(taken, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  auto [code, out] = RunToCompletion(
      {kBinary, "demo", absl::StrCat("--api-server-address=127.0.0.1:", ntohs(addr.sin_port)),
       "--metrics-address=127.0.0.1:0"});
  close(taken);
  EXPECT_EQ(code, 1) << out;
  EXPECT_THAT(out, HasSubstr("start the embedded API server"));
  const std::string log = CaptureText(out, R"(log=(/\S+/demo\.log))");
  ASSERT_FALSE(log.empty()) << out;
  EXPECT_THAT(ReadFile(log), HasSubstr("step failed"));
  const std::filesystem::path dir = std::filesystem::path(log).parent_path();
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename(), "demo.log");
    ++entries;
  }
  EXPECT_EQ(entries, 1);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dralens
