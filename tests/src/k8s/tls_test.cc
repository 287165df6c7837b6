// HTTPS: a test CA generated at test time, bearer token and client certificate auth, and
// rejection of servers the configured CA did not sign.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/synchronization/notification.h"
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

  // An HTTPS server that requires a client certificate signed by the test CA. A GET with
  // ?watch=true is a watch of kWatchEvents Node events (see WatchEvent), written in pieces that
  // cut lines and TLS records anywhere; it then stays open until `release_` or the end of the
  // test. Other GETs answer one Node.
  void StartServer(bool require_client_cert, bool other_host = false) {
    server_ = std::make_unique<LocalServer<httplib::SSLServer>>(
        (other_host ? pki_->other_host_crt : pki_->server_crt).c_str(),
        (other_host ? pki_->other_host_key : pki_->server_key).c_str(),
        require_client_cert ? pki_->ca_crt.c_str() : nullptr);
    ASSERT_TRUE(server_->server().is_valid());
    std::shared_ptr<absl::Notification> release = release_;
    const int events = watch_events_;
    server_->server().Get(
        ".*", [release, events](const httplib::Request& req, httplib::Response& res) {
          if (req.get_param_value("watch") == "true") {
            res.set_chunked_content_provider(
                "application/json", [release, events](size_t, httplib::DataSink& sink) {
                  std::string all;
                  for (int i = 0; i < events; ++i) {
                    all += WatchEvent(i);
                  }
                  for (size_t at = 0; at < all.size(); at += 7919) {
                    sink.write(all.data() + at, std::min<size_t>(7919, all.size() - at));
                  }
                  release->WaitForNotificationWithTimeout(absl::Seconds(20));
                  sink.done();
                  return true;
                });
            return;
          }
          nlohmann::json body = {{"kind", "Node"},
                                 {"metadata", {{"name", "n1"}}},
                                 {"authorization", req.get_header_value("Authorization")}};
          res.set_content(body.dump(), "application/json");
        });
    server_->Start();
  }
  void TearDown() override { release_->Notify(); }

  // Event i: a Node whose name is its number, padded to between 100 bytes and 9 KB.
  static std::string WatchEvent(int i) {
    nlohmann::json event = {
        {"type", "ADDED"},
        {"object",
         {{"metadata", {{"name", absl::StrCat(i)}, {"resourceVersion", absl::StrCat(i + 1)}}},
          {"pad", std::string(100 + (i * 7717) % 9000, 'x')}}}};
    return event.dump() + "\n";
  }

  // Watches nodes until `want` events came (then ends the watch); returns its status and the
  // events' names, in order.
  static absl::Status WatchNodes(const RestConfig& config, int want,
                                 std::vector<std::string>& names) {
    RestClientOptions options;
    options.retry.max_attempts = 1;
    auto client = RestClient::FromConfig(config, options);
    if (!client.ok()) {
      return client.status();
    }
    return (*client)->Watch(
        kNodes, "", {},
        [&](const k8s::WatchEvent& e) {
          names.push_back(e.object["metadata"]["name"].get<std::string>());
          return static_cast<int>(names.size()) < want;
        },
        nullptr);
  }

  // A watch with `config` gets the server's first three events.
  static void ExpectWatchDelivers(const RestConfig& config) {
    std::vector<std::string> names;
    absl::Status status = WatchNodes(config, 3, names);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(names.size(), 3u);
  }

  // A watch with `config` is refused before any event, as unavailable, for `why`.
  static void ExpectWatchRefused(const RestConfig& config, const std::string& why) {
    std::vector<std::string> names;
    absl::Status status = WatchNodes(config, 3, names);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_THAT(status.message(), HasSubstr(why));
    EXPECT_TRUE(names.empty());
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
  int watch_events_ = 3;
  std::shared_ptr<absl::Notification> release_ = std::make_shared<absl::Notification>();
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

// A burst of events far larger than one read or one TLS record, in pieces that cut both: every
// event arrives, whole and in order, with the client certificate presented.
TEST_F(TlsTest, WatchDeliversABurstWhole) {
  watch_events_ = 600;
  StartServer(true);
  RestConfig config = BaseConfig();
  config.certificate_authority_file = pki_->ca_crt;
  config.client_certificate_file = pki_->client_crt;
  config.client_key_file = pki_->client_key;
  std::vector<std::string> names;
  absl::Status status = WatchNodes(config, 600, names);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(names.size(), 600u);
  for (int i = 0; i < 600; ++i) {
    ASSERT_EQ(names[i], absl::StrCat(i));
  }
}

TEST_F(TlsTest, WatchByHostNameChecksTheNameTheCertificateCarries) {
  StartServer(false);
  RestConfig config = BaseConfig();
  config.server = absl::StrCat("https://localhost:", server_->port());
  config.certificate_authority_file = pki_->ca_crt;
  ExpectWatchDelivers(config);
}

TEST_F(TlsTest, WatchRejectsAServerTheCaDidNotSign) {
  StartServer(false);
  RestConfig config = BaseConfig();
  config.certificate_authority_file = pki_->other_ca_crt;
  ExpectWatchRefused(config, "not trusted");
}

// The CA signed it, but for another host: refused by every verb.
TEST_F(TlsTest, ACertificateForAnotherHostIsRefused) {
  StartServer(false, /*other_host=*/true);
  RestConfig config = BaseConfig();
  config.certificate_authority_file = pki_->ca_crt;
  ExpectWatchRefused(config, "does not match the host");
  absl::StatusOr<nlohmann::json> node = GetNode(config);
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kUnavailable);

  // insecure-skip-tls-verify checks neither.
  config.certificate_authority_file.clear();
  config.insecure_skip_tls_verify = true;
  ExpectWatchDelivers(config);
}

TEST_F(TlsTest, StopEndsAWatchBlockedOnTls) {
  StartServer(false);
  RestConfig config = BaseConfig();
  config.certificate_authority_file = pki_->ca_crt;
  RestClientOptions options;
  options.retry.max_attempts = 1;
  auto client = RestClient::FromConfig(config, options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::Notification all;
  int events = 0;
  WatchStream stream(**client, kNodes, "", {}, [&](const k8s::WatchEvent&) {
    if (++events == 3) {
      all.Notify();
    }
    return true;
  });
  ASSERT_TRUE(all.WaitForNotificationWithTimeout(absl::Seconds(10)));
  const absl::Time start = absl::Now();
  stream.Stop();  // the server holds the stream open: the read is blocked
  EXPECT_TRUE(stream.Wait().ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
}

}  // namespace
}  // namespace dralens::k8s
