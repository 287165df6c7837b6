// `dralens node` as a kubelet sees it: the real binary with a simulated GPU node, against the
// embedded API server, driven over its real Unix sockets by gRPC clients built from our protos.
// Also the crash-injection loop: kill the node (the preparer's test hook calls _exit(137), as
// SIGKILL would) at every step of prepare and unprepare, restart it, and check that nothing
// leaked, no device is prepared twice and the answer on retry is the same.
#include "tests/integration/node_plugin_fixture.h"

namespace dralens::node_plugin_test {
namespace {

TEST_F(NodePluginTest, PublishesSlicesRegistersAndPreparesOverV1AndV1beta1) {
  StartNode();
  // Not ready until the kubelet acknowledged the registration.
  EXPECT_EQ(Readyz(), 503);
  Register();
  int ready = 0;
  for (int i = 0; i < 250 && ready != 200; ++i) {
    ready = Readyz();
    if (ready != 200) {
      usleep(20000);
    }
  }
  EXPECT_EQ(ready, 200) << node().Output();

  // The node's pool is on the server: 8 full GPUs, owned by the Node, spec.nodeName set.
  k8s::ListOptions options;
  options.field_selector = absl::StrCat("spec.nodeName=", kNode, ",spec.driver=", kDriver);
  auto slices = client().List(k8s::kResourceSlices, "", options);
  ASSERT_TRUE(slices.ok()) << slices.status();
  std::vector<std::string> names;
  for (const json& s : slices->items) {
    EXPECT_EQ(s["spec"]["pool"]["name"], kNode);
    EXPECT_EQ(s["metadata"]["ownerReferences"][0]["kind"], "Node");
    for (const json& d : s["spec"]["devices"]) {
      names.push_back(d["name"]);
    }
  }
  std::sort(names.begin(), names.end());
  EXPECT_THAT(names,
              ElementsAre("gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7"));

  // An empty request (the liveness probe) gets an empty answer.
  dra_v1::NodePrepareResourcesResponse empty;
  ASSERT_TRUE(PrepareV1({}, &empty).ok());
  EXPECT_THAT(empty.claims(), IsEmpty());

  const Claim a = AllocatedClaim("train-a", "gpu-3");
  const std::string want =
      absl::StrCat("gpu-3|", kNode, "|gpu,|k8s.gpu.dralens.dev/claim=", a.uid, "-gpu-3,");

  // v1 prepare writes the CDI spec and checkpoints the claim.
  dra_v1::NodePrepareResourcesResponse v1;
  ASSERT_TRUE(PrepareV1({a}, &v1).ok());
  ASSERT_EQ(v1.claims().size(), 1u);
  EXPECT_THAT(Flatten(v1.claims().at(a.uid)), ElementsAre(want));
  EXPECT_TRUE(fs::exists(CdiSpecOf(a)));
  EXPECT_THAT(CheckpointedUids(), ElementsAre(a.uid));
  const int validated = std::system(absl::StrCat("/usr/bin/python3 ", DRALENS_SOURCE_DIR,
                                                 "/tests/schema/validate_cdi.py --schema-dir ",
                                                 DRALENS_SCHEMA_DIR, " ", CdiSpecOf(a))
                                        .c_str());
  EXPECT_EQ(validated, 0);

  // v1beta1 re-prepare (the kubelet restarted) returns the same answer.
  {
    dra_v1beta1::NodePrepareResourcesRequest request;
    Add(request, a);
    dra_v1beta1::NodePrepareResourcesResponse response;
    grpc::Status s = V1beta1()->NodePrepareResources(Context().get(), request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(response.claims().size(), 1u);
    EXPECT_THAT(Flatten(response.claims().at(a.uid)), ElementsAre(want));
  }

  // Per-claim errors do not fail the batch: a device we do not own, a claim that was replaced,
  // and a device already prepared for another claim, next to a good claim.
  const Claim foreign = AllocatedClaim("foreign", "gpu-0", "node-b");
  const Claim replaced{"train-a", "00000000-0000-0000-0000-00000000dead"};
  const Claim taken = AllocatedClaim("taken", "gpu-3");
  const Claim b = AllocatedClaim("train-b", "gpu-5");
  dra_v1::NodePrepareResourcesResponse mixed;
  ASSERT_TRUE(PrepareV1({foreign, replaced, taken, b}, &mixed).ok());
  ASSERT_EQ(mixed.claims().size(), 4u);
  EXPECT_THAT(mixed.claims().at(foreign.uid).error(), HasSubstr("node-b"));
  EXPECT_THAT(mixed.claims().at(replaced.uid).error(), HasSubstr("replaced"));
  EXPECT_THAT(mixed.claims().at(taken.uid).error(), HasSubstr("gpu-3"));
  EXPECT_TRUE(mixed.claims().at(b.uid).error().empty()) << mixed.claims().at(b.uid).error();
  EXPECT_FALSE(fs::exists(CdiSpecOf(taken)));

  // Unprepare over v1, then again over v1beta1: both succeed, the spec is gone.
  dra_v1::NodeUnprepareResourcesResponse un;
  ASSERT_TRUE(UnprepareV1({a, b}, &un).ok());
  ASSERT_EQ(un.claims().size(), 2u);
  EXPECT_EQ(un.claims().at(a.uid).error(), "");
  EXPECT_EQ(un.claims().at(b.uid).error(), "");
  EXPECT_FALSE(fs::exists(CdiSpecOf(a)));
  {
    dra_v1beta1::NodeUnprepareResourcesRequest request;
    Add(request, a);
    dra_v1beta1::NodeUnprepareResourcesResponse response;
    grpc::Status s = V1beta1()->NodeUnprepareResources(Context().get(), request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(response.claims().size(), 1u);
    EXPECT_EQ(response.claims().at(a.uid).error(), "");
  }
  EXPECT_THAT(ListDir(CdiRoot()), IsEmpty());
  EXPECT_THAT(CheckpointedUids(), IsEmpty());

  // Now that gpu-3 is free, the claim that was refused prepares.
  dra_v1::NodePrepareResourcesResponse retry;
  ASSERT_TRUE(PrepareV1({taken}, &retry).ok());
  EXPECT_EQ(retry.claims().at(taken.uid).error(), "");

  // The metrics endpoint saw the API requests the driver made.
  {
    httplib::Client c("127.0.0.1", metrics_port());
    auto res = c.Get("/metrics");
    ASSERT_TRUE(res);
    EXPECT_THAT(res->body, HasSubstr("resource=\"resourceclaims\""));
    EXPECT_THAT(res->body, HasSubstr("resource=\"resourceslices\""));
  }

  StopNode();
  // Slices stay published across a restart (the kubelet, not the plugin, wipes them) and a
  // restarted node finds its prepared claim in the checkpoint without asking again.
  StartNode();
  dra_v1::NodePrepareResourcesResponse again;
  ASSERT_TRUE(PrepareV1({taken}, &again).ok());
  EXPECT_EQ(again.claims().at(taken.uid).error(), "");
  ASSERT_EQ(again.claims().at(taken.uid).devices_size(), 1);
  EXPECT_EQ(again.claims().at(taken.uid).devices(0).device_name(), "gpu-3");
  StopNode();
}

TEST_F(NodePluginTest, RepublishesSlicesTheKubeletWipedAtStart) {
  StartNode();
  StopNode();
  // The kubelet wipes the node's slices when it starts and 30 s after the plugin went away.
  k8s::ListOptions options;
  options.field_selector = absl::StrCat("spec.nodeName=", kNode, ",spec.driver=", kDriver);
  ASSERT_TRUE(client().DeleteCollection(k8s::kResourceSlices, "", options).ok());
  auto listed = client().List(k8s::kResourceSlices, "", options);
  ASSERT_TRUE(listed.ok());
  ASSERT_THAT(listed->items, IsEmpty());
  StartNode();
  listed = client().List(k8s::kResourceSlices, "", options);
  ASSERT_TRUE(listed.ok());
  EXPECT_FALSE(listed->items.empty());
  StopNode();
}

// Kill the node at every step of prepare and unprepare, restart it and retry. The number of
// rounds is DRALENS_CRASH_ROUNDS (default 2); `make crash-loop` runs many more.
TEST_F(NodePluginTest, CrashAtEveryStepLeaksNothingAndNeverPreparesADeviceTwice) {
  int rounds = 2;
  if (const char* env = std::getenv("DRALENS_CRASH_ROUNDS")) {
    ASSERT_TRUE(absl::SimpleAtoi(env, &rounds)) << env;
  }
  const std::vector<std::string> prepare_steps = {"after-started", "after-cdi", "after-completed"};
  const std::vector<std::string> unprepare_steps = {"unprepare-after-cdi-removed",
                                                    "unprepare-after-checkpoint"};
  int crashes = 0;
  for (int round = 0; round < rounds; ++round) {
    for (const std::string& step : prepare_steps) {
      SCOPED_TRACE(absl::StrCat("round ", round, " prepare step ", step));
      const Claim c = AllocatedClaim(absl::StrCat("p-", round, "-", step), "gpu-1");
      const Claim rival = AllocatedClaim(absl::StrCat("r-", round, "-", step), "gpu-1");
      const std::string want =
          absl::StrCat("gpu-1|", kNode, "|gpu,|k8s.gpu.dralens.dev/claim=", c.uid, "-gpu-1,");

      StartNode(step);
      dra_v1::NodePrepareResourcesResponse lost;
      grpc::Status s = PrepareV1({c}, &lost);
      EXPECT_FALSE(s.ok()) << "the node should have died at " << step;
      ExpectKilled();
      ++crashes;

      StartNode();
      dra_v1::NodePrepareResourcesResponse retried;
      ASSERT_TRUE(PrepareV1({c}, &retried).ok());
      EXPECT_THAT(Flatten(retried.claims().at(c.uid)), ElementsAre(want));
      EXPECT_THAT(ListDir(CdiRoot()), ElementsAre("k8s.gpu.dralens.dev-claim_" + c.uid + ".json"));
      EXPECT_THAT(CheckpointedUids(), ElementsAre(c.uid));

      // The same device for another claim is refused while `c` holds it.
      dra_v1::NodePrepareResourcesResponse refused;
      ASSERT_TRUE(PrepareV1({rival}, &refused).ok());
      EXPECT_THAT(refused.claims().at(rival.uid).error(), HasSubstr("gpu-1"));
      EXPECT_FALSE(fs::exists(CdiSpecOf(rival)));

      // A second retry is a pure replay: same answer.
      dra_v1::NodePrepareResourcesResponse replay;
      ASSERT_TRUE(PrepareV1({c}, &replay).ok());
      EXPECT_THAT(Flatten(replay.claims().at(c.uid)), ElementsAre(want));

      dra_v1::NodeUnprepareResourcesResponse un;
      ASSERT_TRUE(UnprepareV1({c}, &un).ok());
      EXPECT_EQ(un.claims().at(c.uid).error(), "");
      EXPECT_THAT(ListDir(CdiRoot()), IsEmpty());
      EXPECT_THAT(CheckpointedUids(), IsEmpty());
      StopNode();
    }
    for (const std::string& step : unprepare_steps) {
      SCOPED_TRACE(absl::StrCat("round ", round, " unprepare step ", step));
      const Claim c = AllocatedClaim(absl::StrCat("u-", round, "-", step), "gpu-2");
      StartNode(step);
      dra_v1::NodePrepareResourcesResponse prepared;
      ASSERT_TRUE(PrepareV1({c}, &prepared).ok());
      ASSERT_EQ(prepared.claims().at(c.uid).error(), "");
      dra_v1::NodeUnprepareResourcesResponse lost;
      EXPECT_FALSE(UnprepareV1({c}, &lost).ok()) << "the node should have died at " << step;
      ExpectKilled();
      ++crashes;

      // The claim may already be deleted when the kubelet retries: unprepare needs only the
      // checkpoint.
      ASSERT_TRUE(client().Delete(k8s::kResourceClaims, kNs, c.name, {}).ok());
      StartNode();
      dra_v1::NodeUnprepareResourcesResponse un;
      ASSERT_TRUE(UnprepareV1({c}, &un).ok());
      EXPECT_EQ(un.claims().at(c.uid).error(), "");
      EXPECT_THAT(ListDir(CdiRoot()), IsEmpty());
      EXPECT_THAT(CheckpointedUids(), IsEmpty());
      // gpu-2 is free again.
      const Claim next = AllocatedClaim(absl::StrCat("n-", round, "-", step), "gpu-2");
      dra_v1::NodePrepareResourcesResponse ok;
      ASSERT_TRUE(PrepareV1({next}, &ok).ok());
      EXPECT_EQ(ok.claims().at(next.uid).error(), "");
      ASSERT_TRUE(UnprepareV1({next}, &un).ok());
      StopNode();
    }
  }
  EXPECT_EQ(crashes, rounds * 5);
  RecordProperty("crashes", crashes);
}

}  // namespace
}  // namespace dralens::node_plugin_test
