// CRUD semantics of the embedded API server: create/get/update/patch/delete for every resource,
// resourceVersion, generation, conflicts, generateName, the status subresource, finalizers.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/src/sim/sim_test_util.h"

namespace dralens::sim::testing {
namespace {

class CrudTest : public ServerTest {};

struct Case {
  std::string collection;
  json object;
  std::string label;
};

TEST_F(CrudTest, CrudForEveryResource) {
  std::vector<Case> cases = {
      {kSlices, Slice("s1"), "slice"},
      {kClasses, DeviceClass("gpu.dralens.dev"), "class"},
      {Claims(), Claim("c1"), "claim"},
      {Pods(), Pod("p1"), "pod"},
      {kNodes, Node("node-a"), "node"},
      {Leases(), Lease("l1"), "lease"},
      {"/api/v1/namespaces", json{{"metadata", {{"name", "team-a"}}}}, "namespace"},
  };
  for (Case& c : cases) {
    SCOPED_TRACE(c.label);
    std::string name = c.object["metadata"]["name"];
    Reply created = http_->Post(c.collection, c.object);
    ASSERT_EQ(created.status, 201) << created.raw;
    EXPECT_FALSE(created.body["metadata"]["uid"].get<std::string>().empty());
    EXPECT_FALSE(created.body["metadata"]["creationTimestamp"].get<std::string>().empty());
    EXPECT_FALSE(created.Rv().empty());
    EXPECT_FALSE(created.body["kind"].get<std::string>().empty());

    Reply got = http_->Get(c.collection + "/" + name);
    ASSERT_EQ(got.status, 200) << got.raw;
    EXPECT_EQ(got.body, created.body);

    Reply list = http_->Get(c.collection);
    ASSERT_EQ(list.status, 200);
    EXPECT_EQ(list.body["kind"], created.body["kind"].get<std::string>() + "List");
    ASSERT_EQ(list.body["items"].size(), 1u);
    // Items of a typed list carry no kind/apiVersion, like the real server's.
    EXPECT_FALSE(list.body["items"][0].contains("kind"));

    json updated = got.body;
    updated["metadata"]["labels"] = {{"team", "a"}};
    Reply put = http_->Put(c.collection + "/" + name, updated);
    ASSERT_EQ(put.status, 200) << put.raw;
    EXPECT_GT(RvOf(put.body), RvOf(created.body));
    EXPECT_EQ(put.body["metadata"]["labels"]["team"], "a");

    Reply patched =
        http_->Patch(c.collection + "/" + name, {{"metadata", {{"annotations", {{"note", "x"}}}}}});
    ASSERT_EQ(patched.status, 200) << patched.raw;
    EXPECT_EQ(patched.body["metadata"]["annotations"]["note"], "x");
    EXPECT_EQ(patched.body["metadata"]["labels"]["team"], "a");

    Reply del = http_->Delete(c.collection + "/" + name);
    ASSERT_EQ(del.status, 200) << del.raw;
    Reply gone = http_->Get(c.collection + "/" + name);
    EXPECT_EQ(gone.status, 404);
    EXPECT_EQ(gone.Reason(), "NotFound");
    EXPECT_EQ(gone.body["code"], 404);
    EXPECT_EQ(gone.body["details"]["name"], name);
  }
}

TEST_F(CrudTest, NotFoundMessagesNameResourceAndGroup) {
  Reply r = http_->Get(Claims() + "/nope");
  ASSERT_EQ(r.status, 404);
  EXPECT_EQ(r.body["kind"], "Status");
  EXPECT_EQ(r.body["status"], "Failure");
  EXPECT_EQ(r.body["message"], "resourceclaims.resource.k8s.io \"nope\" not found");
  EXPECT_EQ(r.body["details"]["group"], "resource.k8s.io");
  EXPECT_EQ(r.body["details"]["kind"], "resourceclaims");
  Reply p = http_->Get(Pods() + "/nope");
  EXPECT_EQ(p.body["message"], "pods \"nope\" not found");
}

TEST_F(CrudTest, ResourceVersionIsOneIncreasingCounter) {
  std::vector<uint64_t> rvs;
  rvs.push_back(RvOf(http_->Post(kSlices, Slice("a")).body));
  rvs.push_back(RvOf(http_->Post(Claims(), Claim("b")).body));
  rvs.push_back(RvOf(http_->Post(kNodes, Node("n")).body));
  json a = http_->Get(std::string(kSlices) + "/a").body;
  a["spec"]["pool"]["generation"] = 2;
  rvs.push_back(RvOf(http_->Put(std::string(kSlices) + "/a", a).body));
  for (size_t i = 1; i < rvs.size(); ++i) {
    EXPECT_GT(rvs[i], rvs[i - 1]);
  }
  EXPECT_EQ(server_->ResourceVersionForTest(), rvs.back());
  // A list reports the newest RV overall.
  EXPECT_EQ(http_->Get(kClasses).Rv(), std::to_string(rvs.back()));
}

TEST_F(CrudTest, StaleUpdateConflicts) {
  json v1 = http_->Post(kSlices, Slice("a")).body;
  json first = v1;
  first["metadata"]["labels"] = {{"x", "1"}};
  ASSERT_EQ(http_->Put(std::string(kSlices) + "/a", first).status, 200);
  json stale = v1;
  stale["metadata"]["labels"] = {{"x", "2"}};
  Reply r = http_->Put(std::string(kSlices) + "/a", stale);
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(r.Reason(), "Conflict");
  EXPECT_NE(r.body["message"].get<std::string>().find("the object has been modified"),
            std::string::npos);
  // A stale resourceVersion in a merge patch is a precondition too.
  Reply p = http_->Patch(std::string(kSlices) + "/a",
                         {{"metadata", {{"resourceVersion", v1["metadata"]["resourceVersion"]}}}});
  EXPECT_EQ(p.status, 409);
}

TEST_F(CrudTest, UpdateWithoutResourceVersionIsUnconditional) {
  json v1 = http_->Post(kSlices, Slice("a")).body;
  json next = v1;
  next["metadata"].erase("resourceVersion");
  next["metadata"]["labels"] = {{"x", "1"}};
  EXPECT_EQ(http_->Put(std::string(kSlices) + "/a", next).status, 200);
}

TEST_F(CrudTest, UpdateNameMismatchAndMissingObject) {
  json s = http_->Post(kSlices, Slice("a")).body;
  json other = s;
  other["metadata"]["name"] = "b";
  Reply r = http_->Put(std::string(kSlices) + "/a", other);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.Reason(), "BadRequest");
  Reply missing = http_->Put(std::string(kSlices) + "/b", other);
  EXPECT_EQ(missing.status, 404);
  // Leases are created by PUT, as in the real server.
  EXPECT_EQ(http_->Put(Leases() + "/leader", Lease("leader")).status, 201);
}

TEST_F(CrudTest, CreateRejectsDuplicatesAndNamespaceMismatch) {
  ASSERT_EQ(http_->Post(Claims(), Claim("c")).status, 201);
  Reply dup = http_->Post(Claims(), Claim("c"));
  EXPECT_EQ(dup.status, 409);
  EXPECT_EQ(dup.Reason(), "AlreadyExists");
  EXPECT_EQ(dup.body["message"], "resourceclaims.resource.k8s.io \"c\" already exists");
  json other = Claim("d");
  other["metadata"]["namespace"] = "other";
  EXPECT_EQ(http_->Post(Claims(), other).status, 400);
  json same = Claim("e");
  same["metadata"]["namespace"] = "default";
  EXPECT_EQ(http_->Post(Claims(), same).status, 201);
  // Kind and apiVersion must match the endpoint when given; they default when absent.
  json wrong_kind = Claim("f");
  wrong_kind["kind"] = "ResourceSlice";
  EXPECT_EQ(http_->Post(Claims(), wrong_kind).status, 400);
  json no_kind = Claim("g");
  no_kind.erase("kind");
  no_kind.erase("apiVersion");
  Reply g = http_->Post(Claims(), no_kind);
  ASSERT_EQ(g.status, 201);
  EXPECT_EQ(g.body["kind"], "ResourceClaim");
  EXPECT_EQ(http_->PostRaw(Claims(), "{not json", "application/json").status, 400);
}

TEST_F(CrudTest, GenerateName) {
  std::set<std::string> names;
  for (int i = 0; i < 5; ++i) {
    json s = Slice("");
    s["metadata"].erase("name");
    s["metadata"]["generateName"] = "node-a-gpu.dralens.dev-";
    Reply r = http_->Post(kSlices, s);
    ASSERT_EQ(r.status, 201) << r.raw;
    std::string name = r.body["metadata"]["name"];
    ASSERT_EQ(name.size(), std::string("node-a-gpu.dralens.dev-").size() + 5);
    EXPECT_EQ(name.rfind("node-a-gpu.dralens.dev-", 0), 0u);
    names.insert(name);
  }
  EXPECT_EQ(names.size(), 5u);
  json none = Slice("");
  none["metadata"].erase("name");
  Reply r = http_->Post(kSlices, none);
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(r.body["details"]["causes"][0]["field"], "metadata.name");
}

TEST_F(CrudTest, GenerationBumpsOnlyOnSpecChange) {
  json s = http_->Post(kSlices, Slice("a")).body;
  EXPECT_EQ(s["metadata"]["generation"], 1);
  s["metadata"]["labels"] = {{"x", "y"}};
  s = http_->Put(std::string(kSlices) + "/a", s).body;
  EXPECT_EQ(s["metadata"]["generation"], 1);
  s["spec"]["pool"]["generation"] = 7;
  s = http_->Put(std::string(kSlices) + "/a", s).body;
  EXPECT_EQ(s["metadata"]["generation"], 2);
  // Server-owned metadata cannot be overwritten by a client.
  json tampered = s;
  tampered["metadata"]["generation"] = 99;
  tampered["metadata"]["creationTimestamp"] = "2000-01-01T00:00:00Z";
  Reply r = http_->Put(std::string(kSlices) + "/a", tampered);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body["metadata"]["generation"], 2);
  EXPECT_EQ(r.body["metadata"]["creationTimestamp"], s["metadata"]["creationTimestamp"]);
}

