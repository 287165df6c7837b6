#include "src/app/flags.h"

#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::app {
namespace {

using ::testing::HasSubstr;

class Env {
 public:
  Env() = default;
  explicit Env(std::initializer_list<std::pair<const std::string, std::string>> vars)
      : vars_(std::move(vars)) {}
  std::function<const char*(const char*)> Fn() const {
    return [this](const char* name) -> const char* {
      auto it = vars_.find(name);
      return it == vars_.end() ? nullptr : it->second.c_str();
    };
  }

 private:
  std::map<std::string, std::string> vars_;
};

TEST(FlagsTest, DefaultsApplyWhenNothingIsGiven) {
  Env env;
  auto v = ParseFlags(Role::kNode, {}, env.Fn());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->Get("driver-name"), "gpu.dralens.dev");
  EXPECT_EQ(v->Get("kubelet-registry-dir"), "/var/lib/kubelet/plugins_registry");
  EXPECT_EQ(v->Get("kubelet-plugins-dir"), "/var/lib/kubelet/plugins");
  EXPECT_EQ(v->Get("cdi-root"), "/var/run/cdi");
  EXPECT_EQ(v->Get("device-source"), "nvml");
  EXPECT_EQ(v->Source("cdi-root"), "default");
}

TEST(FlagsTest, EnvironmentTwinOverridesDefaultAndFlagOverridesEnvironment) {
  Env env({{"NODE_NAME", "node-a"}, {"DRALENS_CDI_ROOT", "/env/cdi"}, {"KUBECONFIG", "/k"}});
  auto v = ParseFlags(Role::kNode, {"--cdi-root=/flag/cdi"}, env.Fn());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->Get("node-name"), "node-a");
  EXPECT_EQ(v->Source("node-name"), "env");
  EXPECT_EQ(v->Get("kubeconfig"), "/k");
  EXPECT_EQ(v->Get("cdi-root"), "/flag/cdi");
  EXPECT_EQ(v->Source("cdi-root"), "flag");
}

TEST(FlagsTest, SeparateValueArgumentIsAccepted) {
  Env env;
  auto v = ParseFlags(Role::kNode, {"--node-name", "gpu-node-7"}, env.Fn());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->Get("node-name"), "gpu-node-7");
}

TEST(FlagsTest, UnknownFlagIsAnErrorThatNamesIt) {
  Env env;
  auto v = ParseFlags(Role::kNode, {"--node-nmae=x"}, env.Fn());
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("unknown flag --node-nmae"));
}

TEST(FlagsTest, FlagOfAnotherRoleIsRejected) {
  Env env;
  auto v = ParseFlags(Role::kCluster, {"--cdi-root=/x"}, env.Fn());
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("--cdi-root does not apply"));
}

TEST(FlagsTest, BadValuesNameTheFlagAndWhatIsAllowed) {
  Env env;
  auto v = ParseFlags(Role::kNode, {"--device-source=cuda"}, env.Fn());
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()),
              HasSubstr("invalid value \"cuda\" for --device-source: must be one of nvml, "
                        "simulated"));

  v = ParseFlags(Role::kNode, {"--metrics-address=localhost"}, env.Fn());
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("--metrics-address"));

  v = ParseFlags(Role::kNode, {"--cdi-root=relative/dir"}, env.Fn());
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("absolute path"));

  v = ParseFlags(Role::kNode, {"--node-name=Node_A"}, env.Fn());
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("DNS subdomain"));

  for (const char* bad : {"--stranded-series-retention=15", "--stranded-series-retention=0s"}) {
    v = ParseFlags(Role::kCluster, {bad}, env.Fn());
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_THAT(std::string(v.status().message()),
                HasSubstr("--stranded-series-retention: must be a positive duration"))
        << bad;
  }
  EXPECT_TRUE(ParseFlags(Role::kCluster, {"--stranded-series-retention=1h"}, env.Fn()).ok());
}

