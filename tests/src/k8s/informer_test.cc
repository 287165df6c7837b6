// The client and informer against the real embedded API server (src/sim), one convergence test
// per injected fault: each proves that the informer's cache, and the state rebuilt from its
// handler calls, end equal to the server's true state.
#include "src/k8s/informer.h"

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
#include "src/k8s/projection.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "tests/testing/time_scale.h"

namespace dralens::k8s {
namespace {

using sim::ApiServer;
using sim::ApiServerOptions;
using sim::FaultRule;

const absl::Duration kDeadline = dralens::testing::Scaled(absl::Seconds(10));

nlohmann::json Node(const std::string& name, const std::string& color = "blue") {
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata", {{"name", name}, {"labels", {{"color", color}, {"test", "informer"}}}}}};
}

nlohmann::json Pod(const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "ns"}}},
          {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
}

// key -> "uid@resourceVersion": an object deleted and created again under its old version (by a
// server that lost its storage) is still a different object.
using State = std::map<std::string, std::string>;

std::string Rv(const nlohmann::json& object) {
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

// The convergence tests, for an informer that keeps objects and for one that keeps hashes only
// (the cluster role's, which hands lists over page by page).
class InformerFaultTest : public InformerTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    keep_objects_ = GetParam();
    InformerTest::SetUp();
  }
};
INSTANTIATE_TEST_SUITE_P(Cache, InformerFaultTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Objects" : "HashesOnly";
                         });

TEST_F(InformerTest, ListsThenWatchesAndCallsHandlers) {
  for (int i = 0; i < 7; ++i) {
    Create(absl::StrCat("pre-", i));
  }
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(kDeadline));
  EXPECT_EQ(informer_->Size(), 7u);
  Churn("live-");
  ExpectConverged();
  EXPECT_EQ(mirror_.deletes(), 1);
  Informer::ObjectPtr red = informer_->Get("", "live-1");
  ASSERT_NE(red, nullptr);
  EXPECT_EQ((*red)["metadata"]["labels"]["color"], "red");
  EXPECT_EQ((*red)["kind"], "Node");
  EXPECT_EQ(informer_->Get("", "live-3"), nullptr);
}

TEST_F(InformerTest, NamespacedPods) {
  ASSERT_TRUE(client_->Create(kPods, "ns", Pod("a")).ok());
  ASSERT_TRUE(client_->Create(kPods, "ns", Pod("b")).ok());
  StartInformer(kPods, "ns");
  ASSERT_TRUE(informer_->WaitForSync(kDeadline));
  ASSERT_TRUE(client_->Create(kPods, "ns", Pod("c")).ok());
  ASSERT_TRUE(client_->Delete(kPods, "ns", "a", DeleteOptions()).ok());
  ExpectConverged(kPods, "ns");
  EXPECT_NE(informer_->Get("ns", "c"), nullptr);
}

TEST_P(InformerFaultTest, ConvergesThrough5xx) {
  Churn("a-");
  Inject(FaultRule::Kind::kStatus, "list", 3);
  Inject(FaultRule::Kind::kStatus, "watch", 4);
  StartInformer();
  Churn("b-");
  ExpectConverged();
  Churn("c-");
  ExpectConverged();
}

TEST_P(InformerFaultTest, ConvergesThrough429WithRetryAfter) {
  Churn("a-");
  Inject(FaultRule::Kind::kTooManyRequests, "list", 1);
  Inject(FaultRule::Kind::kTooManyRequests, "watch", 2);
  StartInformer();
  Churn("b-");
  ExpectConverged();
}

TEST_P(InformerFaultTest, ConvergesThroughDroppedWatches) {
  Churn("a-");
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(kDeadline));
  // Every watch is closed after its first event while objects keep changing.
  Inject(FaultRule::Kind::kDropWatch, "watch", -1);
  server_->DropWatches();
  Churn("b-");
  Churn("c-");
  ExpectConverged();
  server_->ClearFaults();
  server_->DropWatches();
  Churn("d-");
  ExpectConverged();
  EXPECT_GT(Restarts("dropped"), 0);
}

