// The metrics endpoint's optional protection: HTTPS with a certificate the client verifies, and
// a bearer token on /metrics and /debug (rotatable through its file), while the probes stay
// open. Misconfiguration is an error at start, not a silently open endpoint.
#include <httplib.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "exporter/http/metrics_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace dralens::exporter {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class MetricsSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dralens-msec-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    prometheus::BuildCounter()
        .Name("dralens_test_total")
        .Help("A test counter.")
        .Register(*registry_)
        .Add({})
        .Increment();
    server_ = std::make_unique<MetricsServer>(registry_, [] { return absl::OkStatus(); });
    server_->AddJsonEndpoint("/debug/claims", [] { return nlohmann::json{{"claims", 0}}; });
    server_->AddJsonPrefixEndpoint("/debug/claims/", [](const std::string& rest) {
      return std::optional<nlohmann::json>(nlohmann::json{{"claim", rest}});
    });
  }
  void TearDown() override {
    server_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  // A self-signed certificate for 127.0.0.1, made with the openssl tool.
  void MakeCertificate() {
    cert_ = (dir_ / "tls.crt").string();
    key_ = (dir_ / "tls.key").string();
    const std::string cmd = absl::StrCat(
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
        "-addext subjectAltName=IP:127.0.0.1 -keyout ",
        key_, " -out ", cert_, " >/dev/null 2>&1");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }

  fs::path dir_;
  std::string cert_;
  std::string key_;
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  std::unique_ptr<MetricsServer> server_;
};

TEST_F(MetricsSecurityTest, BearerTokenGuardsMetricsAndDebugButNotProbes) {
  const std::string token_file = Write("token", "s3cret-token\n");
  ASSERT_TRUE(server_->Start("127.0.0.1:0", {.bearer_token_file = token_file}).ok());
  httplib::Client c("127.0.0.1", server_->port());

  auto anonymous = c.Get("/metrics");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_EQ(anonymous->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_THAT(anonymous->body, ::testing::Not(HasSubstr("dralens_test_total")));
  EXPECT_EQ(c.Get("/debug/claims")->status, 401);
  EXPECT_EQ(c.Get("/debug/claims/team/train")->status, 401);
  EXPECT_EQ(c.Get("/metrics", {{"Authorization", "Bearer wrong"}})->status, 401);
  EXPECT_EQ(c.Get("/metrics", {{"Authorization", "Basic czNjcmV0LXRva2Vu"}})->status, 401);

  auto authorized = c.Get("/metrics", {{"Authorization", "Bearer s3cret-token"}});
  ASSERT_TRUE(authorized);
  EXPECT_EQ(authorized->status, 200);
  EXPECT_THAT(authorized->body, HasSubstr("dralens_test_total 1"));
  EXPECT_EQ(c.Get("/debug/claims", {{"Authorization", "Bearer s3cret-token"}})->status, 200);
  EXPECT_EQ(c.Get("/debug/claims/team/train", {{"Authorization", "Bearer s3cret-token"}})->status,
            200);
  // Probes never need the token.
  EXPECT_EQ(c.Get("/healthz")->status, 200);
  EXPECT_EQ(c.Get("/readyz")->status, 200);

  // A rotated token (a Secret update) works without a restart; the old one stops working.
  Write("token", "rotated-token\n");
  EXPECT_EQ(c.Get("/metrics", {{"Authorization", "Bearer rotated-token"}})->status, 200);
  EXPECT_EQ(c.Get("/metrics", {{"Authorization", "Bearer s3cret-token"}})->status, 401);
}

TEST_F(MetricsSecurityTest, HttpsWithAVerifiedCertificate) {
  MakeCertificate();
  ASSERT_TRUE(server_->Start("127.0.0.1:0", {.tls_cert_file = cert_, .tls_key_file = key_}).ok());
  httplib::SSLClient tls("127.0.0.1", server_->port());
  tls.set_ca_cert_path(cert_.c_str());
  tls.enable_server_certificate_verification(true);
  auto res = tls.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->body, HasSubstr("dralens_test_total 1"));
  // Plain HTTP gets no answer from a TLS port.
  httplib::Client plain("127.0.0.1", server_->port());
  plain.set_read_timeout(2, 0);
  auto clear = plain.Get("/metrics");
  EXPECT_TRUE(!clear || clear->status != 200);
}

TEST_F(MetricsSecurityTest, MisconfigurationIsAnErrorAtStart) {
  MakeCertificate();
  absl::Status half = server_->Start("127.0.0.1:0", {.tls_cert_file = cert_});
  EXPECT_THAT(std::string(half.message()), HasSubstr("go together"));
  absl::Status bad = server_->Start("127.0.0.1:0", {.tls_cert_file = cert_, .tls_key_file = cert_});
  EXPECT_THAT(std::string(bad.message()), HasSubstr("cannot load the TLS certificate"));
  absl::Status missing =
      server_->Start("127.0.0.1:0", {.bearer_token_file = (dir_ / "nope").string()});
  EXPECT_THAT(std::string(missing.message()), HasSubstr("cannot be read"));
  absl::Status empty = server_->Start("127.0.0.1:0", {.bearer_token_file = Write("empty", "\n")});
  EXPECT_THAT(std::string(empty.message()), HasSubstr("is empty"));
}

}  // namespace
}  // namespace dralens::exporter