TEST(FlagsTest, DemoPrometheusFaultAndOtlpFlags) {
  Env env({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}});
  auto v = ParseFlags(Role::kDemo, {"--with-prometheus", "--demo-fault-after=0s"}, env.Fn());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->GetBool("with-prometheus"));
  EXPECT_EQ(v->Get("prometheus-address"), "127.0.0.1:9090");
  EXPECT_EQ(v->Get("prometheus-binary"), "/usr/bin/prometheus");
  EXPECT_EQ(v->Get("prometheus-rules"), "");
  EXPECT_EQ(v->Get("demo-fault-after"), "0s");
  // The OTLP endpoint's twin is the standard variable itself.
  EXPECT_EQ(v->Get("otlp-endpoint"), "http://collector:4318");
  EXPECT_EQ(v->Source("otlp-endpoint"), "env");

  v = ParseFlags(Role::kDemo, {"--demo-fault-after=-1s"}, env.Fn());
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("--demo-fault-after"));
  v = ParseFlags(Role::kDemo, {"--otlp-endpoint=collector:4318"}, env.Fn());
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()),
              HasSubstr("--otlp-endpoint: must be an http:// or https:// URL"));
  v = ParseFlags(Role::kDemo, {"--prometheus-binary=prometheus"}, env.Fn());
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("absolute path"));
  // Only the demo starts Prometheus.
  EXPECT_FALSE(ParseFlags(Role::kCluster, {"--with-prometheus"}, Env().Fn()).ok());
}

TEST(FlagsTest, DemoVerboseHasAShortFormOnlyTheDemoAccepts) {
  auto v = ParseFlags(Role::kDemo, {}, Env().Fn());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE(v->GetBool("verbose"));
  v = ParseFlags(Role::kDemo, {"-v", "--demo-nodes=1"}, Env().Fn());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->GetBool("verbose"));
  EXPECT_EQ(v->Source("verbose"), "flag");
  EXPECT_EQ(v->Get("demo-nodes"), "1");
  v = ParseFlags(Role::kDemo, {}, Env({{"DRALENS_VERBOSE", "TRUE"}}).Fn());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->GetBool("verbose"));
  v = ParseFlags(Role::kNode, {"-v"}, Env().Fn());
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("unexpected argument \"-v\""));
  v = ParseFlags(Role::kDemo, {"-x"}, Env().Fn());
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("unexpected argument \"-x\""));
  EXPECT_THAT(RoleHelp(Role::kDemo),
              HasSubstr("  -v, --verbose (DRALENS_VERBOSE)  default: false"));
}

TEST(FlagsTest, ExplainTakesOneClaimAndShortNamespaceAndOutput) {
  auto v = ParseFlags(Role::kExplain, {"-n", "research", "train-3", "-o", "json"}, Env().Fn());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->Get("claim"), "train-3");
  EXPECT_EQ(v->Get("namespace"), "research");
  EXPECT_EQ(v->Get("output"), "json");
  v = ParseFlags(Role::kExplain, {"train-3", "--server=http://127.0.0.1:8080"}, Env().Fn());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->Get("namespace"), "");
  EXPECT_EQ(v->Get("output"), "text");
  EXPECT_EQ(v->Get("server"), "http://127.0.0.1:8080");
  v = ParseFlags(Role::kExplain, {"a", "b"}, Env().Fn());
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("explains one claim"));
  v = ParseFlags(Role::kExplain, {"a", "-o", "yaml"}, Env().Fn());
  ASSERT_FALSE(v.ok());
  // The daemons' flags are not explain's, and explain's not theirs.
  EXPECT_FALSE(ParseFlags(Role::kExplain, {"a", "--metrics-address=:1"}, Env().Fn()).ok());
  EXPECT_FALSE(ParseFlags(Role::kCluster, {"-n", "x"}, Env().Fn()).ok());
  EXPECT_THAT(RoleHelp(Role::kExplain), HasSubstr("kubectl dralens explain"));
  EXPECT_THAT(TopLevelHelp(), HasSubstr("explain"));
}

TEST(FlagsTest, BadEnvironmentValueNamesTheVariable) {
  Env env({{"DRALENS_DEVICE_SOURCE", "gpu"}});
  auto v = ParseFlags(Role::kNode, {}, env.Fn());
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()),
              HasSubstr("environment variable DRALENS_DEVICE_SOURCE (--device-source)"));
}

