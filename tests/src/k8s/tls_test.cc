// HTTPS: a test CA generated at test time, bearer token and client certificate auth, and
// rejection of servers the configured CA did not sign.
#include <string>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/k8s/rest_client.h"
#include "tests/src/k8s/test_util.h"

namespace dralens::k8s {
namespace {

using ::testing::HasSubstr;
using testing::LocalServer;
using testing::ReadFile;
using testing::TempDir;
using testing::TestPki;

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    pki_ = new TestPki(TestPki::Make(*dir_));
  }
  static void TearDownTestSuite() {
    delete pki_;
    delete dir_;
  }

  // An HTTPS server that requires a client certificate signed by the test CA.
  void StartServer(bool require_client_cert) {
    server_ = std::make_unique<LocalServer<httplib::SSLServer>>(
        pki_->server_crt.c_str(), pki_->server_key.c_str(),
        require_client_cert ? pki_->ca_crt.c_str() : nullptr);
    ASSERT_TRUE(server_->server().is_valid());
    server_->server().Get(".*", [](const httplib::Request& req, httplib::Response& res) {
      nlohmann::json body = {{"kind", "Node"},
                             {"metadata", {{"name", "n1"}}},
                             {"authorization", req.get_header_value("Authorization")}};
      res.set_content(body.dump(), "application/json");
    });
    server_->Start();
  }

  RestConfig BaseConfig() {
    RestConfig config;
    config.server = server_->url("https");
    config.request_timeout = absl::Seconds(5);
    return config;
  }

  static absl::StatusOr<nlohmann::json> GetNode(const RestConfig& config) {
    RestClientOptions options;
    options.retry.max_attempts = 1;
    auto client = RestClient::FromConfig(config, options);
    if (!client.ok()) {
      return client.status();
    }
    return (*client)->Get(kNodes, "", "n1");
  }

  static TempDir* dir_;
  static TestPki* pki_;
  std::unique_ptr<LocalServer<httplib::SSLServer>> server_;
};

TempDir* TlsTest::dir_ = nullptr;
TestPki* TlsTest::pki_ = nullptr;

TEST_F(TlsTest, CaFileAndBearerToken) {
  StartServer(false);
  RestConfig config = BaseConfig();
  config.certificate_authority_file = pki_->ca_crt;
  config.token = "tls-token";
  absl::StatusOr<nlohmann::json> node = GetNode(config);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ((*node)["authorization"], "Bearer tls-token");
}

TEST_F(TlsTest, InlineCaAndClientCertificateData) {
  StartServer(true);
  RestConfig config = BaseConfig();
  config.certificate_authority_data = ReadFile(pki_->ca_crt);
  config.client_certificate_data = ReadFile(pki_->client_crt);
  config.client_key_data = ReadFile(pki_->client_key);
  absl::StatusOr<nlohmann::json> node = GetNode(config);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ((*node)["metadata"]["name"], "n1");
}

TEST_F(TlsTest, ClientCertificateFilesFromKubeconfig) {
  StartServer(true);
  TempDir dir;
  testing::WriteFile(dir.Join("kubeconfig"),
                     absl::StrCat(R"(
current-context: c
clusters:
- name: k
  cluster:
    server: )",
                                  server_->url("https"), R"(
    certificate-authority-data: )",
                                  absl::Base64Escape(ReadFile(pki_->ca_crt)),
                                  R"(
users:
- name: u
  user:
    client-certificate: )",
                                  pki_->client_crt, R"(
    client-key: )",
                                  pki_->client_key, R"(
contexts:
- name: c
  context: {cluster: k, user: u}
)"));
  absl::StatusOr<RestConfig> config = LoadKubeconfig(dir.Join("kubeconfig"));
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<nlohmann::json> node = GetNode(*config);
  ASSERT_TRUE(node.ok()) << node.status();
}

TEST_F(TlsTest, ServerWithoutClientCertIsRefused) {
  StartServer(true);
  RestConfig config = BaseConfig();
  config.certificate_authority_file = pki_->ca_crt;
  absl::StatusOr<nlohmann::json> node = GetNode(config);
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(TlsTest, WrongCaIsRejected) {
  StartServer(false);
  RestConfig config = BaseConfig();
  config.certificate_authority_file = pki_->other_ca_crt;
  absl::StatusOr<nlohmann::json> node = GetNode(config);
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(node.status().message(), HasSubstr("not trusted"));
}

TEST_F(TlsTest, SystemStoreDoesNotTrustTestCaByDefault) {
  StartServer(false);
  absl::StatusOr<nlohmann::json> node = GetNode(BaseConfig());
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(TlsTest, InsecureSkipVerifyConnects) {
  StartServer(false);
  RestConfig config = BaseConfig();
  config.insecure_skip_tls_verify = true;
  absl::StatusOr<nlohmann::json> node = GetNode(config);
  ASSERT_TRUE(node.ok()) << node.status();
}

TEST_F(TlsTest, BadPemMaterialIsAClearErrorAtStartup) {
  StartServer(false);
  RestConfig config = BaseConfig();
  config.certificate_authority_data = "not a pem";
  absl::Status status = GetNode(config).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("certificate-authority-data"));

  config = BaseConfig();
  config.client_certificate_file = pki_->client_crt;
  config.client_key_file = pki_->server_key;  // does not match
  status = GetNode(config).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("does not match"));

  config = BaseConfig();
  config.certificate_authority_file = "/nonexistent/ca.crt";
  status = GetNode(config).status();
  EXPECT_THAT(status.message(), HasSubstr("/nonexistent/ca.crt"));
}

}  // namespace
}  // namespace dralens::k8s