TEST_P(InformerFaultTest, RelistsOnGoneAndSynthesisesDeletes) {
  Churn("a-");
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(kDeadline));
  ExpectConverged();
  // The next watch is told its resourceVersion expired, while objects vanish and appear.
  Inject(FaultRule::Kind::kGone, "watch", 1);
  server_->DropWatches();
  Remove("a-0");
  Remove("a-1");
  Recolor("a-2", "black");
  Churn("b-");
  DropWatchesUntil([&] { return Restarts("gone") >= 1; });
  ExpectConverged();
  EXPECT_GE(Restarts("gone"), 1);
  EXPECT_GE(informer_->ListCountForTest(), 2);
}

TEST_P(InformerFaultTest, RelistsWhenHistoryIsCompacted) {
  Churn("a-");
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(kDeadline));
  // Keep the informer off the server while history moves on and is compacted.
  Inject(FaultRule::Kind::kStatus, "watch", -1);
  KeepOffWatches();
  const std::string stale_rv = informer_->LastResourceVersion();
  Remove("a-0");
  Churn("b-");
  server_->CompactHistory();
  server_->ClearFaults();
  ExpectConverged();
  EXPECT_NE(informer_->LastResourceVersion(), stale_rv);
  EXPECT_GE(Restarts("gone"), 1);
  EXPECT_GE(informer_->ListCountForTest(), 2);
}

TEST_P(InformerFaultTest, ConvergesThroughSlowResponses) {
  Churn("a-");
  // Longer than the client's request timeout (1 s, scaled): the first list times out and is
  // retried.
  FaultRule slow;
  slow.kind = FaultRule::Kind::kSlow;
  slow.verb = "list";
  slow.resource = "nodes";
  slow.delay = dralens::testing::Scaled(absl::Milliseconds(1500));
  server_->InjectFault(slow);
  slow.verb = "watch";
  slow.delay = dralens::testing::Scaled(absl::Milliseconds(300));
  slow.times = 3;
  server_->InjectFault(slow);
  StartInformer();
  Churn("b-");
  ExpectConverged();
}

TEST_P(InformerFaultTest, ConvergesThroughTruncatedBodies) {
  Churn("a-");
  Inject(FaultRule::Kind::kTruncateBody, "list", 2);
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(kDeadline));
  Inject(FaultRule::Kind::kTruncateBody, "watch", 2);
  server_->DropWatches();
  Churn("b-");
  ExpectConverged();
  Churn("c-");
  ExpectConverged();
  EXPECT_GE(Restarts("error"), 1);
}

TEST_P(InformerFaultTest, ConvergesAfterServerRestartWithLowerResourceVersions) {
  for (int round = 0; round < 4; ++round) {
    Churn(absl::StrCat("old", round, "-"));
  }
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(kDeadline));
  ExpectConverged();
  const std::string old_rv = informer_->LastResourceVersion();

  // A fresh server on the same port: empty storage, resourceVersions start over.
  const int port = server_->port();
  server_->Stop();
  server_.reset();
  absl::SleepFor(absl::Milliseconds(100));
  StartServer(port);
  Create("new-0");
  Create("new-1", "red");
  ExpectConverged();
  EXPECT_EQ(informer_->Size(), 2u);
  uint64_t before = 0, after = 0;
  ASSERT_TRUE(absl::SimpleAtoi(old_rv, &before));
  ASSERT_TRUE(absl::SimpleAtoi(informer_->LastResourceVersion(), &after));
  EXPECT_LT(after, before);
  Churn("later-");
  ExpectConverged();
}

TEST_P(InformerFaultTest, ConvergesAfterQuickServerRestart) {
  Churn("old-");
  Churn("older-");
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(kDeadline));
  const int port = server_->port();
  server_->Stop();
  server_.reset();
  StartServer(port);  // no pause: the informer may reconnect with a version the server never had
  Create("fresh");
  ExpectConverged();
  EXPECT_EQ(informer_->Size(), 1u);
}

TEST_F(InformerTest, StopIsPromptAndFinal) {
  Churn("a-");
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(kDeadline));
  informer_->Stop();
  const size_t size = informer_->Size();
  Churn("b-");
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(informer_->Size(), size);
}