TEST_F(CrudTest, NoOpUpdateKeepsResourceVersion) {
  json s = http_->Post(kSlices, Slice("a")).body;
  Reply r = http_->Put(std::string(kSlices) + "/a", s);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.Rv(), s["metadata"]["resourceVersion"]);
}

TEST_F(CrudTest, StatusSubresourceSplit) {
  json c = http_->Post(Claims(), Claim("c")).body;
  EXPECT_EQ(c["status"], json::object());  // status is dropped on create
  // The main resource ignores status changes...
  json with_status = c;
  json result = {
      {"request", "gpu"}, {"driver", "gpu.dralens.dev"}, {"pool", "node-a"}, {"device", "gpu-0"}};
  json allocation = json::object();
  allocation["devices"]["results"] = json::array({result});
  with_status["status"] = {{"allocation", allocation}};
  with_status["metadata"]["labels"] = {{"a", "b"}};
  Reply main = http_->Put(Claims() + "/c", with_status);
  ASSERT_EQ(main.status, 200) << main.raw;
  EXPECT_EQ(main.body["status"], json::object());
  EXPECT_EQ(main.body["metadata"]["labels"]["a"], "b");
  // ...and /status takes only status.
  json status_write = main.body;
  status_write["status"] = with_status["status"];
  status_write["metadata"]["labels"] = {{"a", "changed"}};
  Reply st = http_->Put(Claims() + "/c/status", status_write);
  ASSERT_EQ(st.status, 200) << st.raw;
  EXPECT_EQ(st.body["status"]["allocation"]["devices"]["results"][0]["device"], "gpu-0");
  EXPECT_EQ(st.body["metadata"]["labels"]["a"], "b");
  EXPECT_EQ(st.body["metadata"]["generation"], 1);
  // Status patches work on /status too.
  Reply sp = http_->Patch(
      Claims() + "/c/status",
      {{"status", {{"reservedFor", {{{"resource", "pods"}, {"name", "p"}, {"uid", "u1"}}}}}}});
  ASSERT_EQ(sp.status, 200) << sp.raw;
  EXPECT_EQ(sp.body["status"]["reservedFor"].size(), 1u);
  // Claim spec is immutable.
  json changed = sp.body;
  changed["spec"]["devices"]["requests"][0]["name"] = "other";
  Reply imm = http_->Put(Claims() + "/c", changed);
  EXPECT_EQ(imm.status, 422);
  EXPECT_EQ(imm.body["details"]["causes"][0]["field"], "spec");
  // Pods: status on create is replaced by Pending, and /status writes work.
  json pod = Pod("p");
  pod["status"] = {{"phase", "Running"}};
  json created = http_->Post(Pods(), pod).body;
  EXPECT_EQ(created["status"]["phase"], "Pending");
  created["status"]["phase"] = "Running";
  Reply ps = http_->Put(Pods() + "/p/status", created);
  ASSERT_EQ(ps.status, 200);
  EXPECT_EQ(ps.body["status"]["phase"], "Running");
  EXPECT_EQ(http_->Put(std::string(kSlices) + "/x/status", Slice("x")).status, 404);
}

