#include "src/app/prometheus_child.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::app {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/dralens-prom-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string Write(const std::string& rel, const std::string& text) const {
    const std::string p = path_ + "/" + rel;
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream(p) << text;
    return p;
  }

 private:
  std::string path_;
};

TEST(PrometheusConfigTest, ScrapesBothJobsWithTheClusterLabelAndLoadsTheRules) {
  PrometheusConfigOptions options;
  options.scrape_interval = absl::Seconds(2);
  options.rules_file = "/src/alerts/dralens.rules.yaml";
  options.cluster_target = "127.0.0.1:9477";
  options.node_targets = {"127.0.0.1:9478", "127.0.0.1:9479"};
  const std::string yaml = PrometheusConfigYaml(options);
  EXPECT_THAT(yaml, HasSubstr("  scrape_interval: 2s\n  scrape_timeout: 2s\n"
                              "  evaluation_interval: 2s\n"));
  EXPECT_THAT(yaml, HasSubstr("rule_files:\n  - \"/src/alerts/dralens.rules.yaml\"\n"));
  EXPECT_THAT(yaml, HasSubstr("  - job_name: \"dralens-cluster\"\n    static_configs:\n"
                              "      - targets:\n          - \"127.0.0.1:9477\"\n"
                              "        labels:\n          cluster: \"demo\"\n"));
  EXPECT_THAT(yaml, HasSubstr("  - job_name: \"dralens-node\"\n    static_configs:\n"
                              "      - targets:\n          - \"127.0.0.1:9478\"\n"
                              "          - \"127.0.0.1:9479\"\n"));
}

TEST(PrometheusConfigTest, SubSecondIntervalsAndNoRules) {
  PrometheusConfigOptions options;
  options.scrape_interval = absl::Milliseconds(1500);
  options.node_targets = {"10.0.0.1:1"};
  const std::string yaml = PrometheusConfigYaml(options);
  EXPECT_THAT(yaml, HasSubstr("scrape_interval: 1500ms"));
  EXPECT_THAT(yaml, Not(HasSubstr("rule_files")));
  EXPECT_THAT(yaml, Not(HasSubstr("dralens-cluster")));
  EXPECT_THAT(yaml, Not(HasSubstr("dcgm-exporter")));
}

TEST(PrometheusConfigTest, DcgmExportersAreTheirOwnJob) {
  PrometheusConfigOptions options;
  options.node_targets = {"127.0.0.1:9478"};
  options.dcgm_targets = {"127.0.0.1:9400"};
  const std::string yaml = PrometheusConfigYaml(options);
  EXPECT_THAT(yaml, HasSubstr("  - job_name: \"dcgm-exporter\"\n    static_configs:\n"
                              "      - targets:\n          - \"127.0.0.1:9400\"\n"));
}

TEST(FindAlertRulesTest, FlagWinsThenInstalledThenSourceTree) {
  TempDir dir;
  const std::string source = dir.path() + "/src";
  const std::string exe_dir = dir.path() + "/prefix/bin";
  std::filesystem::create_directories(exe_dir);
  const std::string in_source = dir.Write("src/alerts/dralens.rules.yaml", "groups: []\n");

  auto found = FindAlertRules("", exe_dir, source);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, std::filesystem::weakly_canonical(in_source).string());

  const std::string installed =
      dir.Write("prefix/share/dralens/alerts/dralens.rules.yaml", "groups: []\n");
  found = FindAlertRules("", exe_dir, source);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, std::filesystem::weakly_canonical(installed).string());

  const std::string own = dir.Write("own.yaml", "groups: []\n");
  found = FindAlertRules(own, exe_dir, source);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, own);
}

TEST(FindAlertRulesTest, ErrorsNameThePlacesAndTheFlag) {
  TempDir dir;
  auto found = FindAlertRules(dir.path() + "/missing.yaml", "", "");
  ASSERT_FALSE(found.ok());
  EXPECT_THAT(std::string(found.status().message()),
              HasSubstr("--prometheus-rules: \"" + dir.path() +
                        "/missing.yaml\" is not a "
                        "readable file"));

  found = FindAlertRules("", dir.path() + "/bin", dir.path() + "/src");
  ASSERT_FALSE(found.ok());
  const std::string message(found.status().message());
  EXPECT_THAT(message, HasSubstr(dir.path() + "/bin/../share/dralens/alerts/dralens.rules.yaml"));
  EXPECT_THAT(message, HasSubstr(dir.path() + "/src/alerts/dralens.rules.yaml"));
  EXPECT_THAT(message, HasSubstr("pass --prometheus-rules=<file>"));
}

TEST(ScrapeTargetTest, WildcardHostsBecomeLoopback) {
  EXPECT_EQ(ScrapeTarget("0.0.0.0", 9477), "127.0.0.1:9477");
  EXPECT_EQ(ScrapeTarget("", 1), "127.0.0.1:1");
  EXPECT_EQ(ScrapeTarget("::", 2), "127.0.0.1:2");
  EXPECT_EQ(ScrapeTarget("10.1.2.3", 3), "10.1.2.3:3");
}

TEST(PrometheusChildTest, MissingBinaryIsAClearError) {
  TempDir dir;
  PrometheusOptions options;
  options.binary = dir.path() + "/no-prometheus";
  options.dir = dir.path();
  auto child = PrometheusChild::Start(options);
  ASSERT_FALSE(child.ok());
  EXPECT_THAT(std::string(child.status().message()),
              HasSubstr(options.binary + " is not an executable"));
}

TEST(PrometheusChildTest, EarlyExitQuotesTheLog) {
  TempDir dir;
  // A stand-in that fails as Prometheus does on a bad flag: a message, then exit code 1.
  const std::string fake = dir.Write("fake-prometheus",
                                     "#!/bin/sh\necho \"bad flag $1\" >&2\n"
                                     "exit 1\n");
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  PrometheusOptions options;
  options.binary = fake;
  options.listen_address = "127.0.0.1:0";
  options.dir = dir.path();
  auto child = PrometheusChild::Start(options);
  ASSERT_FALSE(child.ok());
  const std::string message(child.status().message());
  EXPECT_THAT(message, HasSubstr("Prometheus exited at start (exit code 1)"));
  EXPECT_THAT(message, HasSubstr("bad flag --config.file=" + dir.path() + "/prometheus.yml"));
}

}  // namespace
}  // namespace dralens::app
