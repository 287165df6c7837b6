// Fault injection, discovery documents, and the server's lifecycle (Stop, restart on a port).
#include <atomic>

#include "gtest/gtest.h"
#include "tests/src/sim/sim_test_util.h"

namespace dralens::sim::testing {
namespace {

class FaultTest : public ServerTest {};

TEST_F(FaultTest, StatusFaultMatchesVerbAndResourceAndCountsDown) {
  FaultRule rule;
  rule.kind = FaultRule::Kind::kStatus;
  rule.verb = "create";
  rule.resource = "resourceclaims";
  rule.code = 503;
  rule.times = 2;
  server_->InjectFault(rule);
  EXPECT_EQ(http_->Post(kSlices, Slice("a")).status, 201);  // other resource
  EXPECT_EQ(http_->Get(Claims()).status, 200);              // other verb
  Reply r1 = http_->Post(Claims(), Claim("c"));
  EXPECT_EQ(r1.status, 503);
  EXPECT_EQ(r1.Reason(), "ServiceUnavailable");
  EXPECT_EQ(r1.body["code"], 503);
  EXPECT_EQ(http_->Post(Claims(), Claim("c")).status, 503);
  EXPECT_EQ(http_->Post(Claims(), Claim("c")).status, 201);
}

TEST_F(FaultTest, StatusFaultOnStatusSubresourceOnly) {
  http_->Post(Claims(), Claim("c"));
  FaultRule rule;
  rule.kind = FaultRule::Kind::kStatus;
  rule.resource = "resourceclaims/status";
  rule.code = 409;
  rule.times = -1;
  server_->InjectFault(rule);
  json c = http_->Get(Claims() + "/c").body;
  EXPECT_EQ(http_->Put(Claims() + "/c", c).status, 200);
  Reply st = http_->Put(Claims() + "/c/status", c);
  EXPECT_EQ(st.status, 409);
  EXPECT_EQ(st.Reason(), "Conflict");
  EXPECT_EQ(http_->Put(Claims() + "/c/status", c).status, 409);  // -1: until cleared
  server_->ClearFaults();
  EXPECT_EQ(http_->Put(Claims() + "/c/status", c).status, 200);
}

TEST_F(FaultTest, TooManyRequestsCarriesRetryAfter) {
  FaultRule rule;
  rule.kind = FaultRule::Kind::kTooManyRequests;
  rule.verb = "list";
  rule.retry_after_seconds = 3;
  server_->InjectFault(rule);
  Reply r = http_->Get(kSlices);
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.Reason(), "TooManyRequests");
  EXPECT_EQ(r.body["details"]["retryAfterSeconds"], 3);
  auto it = r.headers.find("Retry-After");
  ASSERT_NE(it, r.headers.end());
  EXPECT_EQ(it->second, "3");
  EXPECT_EQ(http_->Get(kSlices).status, 200);
}

TEST_F(FaultTest, DropWatchClosesAfterFirstEvent) {
  http_->Post(kSlices, Slice("a"));
  http_->Post(kSlices, Slice("b"));
  FaultRule rule;
  rule.kind = FaultRule::Kind::kDropWatch;
  server_->InjectFault(rule);
  EXPECT_EQ(http_->Get(kSlices).status, 200);  // not a watch: unaffected, rule kept
  auto w = Watch(std::string(kSlices) + "?watch=1");
  auto e = w->Next();
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)["object"]["metadata"]["name"], "a");
  EXPECT_TRUE(w->WaitEnded());
  EXPECT_FALSE(w->Next(50));
  auto w2 = Watch(std::string(kSlices) + "?watch=1");  // the rule is used up
  ASSERT_TRUE(w2->Next());
  ASSERT_TRUE(w2->Next());
}

