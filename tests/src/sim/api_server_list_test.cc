// LIST semantics: label and field selectors, paging with limit/continue, resourceVersion.
#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "tests/src/sim/sim_test_util.h"

namespace dralens::sim::testing {
namespace {

class ListTest : public ServerTest {
 protected:
  std::vector<std::string> Names(const Reply& r) {
    std::vector<std::string> out;
    for (const json& item : r.body["items"]) {
      out.push_back(item["metadata"]["name"]);
    }
    return out;
  }
  void SeedSlices() {
    // name, node, driver, labels
    struct S {
      const char* name;
      const char* node;
      const char* driver;
      json labels;
    };
    std::vector<S> slices = {
        {"a", "node-a", "gpu.dralens.dev", {{"tier", "gold"}, {"zone", "z1"}}},
        {"b", "node-b", "gpu.dralens.dev", {{"tier", "silver"}, {"zone", "z1"}}},
        {"c", "node-a", "net.example.com", {{"tier", "gold"}}},
        {"d", "node-c", "gpu.dralens.dev", json::object()},
    };
    for (S& s : slices) {
      json obj = Slice(s.name, s.node, s.driver);
      obj["metadata"]["labels"] = s.labels;
      ASSERT_EQ(http_->Post(kSlices, obj).status, 201);
    }
  }
};

TEST_F(ListTest, LabelSelectors) {
  SeedSlices();
  auto q = [&](const std::string& sel) {
    return Names(http_->Get(std::string(kSlices) + "?labelSelector=" + sel));
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(q("tier%3Dgold"), (V{"a", "c"}));
  EXPECT_EQ(q("tier%3D%3Dgold"), (V{"a", "c"}));
  EXPECT_EQ(q("tier!%3Dgold"), (V{"b", "d"}));  // includes objects without the label
  EXPECT_EQ(q("tier%20in%20(gold,silver)"), (V{"a", "b", "c"}));
  EXPECT_EQ(q("tier%20notin%20(gold)"), (V{"b", "d"}));
  EXPECT_EQ(q("zone"), (V{"a", "b"}));
  EXPECT_EQ(q("!zone"), (V{"c", "d"}));
  EXPECT_EQ(q("tier%3Dgold,zone%3Dz1"), (V{"a"}));
  Reply bad = http_->Get(std::string(kSlices) + "?labelSelector=tier%3D%3D%3Dx");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.Reason(), "BadRequest");
  EXPECT_EQ(http_->Get(std::string(kSlices) + "?labelSelector=-bad-key").status, 400);
}

TEST_F(ListTest, FieldSelectors) {
  SeedSlices();
  auto q = [&](const std::string& sel) {
    return Names(http_->Get(std::string(kSlices) + "?fieldSelector=" + sel));
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(q("spec.nodeName%3Dnode-a"), (V{"a", "c"}));
  EXPECT_EQ(q("spec.driver%3Dgpu.dralens.dev,spec.nodeName!%3Dnode-a"), (V{"b", "d"}));
  EXPECT_EQ(q("metadata.name%3D%3Db"), (V{"b"}));
  Reply bad = http_->Get(std::string(kSlices) + "?fieldSelector=spec.pool.name%3Dx");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body["message"], "field label not supported: spec.pool.name");
  // Claims support only metadata fields; pods support spec.nodeName and status.phase.
  EXPECT_EQ(http_->Get(std::string(kAllClaims) + "?fieldSelector=spec.nodeName%3Dx").status, 400);
  http_->Post(Pods("a"), Pod("p1", "node-a"));
  http_->Post(Pods("b"), Pod("p2", "node-b"));
  Reply pods = http_->Get("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-b");
  ASSERT_EQ(pods.status, 200);
  EXPECT_EQ(Names(pods), (V{"p2"}));
  EXPECT_EQ(Names(http_->Get("/api/v1/pods?fieldSelector=status.phase%3DPending")).size(), 2u);
  EXPECT_EQ(Names(http_->Get("/api/v1/pods?fieldSelector=metadata.namespace%3Da")), (V{"p1"}));
}

TEST_F(ListTest, PagingWithLimitAndContinue) {
  for (int i = 0; i < 7; ++i) {
    ASSERT_EQ(http_->Post(kSlices, Slice("s" + std::to_string(i))).status, 201);
  }
  std::vector<std::string> all;
  std::string cont;
  std::string first_rv;
  int pages = 0;
  do {
    std::string path = std::string(kSlices) + "?limit=3";
    if (!cont.empty()) {
      path += "&continue=" + cont;
    }
    Reply r = http_->Get(path);
    ASSERT_EQ(r.status, 200) << r.raw;
    if (first_rv.empty()) {
      first_rv = r.Rv();
      EXPECT_EQ(r.body["metadata"]["remainingItemCount"], 4);
    }
    EXPECT_EQ(r.Rv(), first_rv);  // every page is the same snapshot
    for (const std::string& n : Names(r)) {
      all.push_back(n);
    }
    cont = r.body["metadata"].value("continue", "");
    ++pages;
    if (pages == 1) {
      // Changes after the first page do not show up in later pages.
      ASSERT_EQ(http_->Post(kSlices, Slice("s9")).status, 201);
      ASSERT_EQ(http_->Delete(std::string(kSlices) + "/s5").status, 200);
    }
  } while (!cont.empty());
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(all, (std::vector<std::string>{"s0", "s1", "s2", "s3", "s4", "s5", "s6"}));
}

TEST_F(ListTest, PagingWithSelector) {
  SeedSlices();
  Reply r = http_->Get(std::string(kSlices) + "?limit=1&labelSelector=tier%3Dgold");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(Names(r), (std::vector<std::string>{"a"}));
  EXPECT_FALSE(r.body["metadata"].contains("remainingItemCount"));
  std::string cont = r.body["metadata"]["continue"];
  Reply r2 =
      http_->Get(std::string(kSlices) + "?limit=1&labelSelector=tier%3Dgold&continue=" + cont);
  EXPECT_EQ(Names(r2), (std::vector<std::string>{"c"}));
  EXPECT_FALSE(r2.body["metadata"].contains("continue"));
}

TEST_F(ListTest, ExpiredContinueIsGone) {
  for (int i = 0; i < 3; ++i) {
    http_->Post(kSlices, Slice("s" + std::to_string(i)));
  }
  Reply r = http_->Get(std::string(kSlices) + "?limit=1");
  std::string cont = r.body["metadata"]["continue"];
  http_->Post(kSlices, Slice("later"));
  server_->CompactHistory();
  Reply expired = http_->Get(std::string(kSlices) + "?limit=1&continue=" + cont);
  EXPECT_EQ(expired.status, 410);
  EXPECT_EQ(expired.Reason(), "Expired");
  EXPECT_EQ(expired.body["code"], 410);
  EXPECT_EQ(http_->Get(std::string(kSlices) + "?continue=garbage!").status, 400);
  EXPECT_EQ(http_->Get(std::string(kSlices) + "?continue=" + cont + "&resourceVersion=1").status,
            400);
}

TEST_F(ListTest, ResourceVersionParameters) {
  json a = http_->Post(kSlices, Slice("a")).body;
  std::string rv_a = a["metadata"]["resourceVersion"];
  http_->Post(kSlices, Slice("b"));
  // Exact reads a past snapshot.
  Reply exact =
      http_->Get(std::string(kSlices) + "?resourceVersion=" + rv_a + "&resourceVersionMatch=Exact");
  ASSERT_EQ(exact.status, 200) << exact.raw;
  EXPECT_EQ(Names(exact), (std::vector<std::string>{"a"}));
  EXPECT_EQ(exact.Rv(), rv_a);
  // NotOlderThan (and the legacy default) read the newest state.
  EXPECT_EQ(Names(http_->Get(std::string(kSlices) + "?resourceVersion=" + rv_a)).size(), 2u);
  EXPECT_EQ(Names(http_->Get(std::string(kSlices) + "?resourceVersion=0")).size(), 2u);
  // A resourceVersion from the future times out like the real server's.
  Reply future = http_->Get(std::string(kSlices) + "?resourceVersion=999999");
  EXPECT_EQ(future.status, 504);
  EXPECT_EQ(future.Reason(), "Timeout");
  EXPECT_EQ(http_->Get(std::string(kSlices) + "?resourceVersionMatch=Exact").status, 400);
  server_->CompactHistory();
  Reply old =
      http_->Get(std::string(kSlices) + "?resourceVersion=" + rv_a + "&resourceVersionMatch=Exact");
  EXPECT_EQ(old.status, 410);
}

}  // namespace
}  // namespace dralens::sim::testing
