// Two cluster replicas against one API server: only the leader exports cluster series, and the
// standby takes over when the leader stops (released Lease) or stops renewing (expired Lease).
#include <memory>

#include "absl/time/clock.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/leader_gate.h"
#include "gtest/gtest.h"
#include "src/k8s/leader_elector.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "src/telemetry/tracing/tracer_provider.h"

namespace dralens::exporter::cluster {
namespace {

bool Eventually(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    if (done()) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return done();
}

// One replica: its analyzer's registry behind a gate, and an elector that flips the gate.
struct Replica {
  Replica(k8s::KubeClient& client, const std::string& identity, common::Clock& clock,
          telemetry::Tracer& tracer, bool start) {
    analyzer = std::make_unique<Analyzer>(*cluster, tracer, AnalyzerOptions{{}, &clock});
    gate = std::make_unique<LeaderGate>(cluster, process);
    gate->AddTextSource(analyzer->TextSeries());
    k8s::LeaderElectionOptions options;
    options.identity = identity;
    options.lease_namespace = "dralens";
    options.lease_duration = absl::Seconds(10);
    options.renew_deadline = absl::Seconds(5);
    options.retry_period = absl::Milliseconds(20);
    options.clock = &clock;
    options.on_started_leading = [this] { gate->SetLeader(true); };
    options.on_stopped_leading = [this] { gate->SetLeader(false); };
    auto created = k8s::LeaderElector::Create(client, options);
    EXPECT_TRUE(created.ok()) << created.status();
    elector = *std::move(created);
    if (start) {
      elector->Start();
    }
  }
  ~Replica() { elector->Stop(); }

  bool ExportsClusterSeries() const { return !gate->Collect().empty(); }
  double LeaderGauge() {
    for (const auto& f : process.Collect()) {
      if (f.name == "dralens_cluster_leader") {
        return f.metric.at(0).gauge.value;
      }
    }
    return -1;
  }

  std::shared_ptr<prometheus::Registry> cluster = std::make_shared<prometheus::Registry>();
  prometheus::Registry process;
  std::unique_ptr<Analyzer> analyzer;
  std::unique_ptr<LeaderGate> gate;
  std::unique_ptr<k8s::LeaderElector> elector;
};

class LeaderElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start().ok());
    k8s::RestConfig config;
    config.server = server_.url();
    auto client = k8s::RestClient::FromConfig(config);
    ASSERT_TRUE(client.ok());
    client_ = *std::move(client);
  }

  common::FakeClock clock_;
  sim::ApiServer server_;
  std::unique_ptr<k8s::RestClient> client_;
  std::unique_ptr<telemetry::TracerProvider> tracing_ = telemetry::TracerProvider::CreateNoop();
};

TEST_F(LeaderElectionTest, OnlyTheLeaderExportsAndTheStandbyTakesOverWhenItStops) {
  auto a = std::make_unique<Replica>(*client_, "replica-a", clock_, tracing_->tracer(), true);
  auto b = std::make_unique<Replica>(*client_, "replica-b", clock_, tracing_->tracer(), true);
  ASSERT_TRUE(Eventually([&] { return a->gate->leader() || b->gate->leader(); }));
  // Rounds keep running: leadership stays with one replica while the leader renews.
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_NE(a->gate->leader(), b->gate->leader());
  Replica* leader = a->gate->leader() ? a.get() : b.get();
  Replica* standby = a->gate->leader() ? b.get() : a.get();
  EXPECT_TRUE(leader->ExportsClusterSeries());
  EXPECT_FALSE(standby->ExportsClusterSeries());
  EXPECT_EQ(leader->LeaderGauge(), 1);
  EXPECT_EQ(standby->LeaderGauge(), 0);

  // The leader stops (and releases the Lease): the standby leads without waiting for expiry.
  leader->elector->Stop();
  EXPECT_FALSE(leader->ExportsClusterSeries());
  ASSERT_TRUE(Eventually([&] { return standby->gate->leader(); }));
  EXPECT_TRUE(standby->ExportsClusterSeries());
  auto lease = client_->Get(k8s::kLeases, "dralens", "dralens-cluster");
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], standby->elector->identity());
}

TEST_F(LeaderElectionTest, AnExpiredLeaseIsTakenOverOnlyAfterTheLeaseDuration) {
  // Rounds driven by hand: `a` leads once and then stops renewing (as a crashed replica).
  Replica a(*client_, "replica-a", clock_, tracing_->tracer(), false);
  Replica b(*client_, "replica-b", clock_, tracing_->tracer(), false);
  ASSERT_TRUE(a.elector->TryAcquireOrRenewForTest());
  EXPECT_FALSE(b.elector->TryAcquireOrRenewForTest());
  clock_.Advance(absl::Seconds(9));
  EXPECT_FALSE(b.elector->TryAcquireOrRenewForTest());  // 9 s unchanged < 10 s lease
  clock_.Advance(absl::Seconds(2));
  EXPECT_TRUE(b.elector->TryAcquireOrRenewForTest());  // 11 s unchanged: expired
  EXPECT_TRUE(b.ExportsClusterSeries());
  // `a` comes back: it sees b's fresh record and steps down.
  EXPECT_FALSE(a.elector->TryAcquireOrRenewForTest());
  EXPECT_FALSE(a.ExportsClusterSeries());
  auto lease = client_->Get(k8s::kLeases, "dralens", "dralens-cluster");
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ((*lease)["spec"]["leaseTransitions"], 1);
}

}  // namespace
}  // namespace dralens::exporter::cluster
