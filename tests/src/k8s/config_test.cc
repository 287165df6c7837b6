#include "src/k8s/config.h"

#include <stdlib.h>

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/src/k8s/test_util.h"

namespace dralens::k8s {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteFile;

constexpr char kTwoContexts[] = R"(
apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: dev-cluster
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority: pki/ca.crt
- name: local
  cluster:
    server: http://127.0.0.1:8080
    insecure-skip-tls-verify: true
users:
- name: dev-user
  user:
    token: secret-token
    client-certificate: pki/client.crt
    client-key: /abs/client.key
- name: file-user
  user:
    tokenFile: tokens/sa
contexts:
- name: dev
  context:
    cluster: dev-cluster
    user: dev-user
    namespace: gpu
- name: local
  context:
    cluster: local
    user: file-user
)";

TEST(KubeconfigTest, CurrentContextWithFilesResolvedAgainstKubeconfigDir) {
  TempDir dir;
  WriteFile(dir.Join("config"), kTwoContexts);
  absl::StatusOr<RestConfig> config = LoadKubeconfig(dir.Join("config"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://10.0.0.1:6443");
  EXPECT_EQ(config->certificate_authority_file, dir.Join("pki/ca.crt"));
  EXPECT_EQ(config->token, "secret-token");
  EXPECT_EQ(config->client_certificate_file, dir.Join("pki/client.crt"));
  EXPECT_EQ(config->client_key_file, "/abs/client.key");
  EXPECT_EQ(config->default_namespace, "gpu");
  EXPECT_FALSE(config->insecure_skip_tls_verify);
}

TEST(KubeconfigTest, ExplicitContextWins) {
  TempDir dir;
  WriteFile(dir.Join("config"), kTwoContexts);
  absl::StatusOr<RestConfig> config = LoadKubeconfig(dir.Join("config"), {.context = "local"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "http://127.0.0.1:8080");
  EXPECT_TRUE(config->insecure_skip_tls_verify);
  EXPECT_EQ(config->token_file, dir.Join("tokens/sa"));
  EXPECT_TRUE(config->token.empty());
  EXPECT_TRUE(config->default_namespace.empty());
}

TEST(KubeconfigTest, InlineBase64Data) {
  const std::string yaml = absl::StrCat(R"(
current-context: c
clusters:
- name: k
  cluster:
    server: https://example:443
    certificate-authority-data: )",
                                        absl::Base64Escape("CA PEM"), R"(
users:
- name: u
  user:
    client-certificate-data: )",
                                        absl::Base64Escape("CERT PEM"), R"(
    client-key-data: )",
                                        absl::Base64Escape("KEY PEM"), R"(
contexts:
- name: c
  context: {cluster: k, user: u}
)");
  absl::StatusOr<RestConfig> config = ParseKubeconfig(yaml, "/base", "inline");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->certificate_authority_data, "CA PEM");
  EXPECT_EQ(config->client_certificate_data, "CERT PEM");
  EXPECT_EQ(config->client_key_data, "KEY PEM");
  EXPECT_TRUE(config->certificate_authority_file.empty());
}

TEST(KubeconfigTest, BadBase64NamesFileAndKey) {
  TempDir dir;
  WriteFile(dir.Join("config"), R"(
current-context: c
clusters:
- name: k
  cluster:
    server: https://example:443
    certificate-authority-data: "!!!not base64!!!"
contexts:
- name: c
  context: {cluster: k}
)");
  absl::StatusOr<RestConfig> config = LoadKubeconfig(dir.Join("config"));
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr(dir.Join("config")));
  EXPECT_THAT(config.status().message(), HasSubstr("certificate-authority-data"));
  EXPECT_THAT(config.status().message(), HasSubstr("base64"));
}

TEST(KubeconfigTest, MissingCurrentContextIsAClearError) {
  absl::StatusOr<RestConfig> config = ParseKubeconfig(R"(
clusters:
- name: k
  cluster: {server: "https://x"}
contexts:
- name: c
  context: {cluster: k}
)",
                                                      "/", "/etc/kubeconfig");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("/etc/kubeconfig"));
  EXPECT_THAT(config.status().message(), HasSubstr("current-context"));
}