TEST_F(CrudTest, ClaimDefaultsAreApplied) {
  json c = http_->Post(Claims(), Claim("c")).body;
  json exactly = c["spec"]["devices"]["requests"][0]["exactly"];
  EXPECT_EQ(exactly["allocationMode"], "ExactCount");
  EXPECT_EQ(exactly["count"], 1);
}

TEST_F(CrudTest, FinalizersDeferDeletion) {
  json c = Claim("c");
  c["metadata"]["finalizers"] = {"resource.kubernetes.io/delete-protection"};
  json created = http_->Post(Claims(), c).body;
  Reply del = http_->Delete(Claims() + "/c");
  ASSERT_EQ(del.status, 200);
  EXPECT_TRUE(del.body["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(del.body["metadata"]["generation"], 2);
  Reply still = http_->Get(Claims() + "/c");
  ASSERT_EQ(still.status, 200);
  // Deleting again changes nothing.
  Reply again = http_->Delete(Claims() + "/c");
  EXPECT_EQ(again.Rv(), still.Rv());
  // No finalizer may be added while deleting.
  Reply add = http_->Patch(
      Claims() + "/c",
      {{"metadata",
        {{"finalizers", {"resource.kubernetes.io/delete-protection", "example.com/more"}}}}});
  EXPECT_EQ(add.status, 422);
  EXPECT_EQ(add.body["details"]["causes"][0]["field"], "metadata.finalizers");
  // Removing the last finalizer completes the delete.
  Reply patched = http_->Patch(Claims() + "/c", {{"metadata", {{"finalizers", nullptr}}}});
  ASSERT_EQ(patched.status, 200) << patched.raw;
  EXPECT_EQ(http_->Get(Claims() + "/c").status, 404);
}

TEST_F(CrudTest, DeletePreconditions) {
  json s = http_->Post(kSlices, Slice("a")).body;
  Reply bad_uid =
      http_->Delete(std::string(kSlices) + "/a", {{"kind", "DeleteOptions"},
                                                  {"apiVersion", "v1"},
                                                  {"preconditions", {{"uid", "not-the-uid"}}}});
  EXPECT_EQ(bad_uid.status, 409);
  EXPECT_EQ(bad_uid.Reason(), "Conflict");
  Reply bad_rv =
      http_->Delete(std::string(kSlices) + "/a", {{"preconditions", {{"resourceVersion", "1"}}}});
  EXPECT_EQ(bad_rv.status, 409);
  Reply ok = http_->Delete(
      std::string(kSlices) + "/a",
      {{"preconditions",
        {{"uid", s["metadata"]["uid"]}, {"resourceVersion", s["metadata"]["resourceVersion"]}}}});
  ASSERT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body["kind"], "Status");
  EXPECT_EQ(ok.body["status"], "Success");
  EXPECT_EQ(ok.body["details"]["uid"], s["metadata"]["uid"]);
  // Pods answer with the deleted object.
  http_->Post(Pods(), Pod("p"));
  Reply pod = http_->Delete(Pods() + "/p");
  EXPECT_EQ(pod.body["kind"], "Pod");
  EXPECT_EQ(http_->Delete(Pods() + "/p").status, 404);
}

TEST_F(CrudTest, DeleteCollectionWithSelector) {
  for (const char* n : {"a", "b", "c"}) {
    json s = Slice(n, std::string("node-") + n);
    s["metadata"]["labels"] = {{"node", n}};
    ASSERT_EQ(http_->Post(kSlices, s).status, 201);
  }
  Reply r = http_->Delete(std::string(kSlices) + "?labelSelector=node%20in%20(a,b)");
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["kind"], "ResourceSliceList");
  EXPECT_EQ(r.body["items"].size(), 2u);
  Reply left = http_->Get(kSlices);
  ASSERT_EQ(left.body["items"].size(), 1u);
  EXPECT_EQ(left.body["items"][0]["metadata"]["name"], "c");
}