TEST_F(InformerTest, StaleFromTheFirstFailureUntilTheServerAnswersAgain) {
  Churn("a-");
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(kDeadline));
  EXPECT_FALSE(informer_->StaleSince().has_value());
  const absl::Time before = absl::Now();
  Inject(FaultRule::Kind::kStatus, "watch", -1);
  Inject(FaultRule::Kind::kStatus, "list", -1);
  DropWatchesUntil([&] { return informer_->StaleSince().has_value(); });
  absl::Time deadline = absl::Now() + kDeadline;
  ASSERT_TRUE(informer_->StaleSince().has_value());
  const absl::Time since = *informer_->StaleSince();
  EXPECT_GE(since, before);
  // Retries that fail again keep the first failure's time: staleness grows.
  while (Restarts("error") < 3 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GE(Restarts("error"), 3);
  EXPECT_EQ(informer_->StaleSince(), since);

  server_->ClearFaults();
  deadline = absl::Now() + kDeadline;
  while (informer_->StaleSince().has_value() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_FALSE(informer_->StaleSince().has_value());
  Churn("b-");
  ExpectConverged();
}

TEST_F(InformerTest, HashesOnlyKeepsNoObjectsAndReportsOnlyChanges) {
  keep_objects_ = false;
  for (int i = 0; i < 7; ++i) {
    Create(absl::StrCat("pre-", i));
  }
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(kDeadline));
  EXPECT_EQ(informer_->Size(), 7u);
  EXPECT_EQ(informer_->Get("", "pre-1"), nullptr);
  EXPECT_TRUE(informer_->List().empty());
  ExpectConverged();
  // A relist that finds nothing changed tells the handlers nothing.
  const int updates = mirror_.updates();
  Inject(FaultRule::Kind::kGone, "watch", 1);
  DropWatchesUntil([&] { return informer_->ListCountForTest() >= 2; });
  ASSERT_GE(informer_->ListCountForTest(), 2);
  ExpectConverged();
  EXPECT_EQ(mirror_.updates(), updates);
  EXPECT_EQ(mirror_.deletes(), 0);
}

// A server that lost its storage hands out the same resourceVersions again; an object created
// anew under a version its predecessor had must still reach the handlers after the relist.
TEST_F(InformerTest, HashesOnlyReportsAnObjectCreatedAgainUnderAnOldVersion) {
  keep_objects_ = false;
  Create("a", "red");
  const std::string old_rv = client_->Get(kNodes, "", "a")->at("metadata").at("resourceVersion");
  absl::Mutex mu;
  std::map<std::string, std::string> colors;  // what the handlers were told
  auto record = [&](const nlohmann::json& o) {
    absl::MutexLock lock(&mu);
    colors[ObjectKey(o)] = o["metadata"]["labels"].value("color", "");
  };
  InformerOptions options;
  options.keep_objects = false;
  options.initial_backoff = absl::Milliseconds(10);
  options.max_backoff = absl::Milliseconds(200);
  informer_ = std::make_unique<Informer>(*client_, kNodes, options);
  InformerHandlers handlers;
  handlers.on_add = record;
  handlers.on_update = [&](const nlohmann::json&, const nlohmann::json& o) { record(o); };
  informer_->SetHandlers(handlers);
  informer_->Start();
  ASSERT_TRUE(informer_->WaitForSync(kDeadline));

  const int port = server_->port();
  server_->Stop();
  server_.reset();
  StartServer(port);  // empty storage: versions start over
  // Kept from listing until "a" exists again, so that the relist finds it under the old version.
  Inject(FaultRule::Kind::kStatus, "list", -1);
  Inject(FaultRule::Kind::kStatus, "watch", -1);
  Create("a", "blue");
  ASSERT_EQ(client_->Get(kNodes, "", "a")->at("metadata").at("resourceVersion"), old_rv)
      << "the fresh server should reuse the version for this test to mean anything";
  // A watch resumed from the old version on the new server sees nothing after it; the relist
  // is what must find "a". 410 Gone makes the informer relist, and a watch that opened between
  // the two calls below is dropped, so that the next one takes the 410.
  const int lists = informer_->ListCountForTest();
  server_->ClearFaults();
  Inject(FaultRule::Kind::kGone, "watch", 1);
  DropWatchesUntil([&] { return informer_->ListCountForTest() > lists; });
  const absl::Time deadline = absl::Now() + kDeadline;
  std::string seen;
  while (seen != "blue" && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
    absl::MutexLock lock(&mu);
    seen = colors["a"];
  }
  EXPECT_EQ(seen, "blue");
}