TEST(KubeconfigTest, UnknownContextClusterOrUserNamed) {
  constexpr char kYaml[] = R"(
current-context: c
clusters:
- name: k
  cluster: {server: "https://x"}
users: []
contexts:
- name: c
  context: {cluster: k, user: ghost}
- name: d
  context: {cluster: nowhere}
)";
  absl::StatusOr<RestConfig> config = ParseKubeconfig(kYaml, "/", "f");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("ghost"));
  EXPECT_THAT(config.status().message(), HasSubstr("users"));
  config = ParseKubeconfig(kYaml, "/", "f", {.context = "d"});
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("nowhere"));
  config = ParseKubeconfig(kYaml, "/", "f", {.context = "zzz"});
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("zzz"));
}

TEST(KubeconfigTest, RejectsBadServerAndBadYaml) {
  absl::StatusOr<RestConfig> config = ParseKubeconfig(R"(
current-context: c
clusters:
- name: k
  cluster: {server: "ftp://x"}
contexts:
- name: c
  context: {cluster: k}
)",
                                                      "/", "f");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("server"));
  config = ParseKubeconfig("{ this is: [not yaml", "/", "broken.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("broken.yaml"));
  config = ParseKubeconfig(R"(
current-context: c
clusters:
- name: k
  cluster: {server: "https://x", insecure-skip-tls-verify: maybe}
contexts:
- name: c
  context: {cluster: k}
)",
                           "/", "f");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("insecure-skip-tls-verify"));
}

TEST(KubeconfigTest, MissingFileNamesPath) {
  absl::StatusOr<RestConfig> config = LoadKubeconfig("/nonexistent/dralens/kubeconfig");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(config.status().message(), HasSubstr("/nonexistent/dralens/kubeconfig"));
}

class InClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  }
  void TearDown() override {
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
  }
};

TEST_F(InClusterTest, ReadsServiceAccountDirectory) {
  TempDir dir;
  WriteFile(dir.Join("token"), "tok-1\n");
  WriteFile(dir.Join("ca.crt"), "CA");
  WriteFile(dir.Join("namespace"), "dralens-system\n");
  absl::StatusOr<RestConfig> config = LoadInClusterConfig(dir.path());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->token_file, dir.Join("token"));
  EXPECT_EQ(config->certificate_authority_file, dir.Join("ca.crt"));
  EXPECT_EQ(config->default_namespace, "dralens-system");
  EXPECT_FALSE(config->insecure_skip_tls_verify);
}

TEST_F(InClusterTest, Ipv6HostIsBracketed) {
  TempDir dir;
  WriteFile(dir.Join("token"), "t");
  WriteFile(dir.Join("ca.crt"), "CA");
  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  absl::StatusOr<RestConfig> config = LoadInClusterConfig(dir.path());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://[fd00::1]:443");
}

TEST_F(InClusterTest, MissingEnvOrFilesAreClearErrors) {
  TempDir dir;
  absl::StatusOr<RestConfig> config = LoadInClusterConfig(dir.path());
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr(dir.Join("token")));
  unsetenv("KUBERNETES_SERVICE_HOST");
  config = LoadInClusterConfig(dir.path());
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("KUBERNETES_SERVICE_HOST"));
}

TEST_F(InClusterTest, TokenRotationIsPickedUp) {
  TempDir dir;
  WriteFile(dir.Join("token"), "tok-1\n");
  WriteFile(dir.Join("ca.crt"), "CA");
  absl::StatusOr<RestConfig> config = LoadInClusterConfig(dir.path());
  ASSERT_TRUE(config.ok()) << config.status();
  TokenSource tokens(*config);
  EXPECT_EQ(*tokens.Token(), "tok-1");
  // Kubelet rotates by writing a new file and swapping it in.
  WriteFile(dir.Join("token.new"), "tok-2-longer\n");
  ASSERT_EQ(rename(dir.Join("token.new").c_str(), dir.Join("token").c_str()), 0);
  EXPECT_EQ(*tokens.Token(), "tok-2-longer");
  // A briefly missing file keeps the last good token.
  ASSERT_EQ(unlink(dir.Join("token").c_str()), 0);
  EXPECT_EQ(*tokens.Token(), "tok-2-longer");
}

TEST(TokenSourceTest, StaticTokenWinsAndMissingFileFails) {
  RestConfig config;
  config.token = "static";
  config.token_file = "/nonexistent";
  EXPECT_EQ(*TokenSource(config).Token(), "static");
  config.token.clear();
  TokenSource from_file(config);
  EXPECT_FALSE(from_file.Token().ok());
  EXPECT_TRUE(from_file.configured());
  EXPECT_EQ(*TokenSource(RestConfig{}).Token(), "");
}

}  // namespace
}  // namespace dralens::k8s
