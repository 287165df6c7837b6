// WATCH semantics: initial state, resume from a resourceVersion, 410 after compaction,
// bookmarks, selectors, timeoutSeconds, DropWatches.
#include "gtest/gtest.h"
#include "tests/src/sim/sim_test_util.h"

namespace dralens::sim::testing {
namespace {

class WatchTest : public ServerTest {
 protected:
  ApiServerOptions Options() override {
    ApiServerOptions o;
    o.bookmark_interval = absl::Milliseconds(100);
    return o;
  }
  std::string Name(const json& event) { return event["object"]["metadata"]["name"]; }
};

TEST_F(WatchTest, WatchFromNowSeesLaterEvents) {
  http_->Post(kSlices, Slice("old"));
  std::string rv = http_->Get(kSlices).Rv();
  auto w = Watch(std::string(kSlices) + "?watch=1&resourceVersion=" + rv);
  json created = http_->Post(kSlices, Slice("a")).body;
  auto e1 = w->Next();
  ASSERT_TRUE(e1);
  EXPECT_EQ((*e1)["type"], "ADDED");
  EXPECT_EQ(Name(*e1), "a");
  EXPECT_EQ((*e1)["object"]["kind"], "ResourceSlice");
  EXPECT_EQ((*e1)["object"]["apiVersion"], "resource.k8s.io/v1");
  http_->Patch(std::string(kSlices) + "/a", {{"metadata", {{"labels", {{"x", "y"}}}}}});
  auto e2 = w->Next();
  ASSERT_TRUE(e2);
  EXPECT_EQ((*e2)["type"], "MODIFIED");
  http_->Delete(std::string(kSlices) + "/a");
  auto e3 = w->Next();
  ASSERT_TRUE(e3);
  EXPECT_EQ((*e3)["type"], "DELETED");
  EXPECT_GT(RvOf((*e3)["object"]), RvOf((*e2)["object"]));
  EXPECT_EQ(w->Status(), 200);
}

TEST_F(WatchTest, WatchWithoutResourceVersionStartsWithCurrentState) {
  http_->Post(kSlices, Slice("a"));
  http_->Post(kSlices, Slice("b"));
  for (const char* rv : {"", "&resourceVersion=0"}) {
    auto w = Watch(std::string(kSlices) + "?watch=true" + rv);
    auto e1 = w->Next();
    auto e2 = w->Next();
    ASSERT_TRUE(e1 && e2);
    EXPECT_EQ((*e1)["type"], "ADDED");
    EXPECT_EQ(Name(*e1), "a");
    EXPECT_EQ(Name(*e2), "b");
    EXPECT_FALSE(w->Next(100));
  }
}

TEST_F(WatchTest, ResumeFromOldResourceVersionReplays) {
  std::string rv0 = http_->Get(kSlices).Rv();
  http_->Post(kSlices, Slice("a"));
  http_->Post(kSlices, Slice("b"));
  http_->Delete(std::string(kSlices) + "/a");
  auto w = Watch(std::string(kSlices) + "?watch=1&resourceVersion=" + rv0);
  std::vector<std::string> seen;
  for (int i = 0; i < 3; ++i) {
    auto e = w->Next();
    ASSERT_TRUE(e);
    seen.push_back((*e)["type"].get<std::string>() + ":" + Name(*e));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED:a", "ADDED:b", "DELETED:a"}));
}

TEST_F(WatchTest, CompactedResourceVersionGetsExpiredErrorEvent) {
  std::string rv0 = http_->Get(kSlices).Rv();
  http_->Post(kSlices, Slice("a"));
  server_->CompactHistory();
  auto w = Watch(std::string(kSlices) + "?watch=1&resourceVersion=" + rv0);
  auto e = w->Next();
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)["type"], "ERROR");
  EXPECT_EQ((*e)["object"]["kind"], "Status");
  EXPECT_EQ((*e)["object"]["code"], 410);
  EXPECT_EQ((*e)["object"]["reason"], "Expired");
  EXPECT_TRUE(w->WaitEnded());
  EXPECT_EQ(w->Status(), 200);
}

TEST_F(WatchTest, HistoryLimitExpiresOldResourceVersions) {
  server_->Stop();
  ApiServerOptions o;
  o.watch_history = 2;
  server_ = std::make_unique<ApiServer>(o);
  ASSERT_TRUE(server_->Start().ok());
  http_ = std::make_unique<Http>(server_->port());
  std::string rv0 = http_->Get(kSlices).Rv();
  for (const char* n : {"a", "b", "c"}) {
    http_->Post(kSlices, Slice(n));
  }
  auto w = Watch(std::string(kSlices) + "?watch=1&resourceVersion=" + rv0);
  auto e = w->Next();
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)["type"], "ERROR");
  EXPECT_EQ((*e)["object"]["code"], 410);
}