TEST_F(InformerTest, HashesOnlyDeletesVanishedObjectsWithTheirNamespace) {
  keep_objects_ = false;
  for (const char* name : {"a", "b", "c", "d"}) {
    ASSERT_TRUE(client_->Create(kPods, "ns", Pod(name)).ok());
  }
  std::vector<std::string> deleted;
  absl::Mutex mu;
  InformerOptions options;
  options.keep_objects = false;
  options.page_size = 3;
  options.initial_backoff = absl::Milliseconds(10);
  informer_ = std::make_unique<Informer>(*client_, kPods, options);
  InformerHandlers handlers;
  handlers.on_delete = [&](const nlohmann::json& o) {
    absl::MutexLock lock(&mu);
    deleted.push_back(ObjectKey(o));
  };
  informer_->SetHandlers(handlers);
  informer_->Start();
  ASSERT_TRUE(informer_->WaitForSync(kDeadline));
  // Off the server while pods vanish; the relist after 410 must report them, by key.
  Inject(FaultRule::Kind::kStatus, "watch", -1);
  KeepOffWatches();
  ASSERT_TRUE(client_->Delete(kPods, "ns", "b", DeleteOptions()).ok());
  ASSERT_TRUE(client_->Delete(kPods, "ns", "d", DeleteOptions()).ok());
  server_->CompactHistory();
  server_->ClearFaults();
  const absl::Time deadline = absl::Now() + kDeadline;
  while (informer_->Size() != 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::MutexLock lock(&mu);
  EXPECT_THAT(deleted, ::testing::UnorderedElementsAre("ns/b", "ns/d"));
}

// ---------- projections against the real server ----------

// A Pod with what a projection is there to drop: containers, volumes, labels.
nlohmann::json BigPod(const std::string& name) {
  nlohmann::json pod = Pod(name);
  pod["metadata"]["labels"] = {{"app", "train"}};
  pod["spec"]["nodeName"] = "node-1";
  pod["spec"]["volumes"] = {{{"name", "data"}, {"emptyDir", nlohmann::json::object()}}};
  pod["spec"]["resourceClaims"] = {{{"name", "gpu"}, {"resourceClaimName", "c-1"}}};
  return pod;
}

// Keeps kind and apiVersion too, so that the client's defaulting of both adds nothing and a
// projected object must equal the projection of the full one exactly.
std::shared_ptr<const Projection> PodProjection() {
  return std::make_shared<const Projection>(Projection::Paths(
      {"apiVersion", "kind", "metadata.name", "metadata.namespace", "metadata.uid",
       "metadata.resourceVersion", "spec.nodeName", "spec.resourceClaims", "status.phase"}));
}

void ExpectProjectedPod(const nlohmann::json& pod) {
  ASSERT_TRUE(pod.is_object()) << pod.dump();
  EXPECT_TRUE(pod["metadata"].contains("name")) << pod.dump();
  EXPECT_TRUE(pod["metadata"].contains("resourceVersion")) << pod.dump();
  EXPECT_FALSE(pod["metadata"].contains("labels")) << pod.dump();
  EXPECT_FALSE(pod["spec"].contains("containers")) << pod.dump();
  EXPECT_FALSE(pod["spec"].contains("volumes")) << pod.dump();
  EXPECT_EQ(pod["spec"]["nodeName"], "node-1");
  EXPECT_EQ(Project(pod, *PodProjection()), pod) << "keeps more than the projection names";
}

TEST_F(InformerTest, ProjectedListKeepsExactlyTheProjectedFields) {
  for (const char* name : {"a", "b", "c", "d", "e"}) {
    ASSERT_TRUE(client_->Create(kPods, "ns", BigPod(name)).ok());
  }
  auto full = ListAll(*client_, kPods, "ns", ListOptions());
  ASSERT_TRUE(full.ok()) << full.status();
  std::map<std::string, nlohmann::json> by_key;
  for (const nlohmann::json& item : full->items) {
    by_key[ObjectKey(item)] = item;
  }
  ListOptions options;
  options.limit = 2;  // three pages, each projected
  options.projection = PodProjection();
  auto projected = ListAll(*client_, kPods, "ns", options);
  ASSERT_TRUE(projected.ok()) << projected.status();
  ASSERT_EQ(projected->items.size(), 5u);
  EXPECT_EQ(projected->resource_version, full->resource_version);  // the list's metadata is whole
  for (const nlohmann::json& item : projected->items) {
    ExpectProjectedPod(item);
    ASSERT_TRUE(by_key.contains(ObjectKey(item))) << item.dump();
    EXPECT_EQ(item, Project(by_key[ObjectKey(item)], *options.projection));
  }
}

TEST_F(InformerTest, ProjectedWatchKeepsExactlyTheProjectedFields) {
  auto start = ListAll(*client_, kPods, "ns", ListOptions());
  ASSERT_TRUE(start.ok()) << start.status();
  auto created = client_->Create(kPods, "ns", BigPod("w"));
  ASSERT_TRUE(created.ok()) << created.status();
  auto patched =
      client_->MergePatch(kPods, "ns", "w", {{"status", {{"phase", "Running"}}}}, "status");
  ASSERT_TRUE(patched.ok()) << patched.status();
  ASSERT_TRUE(client_->Delete(kPods, "ns", "w", DeleteOptions()).ok());

  WatchOptions options;
  options.resource_version = start->resource_version;
  options.timeout_seconds = 5;
  options.projection = PodProjection();
  std::vector<WatchEvent> events;
  absl::Status status = client_->Watch(
      kPods, "ns", options,
      [&](const WatchEvent& event) {
        if (event.type != WatchEventType::kBookmark) {
          events.push_back(event);
        }
        return event.type != WatchEventType::kDeleted;
      },
      nullptr);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].type, WatchEventType::kAdded);
  EXPECT_EQ(events[0].object, Project(*created, *options.projection));
  EXPECT_EQ(events[1].type, WatchEventType::kModified);
  EXPECT_EQ(events[1].object, Project(*patched, *options.projection));
  EXPECT_EQ(events[1].object["status"]["phase"], "Running");
  EXPECT_EQ(events[2].type, WatchEventType::kDeleted);
  for (const WatchEvent& event : events) {
    ExpectProjectedPod(event.object);
  }
}

