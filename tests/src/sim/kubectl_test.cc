// End to end: the real kubectl talks to the embedded API server.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "gtest/gtest.h"
#include "tests/src/sim/sim_test_util.h"

namespace dralens::sim::testing {
namespace {

constexpr char kKubectl[] = "/usr/bin/kubectl";

struct Output {
  int exit_code = -1;
  std::string text;  // stdout and stderr
};

class KubectlTest : public ServerTest {
 protected:
  void SetUp() override {
    if (access(kKubectl, X_OK) != 0) {
      GTEST_SKIP() << kKubectl << " is not installed";
    }
    ServerTest::SetUp();
    char tmpl[] = "/tmp/dralens-kubectl-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    home_ = tmpl;
  }
  void TearDown() override {
    if (server_) {
      ServerTest::TearDown();
    }
    if (!home_.empty()) {
      std::filesystem::remove_all(home_);
    }
  }

  // Runs kubectl with an empty HOME and no kubeconfig, against our server only.
  Output Kubectl(const std::string& args) {
    std::string cmd = "env -i HOME=" + home_ + " PATH=/usr/bin:/bin KUBECONFIG=" + home_ +
                      "/none " + kKubectl + " --server " + server_->url() +
                      " --request-timeout=10s " + args + " 2>&1";
    Output out;
    FILE* pipe = popen(cmd.c_str(), "r");
    if (pipe == nullptr) {
      return out;
    }
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) {
      out.text.append(buf.data(), n);
    }
    int status = pclose(pipe);
    out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return out;
  }

  void Seed() {
    ASSERT_EQ(http_->Post(kClasses, DeviceClass("gpu.dralens.dev")).status, 201);
    ASSERT_EQ(http_->Post(kSlices, Slice("node-a-gpu.dralens.dev-abcde")).status, 201);
    ASSERT_EQ(http_->Post(Claims("ml"), Claim("train-0")).status, 201);
  }

  std::string home_;
};

TEST_F(KubectlTest, GetResourceSlicesAndClaimsAcrossNamespaces) {
  Seed();
  Output out = Kubectl("get resourceslices,resourceclaims -A");
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_NE(out.text.find("node-a-gpu.dralens.dev-abcde"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("train-0"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("ml"), std::string::npos) << out.text;
}

TEST_F(KubectlTest, GetRaw) {
  Seed();
  Output out = Kubectl("get --raw /apis/resource.k8s.io/v1/resourceslices");
  ASSERT_EQ(out.exit_code, 0) << out.text;
  json list = json::parse(out.text, nullptr, false);
  ASSERT_FALSE(list.is_discarded()) << out.text;
  EXPECT_EQ(list["kind"], "ResourceSliceList");
  ASSERT_EQ(list["items"].size(), 1u);
  EXPECT_EQ(list["items"][0]["spec"]["driver"], "gpu.dralens.dev");
}

TEST_F(KubectlTest, GetDeviceClassesAsJson) {
  Seed();
  Output out = Kubectl("get deviceclasses -o json");
  ASSERT_EQ(out.exit_code, 0) << out.text;
  json list = json::parse(out.text, nullptr, false);
  ASSERT_FALSE(list.is_discarded()) << out.text;
  ASSERT_EQ(list["items"].size(), 1u);
  EXPECT_EQ(list["items"][0]["metadata"]["name"], "gpu.dralens.dev");
  EXPECT_EQ(list["items"][0]["kind"], "DeviceClass");
}

TEST_F(KubectlTest, GetSingleObjectAndNotFound) {
  Seed();
  Output out = Kubectl("get resourceclaim train-0 -n ml -o jsonpath={.metadata.name}");
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.text, "train-0");
  Output missing = Kubectl("get resourceclaim nope -n ml");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.text.find("not found"), std::string::npos) << missing.text;
  Output version = Kubectl("version -o json");
  EXPECT_NE(version.text.find("v1.34.0"), std::string::npos) << version.text;
}

TEST_F(KubectlTest, GetEventsAndDescribeShowWhatEventsV1Wrote) {
  Seed();
  Reply claim = http_->Get(Claims("ml") + "/train-0");
  ASSERT_EQ(claim.status, 200);
  json event = {{"metadata", {{"name", "train-0.1"}, {"namespace", "ml"}}},
                {"eventTime", "2026-11-28T08:00:00.000000Z"},
                {"reportingController", "dralens.dev/cluster"},
                {"reportingInstance", "replica-a"},
                {"action", "Allocate"},
                {"reason", "NoCapacity"},
                {"type", "Warning"},
                {"note", "request gpu: class gpu.dralens.dev: 8 devices; 0 free"},
                {"regarding",
                 {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"namespace", "ml"},
                  {"name", "train-0"},
                  {"uid", claim.body["metadata"]["uid"]}}}};
  ASSERT_EQ(http_->Post("/apis/events.k8s.io/v1/namespaces/ml/events", event).status, 201);

  Output events = Kubectl("get events -n ml");
  ASSERT_EQ(events.exit_code, 0) << events.text;
  for (const char* want : {"LAST SEEN", "REASON", "NoCapacity", "Warning", "resourceclaim/train-0",
                           "8 devices; 0 free"}) {
    EXPECT_NE(events.text.find(want), std::string::npos) << want << "\n" << events.text;
  }
  Output describe = Kubectl("describe resourceclaim train-0 -n ml");
  ASSERT_EQ(describe.exit_code, 0) << describe.text;
  EXPECT_NE(describe.text.find("NoCapacity"), std::string::npos) << describe.text;
  EXPECT_NE(describe.text.find("dralens.dev/cluster"), std::string::npos) << describe.text;
}

}  // namespace
}  // namespace dralens::sim::testing