TEST(FlagsTest, MissingValueAndStrayArgumentsAreErrors) {
  Env env;
  EXPECT_FALSE(ParseFlags(Role::kNode, {"--node-name"}, env.Fn()).ok());
  auto v = ParseFlags(Role::kNode, {"extra"}, env.Fn());
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("unexpected argument \"extra\""));
}

TEST(FlagsTest, PortZeroAndIpv6AreAccepted) {
  EXPECT_EQ(CheckHostPort("127.0.0.1:0"), "");
  EXPECT_EQ(CheckHostPort("[::1]:9477"), "");
  EXPECT_EQ(CheckHostPort(":9477"), "");
  EXPECT_NE(CheckHostPort("127.0.0.1:65536"), "");
  EXPECT_NE(CheckHostPort("[::1:9"), "");
  EXPECT_EQ(CheckHostPortList("127.0.0.1:9400,10.0.0.2:9400"), "");
  EXPECT_EQ(CheckHostPortList(""), "");
  EXPECT_NE(CheckHostPortList("127.0.0.1:9400,nope"), "");
}

TEST(FlagsTest, EveryFlagHasAnEnvironmentTwinHelpAndARole) {
  for (const FlagSpec& spec : AllFlags()) {
    EXPECT_FALSE(spec.env.empty()) << spec.name;
    EXPECT_FALSE(spec.help.empty()) << spec.name;
    EXPECT_FALSE(spec.roles.empty()) << spec.name;
    if (!spec.default_value.empty() && spec.check) {
      EXPECT_EQ(spec.check(spec.default_value), "") << spec.name << " default is invalid";
    }
  }
}

TEST(FlagsTest, TheDesignContractFlagsExistWithTheirTwins) {
  const std::map<std::string, std::string> contract = {
      {"node-name", "NODE_NAME"},
      {"driver-name", "DRALENS_DRIVER_NAME"},
      {"kubeconfig", "KUBECONFIG"},
      {"kubelet-registry-dir", "DRALENS_KUBELET_REGISTRY_DIR"},
      {"kubelet-plugins-dir", "DRALENS_KUBELET_PLUGINS_DIR"},
      {"cdi-root", "DRALENS_CDI_ROOT"},
      {"device-source", "DRALENS_DEVICE_SOURCE"},
      {"simulated-profile", "DRALENS_SIMULATED_PROFILE"},
      {"metrics-address", "DRALENS_METRICS_ADDRESS"},
  };
  for (const auto& [name, env] : contract) {
    bool found = false;
    for (const FlagSpec& spec : AllFlags()) {
      if (spec.name == name) {
        found = true;
        EXPECT_EQ(spec.env, env);
      }
    }
    EXPECT_TRUE(found) << name;
  }
}

TEST(FlagsTest, HelpListsEveryFlagOfTheRole) {
  const std::string help = RoleHelp(Role::kNode);
  EXPECT_THAT(help, HasSubstr("--node-name (NODE_NAME)"));
  EXPECT_THAT(help, HasSubstr("--cdi-root (DRALENS_CDI_ROOT)  default: /var/run/cdi"));
  EXPECT_THAT(help, ::testing::Not(HasSubstr("--api-server-address")));
}

// The README's flag reference is generated from the flag table; this keeps the two in step.
// On failure the message holds the table to paste between the README's markers.
TEST(FlagReferenceTest, ReadmeHoldsTheGeneratedTable) {
  std::ifstream in(std::string(DRALENS_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(in) << "README.md not found";
  const std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string begin = "<!-- flags:begin -->\n";
  const std::string end = "<!-- flags:end -->";
  const size_t b = readme.find(begin);
  const size_t e = readme.find(end);
  ASSERT_NE(b, std::string::npos) << "README.md lacks " << begin;
  ASSERT_NE(e, std::string::npos) << "README.md lacks " << end;
  EXPECT_EQ(readme.substr(b + begin.size(), e - b - begin.size()), FlagReferenceMarkdown())
      << "regenerate the README flag table:\n"
      << FlagReferenceMarkdown();
}

}  // namespace
}  // namespace dralens::app