TEST_F(WatchTest, BookmarksCarryOnlyTheResourceVersion) {
  std::string rv = http_->Get(kSlices).Rv();
  auto w = Watch(std::string(kSlices) + "?watch=1&allowWatchBookmarks=true&resourceVersion=" + rv);
  http_->Post(Claims(), Claim("other-resource"));  // moves the global RV
  std::optional<json> bm;
  for (int i = 0; i < 5 && !bm; ++i) {
    auto e = w->Next();
    ASSERT_TRUE(e);
    if ((*e)["type"] == "BOOKMARK") {
      bm = e;
    }
  }
  ASSERT_TRUE(bm);
  json obj = (*bm)["object"];
  EXPECT_EQ(obj["kind"], "ResourceSlice");
  EXPECT_EQ(obj["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ(obj["metadata"].size(), 1u);
  EXPECT_EQ(obj["metadata"]["resourceVersion"], std::to_string(server_->ResourceVersionForTest()));
  EXPECT_EQ(obj.size(), 3u);
  // No bookmarks unless asked for.
  auto plain = Watch(std::string(kSlices) + "?watch=1&resourceVersion=" + rv);
  EXPECT_FALSE(plain->Next(300));
}

TEST_F(WatchTest, SendInitialEventsEndsWithAnnotatedBookmark) {
  http_->Post(kSlices, Slice("a"));
  auto w = Watch(std::string(kSlices) +
                 "?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&"
                 "resourceVersionMatch=NotOlderThan&resourceVersion=");
  auto e1 = w->Next();
  auto e2 = w->Next();
  ASSERT_TRUE(e1 && e2);
  EXPECT_EQ((*e1)["type"], "ADDED");
  EXPECT_EQ((*e2)["type"], "BOOKMARK");
  EXPECT_EQ((*e2)["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
}

TEST_F(WatchTest, SelectorsFilterEventsByObjectState) {
  json s = Slice("a");
  s["metadata"]["labels"] = {{"tier", "gold"}};
  std::string rv = http_->Get(kSlices).Rv();
  auto w = Watch(std::string(kSlices) + "?watch=1&labelSelector=tier%3Dgold&resourceVersion=" + rv);
  auto fw = Watch(std::string(kSlices) +
                  "?watch=1&fieldSelector=spec.nodeName%3Dnode-b&resourceVersion=" + rv);
  http_->Post(kSlices, s);
  http_->Post(kSlices, Slice("other", "node-b"));
  auto e1 = w->Next();
  ASSERT_TRUE(e1);
  EXPECT_EQ(Name(*e1), "a");
  auto f1 = fw->Next();
  ASSERT_TRUE(f1);
  EXPECT_EQ(Name(*f1), "other");
  // Stops matching: DELETED for this watcher. Starts matching again: ADDED.
  http_->Patch(std::string(kSlices) + "/a", {{"metadata", {{"labels", {{"tier", "silver"}}}}}});
  auto e2 = w->Next();
  ASSERT_TRUE(e2);
  EXPECT_EQ((*e2)["type"], "DELETED");
  EXPECT_EQ((*e2)["object"]["metadata"]["labels"]["tier"], "gold");
  http_->Patch(std::string(kSlices) + "/a", {{"metadata", {{"labels", {{"tier", "gold"}}}}}});
  auto e3 = w->Next();
  ASSERT_TRUE(e3);
  EXPECT_EQ((*e3)["type"], "ADDED");
  EXPECT_EQ(http_->Get(std::string(kSlices) + "?watch=1&fieldSelector=spec.bogus%3D1").status, 400);
}

TEST_F(WatchTest, NamespacedWatchSeesOnlyItsNamespace) {
  std::string rv = http_->Get(kAllClaims).Rv();
  auto ns = Watch(Claims("a") + "?watch=1&resourceVersion=" + rv);
  auto all = Watch(std::string(kAllClaims) + "?watch=1&resourceVersion=" + rv);
  http_->Post(Claims("b"), Claim("x"));
  http_->Post(Claims("a"), Claim("y"));
  auto e = ns->Next();
  ASSERT_TRUE(e);
  EXPECT_EQ(Name(*e), "y");
  auto a1 = all->Next();
  auto a2 = all->Next();
  ASSERT_TRUE(a1 && a2);
  EXPECT_EQ(Name(*a1), "x");
  EXPECT_EQ(Name(*a2), "y");
}

TEST_F(WatchTest, TimeoutSecondsEndsTheStream) {
  auto w = Watch(std::string(kSlices) + "?watch=1&timeoutSeconds=1");
  EXPECT_TRUE(w->WaitEnded(3000));
  EXPECT_TRUE(w->CleanEnd());
  EXPECT_EQ(w->Status(), 200);
}

TEST_F(WatchTest, DropWatchesClosesStreams) {
  auto w = Watch(std::string(kSlices) + "?watch=1");
  http_->Post(kSlices, Slice("a"));
  ASSERT_TRUE(w->Next());
  server_->DropWatches();
  EXPECT_TRUE(w->WaitEnded());
  // New watches work after a drop.
  auto w2 = Watch(std::string(kSlices) + "?watch=1");
  auto e = w2->Next();
  ASSERT_TRUE(e);
  EXPECT_EQ(Name(*e), "a");
}

TEST_F(WatchTest, ClientDisconnectReleasesTheWatch) {
  {
    auto w = Watch(std::string(kSlices) + "?watch=1");
    http_->Post(kSlices, Slice("a"));
    ASSERT_TRUE(w->Next());
    EXPECT_EQ(server_->OpenWatchesForTest(), 1);
  }
  for (int i = 0; i < 100 && server_->OpenWatchesForTest() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->OpenWatchesForTest(), 0);
}

}  // namespace
}  // namespace dralens::sim::testing