// The kubelet's wipe (at its start, and 30 s after a plugin went away): DeleteCollection with
// the field selector spec.nodeName=<node>,spec.driver=<driver>. Other nodes' slices and other
// drivers' slices of the node stay.
TEST_F(CrudTest, DeleteCollectionWithTheKubeletsFieldSelector) {
  ASSERT_EQ(http_->Post(kSlices, Slice("ours-1", "node-a")).status, 201);
  ASSERT_EQ(http_->Post(kSlices, Slice("ours-2", "node-a")).status, 201);
  ASSERT_EQ(http_->Post(kSlices, Slice("other-node", "node-b")).status, 201);
  ASSERT_EQ(http_->Post(kSlices, Slice("other-driver", "node-a", "nic.example.com")).status, 201);
  Reply r = http_->Delete(std::string(kSlices) +
                          "?fieldSelector=spec.nodeName%3Dnode-a,spec.driver%3Dgpu.dralens.dev");
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["items"].size(), 2u);
  std::vector<std::string> left;
  const Reply list = http_->Get(kSlices);
  for (const json& item : list.body["items"]) {
    left.push_back(item["metadata"]["name"]);
  }
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"other-driver", "other-node"}));
}

TEST_F(CrudTest, MergePatchRfc7386) {
  json s = Slice("a");
  s["metadata"]["labels"] = {{"keep", "1"}, {"drop", "2"}};
  http_->Post(kSlices, s);
  Reply r = http_->Patch(std::string(kSlices) + "/a",
                         {{"metadata", {{"labels", {{"drop", nullptr}, {"add", "3"}}}}},
                          {"spec", {{"pool", {{"generation", 5}}}}}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["metadata"]["labels"], (json{{"keep", "1"}, {"add", "3"}}));
  EXPECT_EQ(r.body["spec"]["pool"]["generation"], 5);
  EXPECT_EQ(r.body["spec"]["pool"]["name"], "node-a");  // siblings kept
  EXPECT_EQ(r.body["spec"]["devices"].size(), 1u);
  EXPECT_EQ(r.body["metadata"]["generation"], 2);
  // Arrays are replaced wholesale.
  Reply arr = http_->Patch(std::string(kSlices) + "/a", {{"spec", {{"devices", json::array()}}}});
  ASSERT_EQ(arr.status, 200);
  EXPECT_TRUE(arr.body["spec"]["devices"].empty());
  // JSON patch works too; strategic merge patch is not supported here.
  Reply jp = http_->Patch(
      std::string(kSlices) + "/a",
      json::array({{{"op", "replace"}, {"path", "/spec/pool/generation"}, {"value", 6}}}),
      "application/json-patch+json");
  ASSERT_EQ(jp.status, 200) << jp.raw;
  EXPECT_EQ(jp.body["spec"]["pool"]["generation"], 6);
  Reply smp = http_->Patch(std::string(kSlices) + "/a", json::object(),
                           "application/strategic-merge-patch+json");
  EXPECT_EQ(smp.status, 415);
  EXPECT_EQ(smp.Reason(), "UnsupportedMediaType");
  EXPECT_EQ(http_->Patch(std::string(kSlices) + "/missing", json::object()).status, 404);
  // A patch that makes the object invalid is rejected and changes nothing.
  Reply invalid = http_->Patch(std::string(kSlices) + "/a", {{"spec", {{"driver", "Bad_Driver"}}}});
  EXPECT_EQ(invalid.status, 422);
}

TEST_F(CrudTest, ContentTypeAndMethodChecks) {
  Reply yaml = http_->PostRaw(kSlices, Slice("a").dump(), "application/yaml");
  EXPECT_EQ(yaml.status, 415);
  EXPECT_EQ(yaml.body["code"], 415);
  EXPECT_EQ(yaml.Reason(), "UnsupportedMediaType");
  Reply charset = http_->PostRaw(kSlices, Slice("a").dump(), "application/json; charset=utf-8");
  EXPECT_EQ(charset.status, 201);
  EXPECT_EQ(http_->Post(std::string(kSlices) + "/a", Slice("a")).status, 405);
  EXPECT_EQ(http_->Post(kAllClaims, Claim("x")).status, 405);
  Reply unknown = http_->Get("/apis/resource.k8s.io/v1/widgets");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.body["kind"], "Status");
  EXPECT_EQ(http_->Get("/nothing/here").status, 404);
}

TEST_F(CrudTest, CrossNamespaceListsSeeEveryNamespace) {
  http_->Post(Claims("a"), Claim("x"));
  http_->Post(Claims("b"), Claim("x"));
  http_->Post(Pods("a"), Pod("p"));
  Reply all = http_->Get(kAllClaims);
  ASSERT_EQ(all.status, 200);
  EXPECT_EQ(all.body["items"].size(), 2u);
  EXPECT_EQ(http_->Get(Claims("a")).body["items"].size(), 1u);
  EXPECT_EQ(http_->Get("/api/v1/pods").body["items"].size(), 1u);
}

}  // namespace
}  // namespace dralens::sim::testing
