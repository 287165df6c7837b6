// The cluster role watches Workloads only where the API server serves them.
#include "gtest/gtest.h"
#include "src/app/cluster_role.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"

namespace dralens::app {
namespace {

bool Probe(std::set<std::string> gates) {
  sim::ApiServerOptions options;
  options.feature_gates = std::move(gates);
  sim::ApiServer server(options);
  EXPECT_TRUE(server.Start().ok());
  k8s::RestConfig config;
  config.server = server.url();
  auto client = k8s::RestClient::FromConfig(config);
  EXPECT_TRUE(client.ok()) << client.status();
  return ServesWorkloads(**client);
}

TEST(ServesWorkloadsTest, FollowsWhatTheApiServerServes) {
  EXPECT_FALSE(Probe({}));
  EXPECT_TRUE(Probe({"GenericWorkload"}));
}

TEST(ServesWorkloadsTest, AnUnreachableServerIsNoError) {
  k8s::RestConfig config;
  config.server = "http://127.0.0.1:1";  // nothing listens
  config.connect_timeout = absl::Milliseconds(200);
  config.request_timeout = absl::Milliseconds(200);
  auto client = k8s::RestClient::FromConfig(config);
  ASSERT_TRUE(client.ok());
  EXPECT_FALSE(ServesWorkloads(**client, 2, absl::Milliseconds(10)));
}

}  // namespace
}  // namespace dralens::app
