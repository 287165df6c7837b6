// The embedded API server on a free loopback port, with a REST client for it: the fixture of
// integration tests that need real HTTP, watches and the server's validation. Unit tests use
// FakeKubeClient instead.
#pragma once

#include <memory>
#include <utility>

#include "gtest/gtest.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"

namespace dralens::testing {

class ApiFixture {
 public:
  explicit ApiFixture(sim::ApiServerOptions options = {}) : server_(std::move(options)) {
    absl::Status started = server_.Start();
    EXPECT_TRUE(started.ok()) << started;
    k8s::RestConfig config;
    config.server = server_.url();
    auto client = k8s::RestClient::FromConfig(config);
    EXPECT_TRUE(client.ok()) << client.status();
    if (client.ok()) {
      client_ = *std::move(client);
    }
  }
  ~ApiFixture() { server_.Stop(); }
  ApiFixture(const ApiFixture&) = delete;
  ApiFixture& operator=(const ApiFixture&) = delete;

  bool ok() const { return client_ != nullptr; }
  sim::ApiServer& server() { return server_; }
  k8s::RestClient& client() { return *client_; }

 private:
  sim::ApiServer server_;
  std::unique_ptr<k8s::RestClient> client_;
};

}  // namespace dralens::testing