// An ERROR event carries a Status, not an object of the watched type: the projection of the
// type must not cut its code, or the informer would never learn to relist.
TEST_F(InformerTest, GoneOnAProjectedWatchIsStillGone) {
  Create("a");
  auto list = ListAll(*client_, kNodes, "", ListOptions());
  ASSERT_TRUE(list.ok()) << list.status();
  WatchOptions options;
  options.resource_version = list->resource_version;
  options.timeout_seconds = 5;
  options.projection = std::make_shared<const Projection>(Projection::Paths({"metadata.name"}));
  auto ignore = [](const WatchEvent&) { return true; };

  // The fault: the watch's first line is an ERROR event with a 410 Expired Status.
  Inject(FaultRule::Kind::kGone, "watch", 1);
  absl::Status status = client_->Watch(kNodes, "", options, ignore, nullptr);
  EXPECT_TRUE(IsGone(status)) << status;
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << status;
  EXPECT_THAT(status.message(), ::testing::HasSubstr("too old resource version"));

  // The server's own answer to a version older than its compacted history: the same event.
  Create("b");
  server_->CompactHistory();
  status = client_->Watch(kNodes, "", options, ignore, nullptr);
  EXPECT_TRUE(IsGone(status)) << status;
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << status;
}

// The cluster role's informers: hashes only, objects projected. A relist after 410 compares the
// hashes of projected objects with the hashes of projected objects, and must still converge.
TEST_F(InformerTest, HashesOnlyWithAProjectionConvergesThroughARelist) {
  keep_objects_ = false;
  // With kind and apiVersion, which the client adds when they are missing.
  projection_ = std::make_shared<const Projection>(
      Projection::Paths({"apiVersion", "kind", "metadata.name", "metadata.uid",
                         "metadata.resourceVersion", "metadata.labels.color"}));
  Churn("a-");
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(kDeadline));
  ExpectConverged();
  // The next watch is told its resourceVersion expired, while objects vanish, change and appear.
  Inject(FaultRule::Kind::kGone, "watch", 1);
  server_->DropWatches();
  Remove("a-0");
  Recolor("a-2", "black");
  Churn("b-");
  DropWatchesUntil([&] { return Restarts("gone") >= 1; });
  ExpectConverged();
  EXPECT_GE(Restarts("gone"), 1);
  EXPECT_GE(informer_->ListCountForTest(), 2);
  EXPECT_GE(mirror_.deletes(), 1);  // a-0, by the relist (b-3 only if a watch saw it live)
  // The handlers saw projected objects, with the server's current colours.
  std::map<std::string, nlohmann::json> seen = mirror_.objects();
  auto server = ListAll(*client_, kNodes, "", ListOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_EQ(seen.size(), server->items.size());
  for (const nlohmann::json& live : server->items) {
    const nlohmann::json& object = seen[ObjectKey(live)];
    EXPECT_EQ(object, Project(live, *projection_)) << ObjectKey(live);
    EXPECT_FALSE(object["metadata"]["labels"].contains("test")) << object.dump();
  }
  EXPECT_EQ(seen["a-2"]["metadata"]["labels"]["color"], "black");
}

