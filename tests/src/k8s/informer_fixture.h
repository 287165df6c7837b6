// What the informer and client tests against the real embedded API server (src/sim) share:
// objects to write, the Mirror that applies an informer's handler calls, and the InformerTest
// fixture (a server, a client, an informer, and fault injection).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "src/k8s/informer.h"
#include "src/k8s/projection.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "tests/testing/time_scale.h"

namespace dralens::k8s::informer_test {

using sim::ApiServer;
using sim::ApiServerOptions;
using sim::FaultRule;

inline const absl::Duration kDeadline = dralens::testing::Scaled(absl::Seconds(10));

inline nlohmann::json Node(const std::string& name, const std::string& color = "blue") {
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata", {{"name", name}, {"labels", {{"color", color}, {"test", "informer"}}}}}};
}

inline nlohmann::json Pod(const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "ns"}}},
          {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
}

// key -> "uid@resourceVersion": an object deleted and created again under its old version (by a
// server that lost its storage) is still a different object.
using State = std::map<std::string, std::string>;

inline std::string Rv(const nlohmann::json& object) {
  return object["metadata"].value("uid", "") + "@" +
         object["metadata"].value("resourceVersion", "");
}

// The informer's handler calls applied to a map: what a consumer of the callbacks believes.
class Mirror {
 public:
  InformerHandlers Handlers() {
    InformerHandlers h;
    h.on_add = [this](const nlohmann::json& o) {
      absl::MutexLock lock(&mu_);
      EXPECT_FALSE(state_.contains(ObjectKey(o))) << "add of a known object " << ObjectKey(o);
      state_[ObjectKey(o)] = Rv(o);
      objects_[ObjectKey(o)] = o;
      ++adds_;
    };
    h.on_update = [this](const nlohmann::json& old_object, const nlohmann::json& o) {
      absl::MutexLock lock(&mu_);
      if (!old_object.is_null()) {  // null from an informer that keeps hashes only
        EXPECT_EQ(ObjectKey(old_object), ObjectKey(o));
      }
      ++updates_;
      EXPECT_TRUE(state_.contains(ObjectKey(o))) << "update of an unknown object " << ObjectKey(o);
      state_[ObjectKey(o)] = Rv(o);
      objects_[ObjectKey(o)] = o;
    };
    h.on_delete = [this](const nlohmann::json& o) {
      absl::MutexLock lock(&mu_);
      EXPECT_TRUE(state_.contains(ObjectKey(o))) << "delete of an unknown object " << ObjectKey(o);
      state_.erase(ObjectKey(o));
      objects_.erase(ObjectKey(o));
      ++deletes_;
    };
    return h;
  }
  State state() {
    absl::MutexLock lock(&mu_);
    return state_;
  }
  int deletes() {
    absl::MutexLock lock(&mu_);
    return deletes_;
  }
  int updates() {
    absl::MutexLock lock(&mu_);
    return updates_;
  }
  // The last object the handlers were given for each key still present.
  std::map<std::string, nlohmann::json> objects() {
    absl::MutexLock lock(&mu_);
    return objects_;
  }

 private:
  absl::Mutex mu_;
  State state_;
  std::map<std::string, nlohmann::json> objects_;
  int adds_ = 0;
  int deletes_ = 0;
  int updates_ = 0;
};

class InformerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StartServer(0);
    metrics_ = std::make_unique<KubeRequestMetrics>(KubeRequestMetrics::Create(registry_));
    client_ = NewClient();
  }

  void TearDown() override {
    if (informer_ != nullptr) {
      informer_->Stop();
    }
    if (server_ != nullptr) {
      server_->Stop();
    }
  }

  void StartServer(int port) {
    ApiServerOptions options;
    options.port = port;
    options.bookmark_interval = absl::Milliseconds(200);
    server_ = std::make_unique<ApiServer>(options);
    ASSERT_TRUE(server_->Start().ok());
  }

  // Adds one to the decimal string at counters[key] (absent: 0).
  static void Increment(nlohmann::json& counters, const std::string& key) {
    int value = 0;
    if (counters.is_object() && counters.contains(key)) {
      value = std::stoi(counters[key].get<std::string>());
    }
    counters[key] = std::to_string(value + 1);
  }

  // Three threads each apply `mutate` to node `name` `per_writer` times through UpdateWithRetry
  // (PUT to `subresource`); returns how many calls failed.
  int UpdateFromThreeWriters(const std::string& name,
                             const std::function<absl::Status(nlohmann::json&)>& mutate,
                             int per_writer, absl::string_view subresource) {
    std::vector<std::thread> writers;
    std::atomic<int> failures{0};
    for (int w = 0; w < 3; ++w) {
      writers.emplace_back([&] {
        for (int i = 0; i < per_writer; ++i) {
          if (!UpdateWithRetry(*client_, kNodes, "", name, mutate, 50, subresource).ok()) {
            failures.fetch_add(1);
          }
        }
      });
    }
    for (std::thread& t : writers) {
      t.join();
    }
    return failures.load();
  }

  std::unique_ptr<RestClient> NewClient() {
    RestConfig config;
    config.server = server_->url();
    config.request_timeout = dralens::testing::Scaled(absl::Seconds(1));
    config.connect_timeout = dralens::testing::Scaled(absl::Seconds(1));
    RestClientOptions options;
    options.metrics = metrics_.get();
    options.retry.initial_backoff = absl::Milliseconds(5);
    options.retry.max_backoff = absl::Milliseconds(50);
    auto client = RestClient::FromConfig(config, options);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  void StartInformer(const ResourceType& type = kNodes, const std::string& ns = "") {
    InformerOptions options;
    options.namespace_name = ns;
    options.page_size = 3;  // force paging
    options.initial_backoff = absl::Milliseconds(10);
    options.max_backoff = absl::Milliseconds(200);
    options.watch_timeout_seconds = 5;
    options.min_watch_duration = absl::Milliseconds(200);
    options.metrics = metrics_.get();
    options.keep_objects = keep_objects_;
    options.projection = projection_;
    informer_ = std::make_unique<Informer>(*client_, type, options);
    informer_->SetHandlers(mirror_.Handlers());
    informer_->Start();
  }

  // The server's true state, read with a fault-free client.
  State ServerState(const ResourceType& type = kNodes, const std::string& ns = "") {
    auto list = ListAll(*client_, type, ns, ListOptions());
    EXPECT_TRUE(list.ok()) << list.status();
    State state;
    if (list.ok()) {
      for (const nlohmann::json& item : list->items) {
        state[ObjectKey(item)] = Rv(item);
      }
    }
    return state;
  }

  // The cached objects; without keep_objects only their number can be read, so the state is
  // the mirror's when the sizes agree.
  State CacheState() {
    if (!keep_objects_) {
      State mirror = mirror_.state();
      return informer_->Size() == mirror.size() ? mirror : State{{"size", "differs"}};
    }
    State state;
    for (const Informer::ObjectPtr& object : informer_->List()) {
      state[ObjectKey(*object)] = Rv(*object);
    }
    return state;
  }

  // Polls until the cache and the mirror equal the server's state. Never asserts on time.
  void ExpectConverged(const ResourceType& type = kNodes, const std::string& ns = "") {
    const absl::Time deadline = absl::Now() + kDeadline;
    State server, cache, mirror;
    while (absl::Now() < deadline) {
      server = ServerState(type, ns);
      cache = CacheState();
      mirror = mirror_.state();
      if (informer_->HasSynced() && server == cache && server == mirror) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_TRUE(informer_->HasSynced());
    EXPECT_EQ(cache, server);
    EXPECT_EQ(mirror, server);
    // The cached objects are the server's objects, not just the same versions.
    for (const Informer::ObjectPtr& object : informer_->List()) {
      auto name = (*object)["metadata"]["name"].get<std::string>();
      auto ns_name = (*object)["metadata"].value("namespace", "");
      auto live = client_->Get(type, ns_name, name);
      if (live.ok()) {
        EXPECT_EQ(*live, *object) << name;
      }
    }
  }

  void Create(const std::string& name, const std::string& color = "blue") {
    auto created = client_->Create(kNodes, "", Node(name, color));
    ASSERT_TRUE(created.ok()) << created.status();
  }
  void Recolor(const std::string& name, const std::string& color) {
    auto patched =
        client_->MergePatch(kNodes, "", name, {{"metadata", {{"labels", {{"color", color}}}}}}, "");
    ASSERT_TRUE(patched.ok()) << patched.status();
  }
  void Remove(const std::string& name) {
    ASSERT_TRUE(client_->Delete(kNodes, "", name, DeleteOptions()).ok());
  }

  // Creates, updates and deletes a few nodes.
  void Churn(const std::string& prefix) {
    for (int i = 0; i < 5; ++i) {
      Create(absl::StrCat(prefix, i));
    }
    Recolor(absl::StrCat(prefix, 1), "red");
    Recolor(absl::StrCat(prefix, 2), "green");
    Remove(absl::StrCat(prefix, 3));
  }

  // Closes every watch and keeps them closed while a watch fault is injected. A watch request
  // that passed the server's fault check just before the injection can still open after a
  // drop (it takes the drop generation when it starts streaming), so this drops again until
  // no watch has been open for a while.
  void KeepOffWatches() {
    const absl::Time deadline = absl::Now() + kDeadline;
    server_->DropWatches();
    int quiet = 0;
    while (quiet < 10 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
      if (server_->OpenWatchesForTest() > 0) {
        server_->DropWatches();
        quiet = 0;
      } else {
        ++quiet;
      }
    }
  }

  // Drops watches until `done`, for a fault that the informer's next watch must meet: a watch
  // request that passed the server's fault check just before the injection can open after a
  // drop and never meet it, so any watch open before `done` is dropped again.
  void DropWatchesUntil(const std::function<bool()>& done) {
    const absl::Time deadline = absl::Now() + kDeadline;
    server_->DropWatches();
    while (!done() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
      if (!done() && server_->OpenWatchesForTest() > 0) {
        server_->DropWatches();
      }
    }
  }

  double Restarts(const std::string& reason) {
    return metrics_->watch_restarts_total.Add({{"resource", "nodes"}, {"reason", reason}}).Value();
  }

  void Inject(FaultRule::Kind kind, const std::string& verb, int times) {
    FaultRule rule;
    rule.kind = kind;
    rule.verb = verb;
    rule.resource = "nodes";
    rule.times = times;
    server_->InjectFault(rule);
  }

  prometheus::Registry registry_;
  std::unique_ptr<KubeRequestMetrics> metrics_;
  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<RestClient> client_;
  Mirror mirror_;
  std::unique_ptr<Informer> informer_;
  bool keep_objects_ = true;
  std::shared_ptr<const Projection> projection_;  // for StartInformer
};

}  // namespace dralens::k8s::informer_test
