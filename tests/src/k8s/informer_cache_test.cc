// The informer's compact caches against the real embedded API server: one that keeps only
// each object's hash (the cluster role's), and one that keeps projected objects.
#include "tests/src/k8s/informer_fixture.h"

namespace dralens::k8s::informer_test {
namespace {

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

}  // namespace
}  // namespace dralens::k8s::informer_test