// ---------- verbs against the real server ----------

TEST_F(InformerTest, VerbsAgainstRealServer) {
  nlohmann::json generated = Node("");
  generated["metadata"].erase("name");
  generated["metadata"]["generateName"] = "gen-";
  auto created = client_->Create(kNodes, "", generated);
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string name = (*created)["metadata"]["name"];
  EXPECT_THAT(name, ::testing::StartsWith("gen-"));
  EXPECT_GT(name.size(), 4u);

  EXPECT_TRUE(k8s::IsAlreadyExists(client_->Create(kNodes, "", *created).status()));
  EXPECT_TRUE(k8s::IsNotFound(client_->Get(kNodes, "", "ghost").status()));

  // A stale resourceVersion is a conflict.
  nlohmann::json stale = *created;
  Recolor(name, "red");
  stale["metadata"]["labels"]["color"] = "green";
  absl::Status conflict = client_->Update(kNodes, "", stale, "").status();
  EXPECT_TRUE(IsConflict(conflict)) << conflict;

  // Status subresource.
  auto pod = client_->Create(kPods, "ns", Pod("p"));
  ASSERT_TRUE(pod.ok()) << pod.status();
  (*pod)["status"]["phase"] = "Running";
  auto updated = client_->Update(kPods, "ns", *pod, "status");
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ((*updated)["status"]["phase"], "Running");
  auto patched =
      client_->MergePatch(kPods, "ns", "p", {{"status", {{"phase", "Succeeded"}}}}, "status");
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ((*patched)["status"]["phase"], "Succeeded");

  // Paging and selectors.
  for (int i = 0; i < 7; ++i) {
    Create(absl::StrCat("page-", i), i % 2 == 0 ? "even" : "odd");
  }
  ListOptions even;
  even.label_selector = "color=even";
  even.limit = 2;
  auto evens = ListAll(*client_, kNodes, "", even);
  ASSERT_TRUE(evens.ok()) << evens.status();
  EXPECT_EQ(evens->items.size(), 4u);
  EXPECT_FALSE(evens->resource_version.empty());

  // Delete with a precondition that does not hold, then one that does.
  DeleteOptions wrong_uid;
  wrong_uid.precondition_uid = "not-the-uid";
  EXPECT_TRUE(IsConflict(client_->Delete(kNodes, "", "page-0", wrong_uid)));
  auto page0 = client_->Get(kNodes, "", "page-0");
  ASSERT_TRUE(page0.ok());
  DeleteOptions right_uid;
  right_uid.precondition_uid = (*page0)["metadata"]["uid"];
  EXPECT_TRUE(client_->Delete(kNodes, "", "page-0", right_uid).ok());

  ListOptions odd;
  odd.label_selector = "color=odd";
  ASSERT_TRUE(client_->DeleteCollection(kNodes, "", odd).ok());
  auto left = ListAll(*client_, kNodes, "", odd);
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->items.empty());
  auto all = ListAll(*client_, kNodes, "", ListOptions());
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->items.size(), 4u);  // generated + page-2, page-4, page-6

  // Invalid objects are InvalidArgument with the server's message.
  nlohmann::json bad = Node("Not_A_Valid_Name");
  absl::Status invalid = client_->Create(kNodes, "", bad).status();
  EXPECT_EQ(invalid.code(), absl::StatusCode::kInvalidArgument) << invalid;
}

