// Events: one store served as events.k8s.io/v1 (what dralens writes) and as core/v1 (what
// kubectl reads), with the events.k8s.io/v1 write rules and the Table kubectl prints.
#include <string>

#include "gtest/gtest.h"
#include "src/sim/event_conversion.h"
#include "src/sim/tables.h"
#include "tests/src/sim/sim_test_util.h"

namespace dralens::sim::testing {
namespace {

std::string EventsV1(const std::string& ns = "team") {
  return "/apis/events.k8s.io/v1/namespaces/" + ns + "/events";
}
std::string CoreEvents(const std::string& ns = "team") {
  return "/api/v1/namespaces/" + ns + "/events";
}

json V1Event(const std::string& name, const std::string& claim) {
  return {{"apiVersion", "events.k8s.io/v1"},
          {"kind", "Event"},
          {"metadata", {{"name", name}, {"namespace", "team"}}},
          {"eventTime", "2026-11-28T08:00:00.000001Z"},
          {"reportingController", "dralens.dev/cluster"},
          {"reportingInstance", "replica-a"},
          {"action", "Allocate"},
          {"reason", "NoCapacity"},
          {"type", "Warning"},
          {"note", "class gpu: 4 devices; 0 free"},
          {"regarding",
           {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "ResourceClaim"},
            {"namespace", "team"},
            {"name", claim},
            {"uid", "uid-" + claim}}}};
}

class EventsTest : public ServerTest {};

TEST_F(EventsTest, WrittenAsEventsV1ReadAsCoreV1) {
  Reply created = http_->Post(EventsV1(), V1Event("train.1", "train"));
  ASSERT_EQ(created.status, 201) << created.raw;
  EXPECT_EQ(created.body["apiVersion"], "events.k8s.io/v1");
  EXPECT_EQ(created.body["note"], "class gpu: 4 devices; 0 free");

  Reply core = http_->Get(CoreEvents() + "/train.1");
  ASSERT_EQ(core.status, 200) << core.raw;
  EXPECT_EQ(core.body["apiVersion"], "v1");
  EXPECT_EQ(core.body["message"], "class gpu: 4 devices; 0 free");
  EXPECT_EQ(core.body["involvedObject"]["name"], "train");
  EXPECT_EQ(core.body["reportingComponent"], "dralens.dev/cluster");
  EXPECT_FALSE(core.body.contains("note"));
  EXPECT_FALSE(core.body.contains("regarding"));
  EXPECT_EQ(core.body["metadata"]["resourceVersion"], created.body["metadata"]["resourceVersion"]);

  // kubectl describe finds a claim's events by field selector on the core face.
  ASSERT_EQ(http_->Post(EventsV1(), V1Event("other.1", "other")).status, 201);
  Reply list = http_->Get(CoreEvents() +
                          "?fieldSelector=involvedObject.name%3Dtrain,involvedObject.kind%3D"
                          "ResourceClaim");
  ASSERT_EQ(list.status, 200) << list.raw;
  ASSERT_EQ(list.body["items"].size(), 1u);
  EXPECT_EQ(list.body["items"][0]["metadata"]["name"], "train.1");
  EXPECT_EQ(list.body["kind"], "EventList");
  EXPECT_FALSE(list.body["items"][0].contains("apiVersion"));
  EXPECT_EQ(http_->Get("/api/v1/events").body["items"].size(), 2u);
}

TEST_F(EventsTest, CoreWritesLandInTheSameStore) {
  json core = CoreEventFromStorage(V1Event("legacy.1", "legacy"));
  Reply created = http_->Post(CoreEvents(), core);
  ASSERT_EQ(created.status, 201) << created.raw;
  EXPECT_EQ(created.body["apiVersion"], "v1");
  Reply v1 = http_->Get(EventsV1() + "/legacy.1");
  ASSERT_EQ(v1.status, 200);
  EXPECT_EQ(v1.body["regarding"]["name"], "legacy");
  EXPECT_EQ(v1.body["note"], "class gpu: 4 devices; 0 free");
  EXPECT_EQ(CoreEventToStorage(CoreEventFromStorage(V1Event("x", "y"))), V1Event("x", "y"));
}

TEST_F(EventsTest, SeriesPatchAndTheRulesOfEventsV1) {
  ASSERT_EQ(http_->Post(EventsV1(), V1Event("train.1", "train")).status, 201);
  Reply patched = http_->Patch(
      EventsV1() + "/train.1",
      json{{"series", {{"count", 2}, {"lastObservedTime", "2026-11-28T08:10:00.000000Z"}}}});
  ASSERT_EQ(patched.status, 200) << patched.raw;
  EXPECT_EQ(patched.body["series"]["count"], 2);
  EXPECT_EQ(http_->Get(CoreEvents() + "/train.1").body["series"]["count"], 2);

  // A series counts at least two observations.
  Reply one = http_->Patch(EventsV1() + "/train.1",
                           json{{"series", {{"count", 1}, {"lastObservedTime", "x"}}}});
  EXPECT_EQ(one.status, 422) << one.raw;
  // What the event says cannot change.
  Reply note = http_->Patch(EventsV1() + "/train.1", json{{"note", "something else"}});
  EXPECT_EQ(note.status, 422) << note.raw;
  EXPECT_NE(note.raw.find("note"), std::string::npos);

  json missing = V1Event("bad.1", "bad");
  missing.erase("reportingController");
  Reply r = http_->Post(EventsV1(), missing);
  EXPECT_EQ(r.status, 422) << r.raw;
  EXPECT_NE(r.raw.find("reportingController"), std::string::npos);

  json long_note = V1Event("bad.2", "bad");
  long_note["note"] = std::string(1025, 'x');
  EXPECT_EQ(http_->Post(EventsV1(), long_note).status, 422);
  json kind = V1Event("bad.3", "bad");
  kind["type"] = "Error";
  EXPECT_EQ(http_->Post(EventsV1(), kind).status, 422);
  json fits = V1Event("ok.1", "ok");
  fits["note"] = std::string(1024, 'x');
  EXPECT_EQ(http_->Post(EventsV1(), fits).status, 201);
}

TEST_F(EventsTest, WatchOnTheCoreFaceSeesConvertedEvents) {
  auto watch = Watch(CoreEvents() + "?watch=true");
  ASSERT_EQ(http_->Post(EventsV1(), V1Event("train.1", "train")).status, 201);
  std::optional<json> ev = watch->NextNonBookmark();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ((*ev)["type"], "ADDED");
  EXPECT_EQ((*ev)["object"]["apiVersion"], "v1");
  EXPECT_EQ((*ev)["object"]["message"], "class gpu: 4 devices; 0 free");
}

TEST_F(EventsTest, KubectlGetsATableWithTheEventColumns) {
  ASSERT_EQ(http_->Post(EventsV1(), V1Event("train.1", "train")).status, 201);
  httplib::Client client("127.0.0.1", server_->port());
  auto res = client.Get(CoreEvents(), {{"Accept",
                                        "application/json;as=Table;v=v1;g=meta.k8s.io,application/"
                                        "json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"}});
  ASSERT_TRUE(res);
  json table = json::parse(res->body);
  ASSERT_EQ(table["kind"], "Table") << res->body;
  std::vector<std::string> columns;
  for (const json& c : table["columnDefinitions"]) {
    if (c["priority"] == 0) {
      columns.push_back(c["name"]);
    }
  }
  EXPECT_EQ(columns,
            (std::vector<std::string>{"Last Seen", "Type", "Reason", "Object", "Message"}));
  ASSERT_EQ(table["rows"].size(), 1u);
  const json& cells = table["rows"][0]["cells"];
  EXPECT_EQ(cells[1], "Warning");
  EXPECT_EQ(cells[2], "NoCapacity");
  EXPECT_EQ(cells[3], "resourceclaim/train");
  EXPECT_EQ(cells[6], "class gpu: 4 devices; 0 free");
  EXPECT_EQ(cells[8], 1);
  EXPECT_EQ(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
  // Without the Table media type: the plain list.
  EXPECT_EQ(http_->Get(CoreEvents()).body["kind"], "EventList");
  // The events.k8s.io face has no columns of its own here.
  auto plain = client.Get(EventsV1(), {{"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io"}});
  ASSERT_TRUE(plain);
  EXPECT_EQ(json::parse(plain->body)["kind"], "EventList");
}

TEST(HumanDurationTest, AsKubectlPrintsAges) {
  EXPECT_EQ(HumanDuration(absl::Seconds(45)), "45s");
  EXPECT_EQ(HumanDuration(absl::Seconds(119)), "119s");
  EXPECT_EQ(HumanDuration(absl::Seconds(200)), "3m20s");
  EXPECT_EQ(HumanDuration(absl::Minutes(5)), "5m");
  EXPECT_EQ(HumanDuration(absl::Minutes(150)), "150m");
  EXPECT_EQ(HumanDuration(absl::Minutes(185)), "3h5m");
  EXPECT_EQ(HumanDuration(absl::Hours(20)), "20h");
  EXPECT_EQ(HumanDuration(absl::Hours(72)), "3d");
  EXPECT_EQ(HumanDuration(absl::Seconds(-3)), "0s");
}

}  // namespace
}  // namespace dralens::sim::testing