TEST_F(FaultTest, GoneFaultSendsExpiredErrorEvent) {
  FaultRule rule;
  rule.kind = FaultRule::Kind::kGone;
  rule.resource = "resourceslices";
  server_->InjectFault(rule);
  std::string rv = http_->Get(kSlices).Rv();
  auto w = Watch(std::string(kSlices) + "?watch=1&resourceVersion=" + rv);
  auto e = w->Next();
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)["type"], "ERROR");
  EXPECT_EQ((*e)["object"]["code"], 410);
  EXPECT_EQ((*e)["object"]["reason"], "Expired");
  EXPECT_TRUE(w->WaitEnded());
}

TEST_F(FaultTest, SlowFaultDelaysTheResponse) {
  FaultRule rule;
  rule.kind = FaultRule::Kind::kSlow;
  rule.verb = "get";
  rule.delay = absl::Milliseconds(800);
  server_->InjectFault(rule);
  http_->Post(kNodes, Node("n"));
  httplib::Client impatient("127.0.0.1", server_->port());
  impatient.set_read_timeout(0, 50 * 1000);
  auto r = impatient.Get("/api/v1/nodes/n");
  EXPECT_FALSE(r);  // the client gave up before the delayed answer
  EXPECT_EQ(http_->Get("/api/v1/nodes/n").status, 200);
}

TEST_F(FaultTest, TruncateBodyCutsResponses) {
  http_->Post(kSlices, Slice("a"));
  FaultRule rule;
  rule.kind = FaultRule::Kind::kTruncateBody;
  rule.verb = "list";
  server_->InjectFault(rule);
  Reply r = http_->Get(kSlices);
  EXPECT_TRUE(r.status == 0 || r.body.is_null()) << r.raw;
  EXPECT_EQ(http_->Get(kSlices).status, 200);
  // On a watch stream the first event is cut mid-object and the connection dropped.
  FaultRule watch_rule;
  watch_rule.kind = FaultRule::Kind::kTruncateBody;
  watch_rule.verb = "watch";
  server_->InjectFault(watch_rule);
  auto w = Watch(std::string(kSlices) + "?watch=1");
  EXPECT_TRUE(w->WaitEnded());
  EXPECT_FALSE(w->Next(50));
  EXPECT_FALSE(w->CleanEnd());
  EXPECT_FALSE(w->Leftover().empty());
  EXPECT_EQ(w->Leftover().find('\n'), std::string::npos);
}