TEST_F(InformerTest, UpdateWithRetryUnderConcurrentWriters) {
  Create("counter");
  auto increment = [](nlohmann::json& node) {
    Increment(node["metadata"]["annotations"], "count");
    return absl::OkStatus();
  };
  constexpr int kPerWriter = 15;
  EXPECT_EQ(UpdateFromThreeWriters("counter", increment, kPerWriter, ""), 0);
  auto node = client_->Get(kNodes, "", "counter");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ((*node)["metadata"]["annotations"]["count"], std::to_string(3 * kPerWriter));
  EXPECT_GT(
      metrics_->requests_total.Add({{"verb", "update"}, {"resource", "nodes"}, {"code", "409"}})
          .Value(),
      0);
}

// The status subresource takes only .status, so a read-modify-write of status must PUT there;
// concurrent writers still conflict and are retried.
TEST_F(InformerTest, UpdateWithRetryWritesTheStatusSubresource) {
  Create("status-counter");
  auto increment = [](nlohmann::json& node) {
    Increment(node["status"]["capacity"], "example.com/count");
    node["metadata"]["annotations"]["ignored"] = "by a status write";
    return absl::OkStatus();
  };
  constexpr int kPerWriter = 15;
  EXPECT_EQ(UpdateFromThreeWriters("status-counter", increment, kPerWriter, "status"), 0);
  auto node = client_->Get(kNodes, "", "status-counter");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ((*node)["status"]["capacity"]["example.com/count"], std::to_string(3 * kPerWriter));
  // The writers did meet conflicts: the count above came through the retries.
  EXPECT_GT(
      metrics_->requests_total.Add({{"verb", "update"}, {"resource", "nodes"}, {"code", "409"}})
          .Value(),
      0);
  // Only .status was written: the annotation the mutation also set was not stored.
  EXPECT_FALSE((*node)["metadata"].contains("annotations") &&
               (*node)["metadata"]["annotations"].contains("ignored"));
  // Through the main resource the same mutation stores the annotation and not the status.
  ASSERT_TRUE(UpdateWithRetry(*client_, kNodes, "", "status-counter", increment).ok());
  node = client_->Get(kNodes, "", "status-counter");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ((*node)["status"]["capacity"]["example.com/count"], std::to_string(3 * kPerWriter));
  EXPECT_EQ((*node)["metadata"]["annotations"]["ignored"], "by a status write");
}

TEST_F(InformerTest, UpdateWithRetryGivesUpAndPropagatesMutateErrors) {
  Create("x");
  absl::Status status = UpdateWithRetry(*client_, kNodes, "", "x", [](nlohmann::json&) {
                          return absl::FailedPreconditionError("no");
                        }).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(k8s::IsNotFound(UpdateWithRetry(*client_, kNodes, "", "ghost", [](nlohmann::json&) {
                                return absl::OkStatus();
                              }).status()));
}

}  // namespace
}  // namespace dralens::k8s
