// The client and informer against the real embedded API server (src/sim), one convergence test
// per injected fault: each proves that the informer's cache, and the state rebuilt from its
// handler calls, end equal to the server's true state.
#include "tests/src/k8s/informer_fixture.h"

namespace dralens::k8s::informer_test {
namespace {

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

}  // namespace
}  // namespace dralens::k8s::informer_test