TEST_F(FaultTest, FaultCountsAreThreadSafe) {
  FaultRule rule;
  rule.kind = FaultRule::Kind::kStatus;
  rule.code = 500;
  rule.times = 10;
  rule.verb = "list";
  server_->InjectFault(rule);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      Http h(server_->port());
      for (int i = 0; i < 10; ++i) {
        if (h.Get(kSlices).status == 500) {
          ++failures;
        }
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(failures.load(), 10);
}

TEST_F(FaultTest, Discovery) {
  Reply v = http_->Get("/version");
  ASSERT_EQ(v.status, 200);
  EXPECT_EQ(v.body["gitVersion"], "v1.34.0");
  EXPECT_EQ(v.body["major"], "1");
  EXPECT_EQ(v.body["minor"], "34");
  Reply api = http_->Get("/api");
  EXPECT_EQ(api.body["kind"], "APIVersions");
  EXPECT_EQ(api.body["versions"][0], "v1");
  Reply apis = http_->Get("/apis");
  EXPECT_EQ(apis.body["kind"], "APIGroupList");
  std::set<std::string> groups;
  for (const json& g : apis.body["groups"]) {
    groups.insert(g["name"]);
    EXPECT_EQ(g["preferredVersion"]["version"], "v1");
  }
  EXPECT_EQ(groups,
            (std::set<std::string>{"resource.k8s.io", "coordination.k8s.io", "events.k8s.io"}));
  Reply group = http_->Get("/apis/resource.k8s.io");
  EXPECT_EQ(group.body["kind"], "APIGroup");
  Reply core = http_->Get("/api/v1");
  EXPECT_EQ(core.body["kind"], "APIResourceList");
  EXPECT_EQ(core.body["groupVersion"], "v1");
  std::map<std::string, json> by_name;
  for (const json& r : core.body["resources"]) {
    by_name[r["name"]] = r;
  }
  EXPECT_EQ(by_name["pods"]["shortNames"][0], "po");
  EXPECT_EQ(by_name["pods"]["namespaced"], true);
  EXPECT_EQ(by_name["nodes"]["namespaced"], false);
  EXPECT_TRUE(by_name.count("pods/status"));
  EXPECT_EQ(by_name["events"]["shortNames"][0], "ev");  // core/v1, what kubectl get events reads
  Reply dra = http_->Get("/apis/resource.k8s.io/v1");
  by_name.clear();
  for (const json& r : dra.body["resources"]) {
    by_name[r["name"]] = r;
  }
  EXPECT_EQ(by_name["resourceslices"]["kind"], "ResourceSlice");
  EXPECT_EQ(by_name["resourceslices"]["singularName"], "resourceslice");
  EXPECT_EQ(by_name["resourceslices"]["namespaced"], false);
  EXPECT_EQ(by_name["resourceclaims"]["namespaced"], true);
  EXPECT_TRUE(by_name.count("resourceclaims/status"));
  EXPECT_FALSE(by_name.count("resourceslices/status"));
  EXPECT_EQ(by_name["deviceclasses"]["verbs"].size(), 8u);
  EXPECT_EQ(http_->Get("/apis/coordination.k8s.io/v1").body["resources"][0]["name"], "leases");
  for (const char* p : {"/healthz", "/readyz", "/livez"}) {
    Reply h = http_->Get(p);
    EXPECT_EQ(h.status, 200);
    EXPECT_EQ(h.raw, "ok");
  }
  EXPECT_EQ(http_->Get("/openapi/v2").status, 404);
  EXPECT_EQ(http_->Get("/apis/nope.example.com/v1").status, 404);
}

TEST(ApiServerVersionTest, MinorVersionComesFromOptions) {
  ApiServerOptions o;
  o.git_version = "v1.35.2";
  ApiServer server(o);
  ASSERT_TRUE(server.Start().ok());
  Http http(server.port());
  Reply v = http.Get("/version");
  EXPECT_EQ(v.body["minor"], "35");
  EXPECT_EQ(v.body["gitVersion"], "v1.35.2");
}

TEST(ApiServerLifecycleTest, StopClosesWatchesAndThePortCanBeReused) {
  auto first = std::make_unique<ApiServer>();
  ASSERT_TRUE(first->Start().ok());
  int port = first->port();
  EXPECT_EQ(first->url(), "http://127.0.0.1:" + std::to_string(port));
  Http http(port);
  ASSERT_EQ(http.Post(kSlices, Slice("a")).status, 201);
  // An idle keep-alive connection and an open watch must not hold Stop() up.
  httplib::Client keep("127.0.0.1", port);
  keep.set_keep_alive(true);
  ASSERT_TRUE(keep.Get("/healthz"));
  WatchReader w(port, std::string(kSlices) + "?watch=1");
  ASSERT_TRUE(w.Next());
  first->Stop();
  EXPECT_TRUE(w.WaitEnded(1000));
  first->Stop();  // idempotent

  ApiServerOptions o;
  o.port = port;
  ApiServer second(o);
  ASSERT_TRUE(second.Start().ok());
  EXPECT_EQ(second.port(), port);
  Reply list = http.Get(kSlices);
  ASSERT_EQ(list.status, 200);
  EXPECT_TRUE(list.body["items"].empty());  // a fresh store
  // A client resuming from the old server's resourceVersion is told to relist.
  WatchReader resumed(port, std::string(kSlices) + "?watch=1&resourceVersion=99999");
  auto e = resumed.Next();
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)["type"], "ERROR");
}

TEST(ApiServerLifecycleTest, DestructorStops) {
  int port = 0;
  {
    ApiServer server;
    ASSERT_TRUE(server.Start().ok());
    port = server.port();
    EXPECT_FALSE(server.Start().ok());  // already started
  }
  ApiServerOptions o;
  o.port = port;
  ApiServer again(o);
  EXPECT_TRUE(again.Start().ok());
}

}  // namespace
}  // namespace dralens::sim::testing
