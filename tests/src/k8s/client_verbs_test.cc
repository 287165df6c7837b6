// The client's verbs, and UpdateWithRetry's read-modify-write under concurrent writers,
// against the real embedded API server.
#include "tests/src/k8s/informer_fixture.h"

namespace dralens::k8s::informer_test {
namespace {

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
}  // namespace dralens::k8s::informer_test
