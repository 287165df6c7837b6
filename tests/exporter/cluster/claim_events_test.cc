// Events on pending claims: one per claim per reason change, a series after 10 minutes when the
// funnel reads the same, a fleet-wide rate limit, retries, and nothing once the claim is placed.
#include "exporter/cluster/claim_events.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/feed.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "tests/exporter/cluster/scenario_util.h"

namespace dralens::exporter::cluster {
namespace {

class FakeSink : public ClaimEventSink {
 public:
  absl::StatusOr<std::string> Create(const ClaimEvent& event) override {
    if (!create_error.ok()) {
      return create_error;
    }
    created.push_back(event);
    const std::string name = event.claim + "." + std::to_string(created.size());
    counts[name] = 1;
    return name;
  }
  absl::Status UpdateSeries(const std::string& ns, const std::string& name, int32_t count,
                            absl::Time last) override {
    (void)ns;
    (void)last;
    if (counts.count(name) == 0) {
      return absl::NotFoundError("events \"" + name + "\" not found");
    }
    counts[name] = count;
    ++series_updates;
    return absl::OkStatus();
  }

  std::vector<ClaimEvent> created;
  std::map<std::string, int32_t> counts;
  int series_updates = 0;
  absl::Status create_error = absl::OkStatus();
};

class ClaimEventsTest : public ::testing::Test {
 protected:
  ClaimEventsTest()
      : analyzer_(registry_, tracer_, AnalyzerOptions{PriceTable{}, &clock_}),
        recorder_(analyzer_, sink_, registry_, Options()) {
    HandlersFor(k8s::kDeviceClasses, analyzer_).on_add(testing::Class("gpu", "true"));
  }
  ClaimEventOptions Options() {
    ClaimEventOptions o;
    o.clock = &clock_;
    o.qps = 1;
    o.burst = 3;
    o.min_pending = absl::ZeroDuration();   // ClaimsTooYoungWaitAndTheLongestPendingGoFirst
    o.min_interval = absl::ZeroDuration();  // AFlappingReasonWritesAtMostOnceAMinute
    return o;
  }
  void AddClaim(const std::string& name) {
    nlohmann::json c = testing::Claim("team", name, "gpu");
    c["metadata"]["uid"] = "uid-" + name;
    HandlersFor(k8s::kResourceClaims, analyzer_).on_add(c);
  }
  double Counted(const std::string& reason, const std::string& result) {
    return testing::Value(registry_, "dralens_cluster_claim_events_total",
                          {{"reason", reason}, {"result", result}});
  }

  prometheus::Registry registry_;
  telemetry::NoopTracer tracer_;
  common::FakeClock clock_;
  Analyzer analyzer_;
  FakeSink sink_;
  ClaimEventRecorder recorder_;
};

TEST_F(ClaimEventsTest, OneEventPerReasonThenASeriesEveryTenMinutes) {
  AddClaim("train");  // no device at all: unsatisfiable
  EXPECT_EQ(recorder_.Step(), 1);
  ASSERT_EQ(sink_.created.size(), 1u);
  const ClaimEvent& first = sink_.created[0];
  EXPECT_EQ(first.ns, "team");
  EXPECT_EQ(first.claim, "train");
  EXPECT_EQ(first.uid, "uid-train");
  EXPECT_EQ(first.reason, "Unsatisfiable");
  EXPECT_EQ(first.type, "Warning");
  EXPECT_EQ(first.note,
            "request req: class gpu: 0 devices; 0 match the request's selectors; 0 "
            "untainted; 0 free; needs 1");
  EXPECT_EQ(Counted("Unsatisfiable", "created"), 1);

  // Nothing new: nothing written, however often it looks.
  clock_.Advance(absl::Minutes(9));
  EXPECT_EQ(recorder_.Step(), 0);
  // Ten minutes on, the same funnel: the same Event, counted again.
  clock_.Advance(absl::Minutes(1));
  EXPECT_EQ(recorder_.Step(), 1);
  EXPECT_EQ(sink_.created.size(), 1u);
  EXPECT_EQ(sink_.counts["train.1"], 2);
  EXPECT_EQ(Counted("Unsatisfiable", "series_updated"), 1);
  clock_.Advance(absl::Minutes(10));
  EXPECT_EQ(recorder_.Step(), 1);
  EXPECT_EQ(sink_.counts["train.1"], 3);

  // The reason changes (a device appears, but is taken): a new Event at once.
  HandlersFor(k8s::kResourceSlices, analyzer_)
      .on_add(testing::Slice("a", testing::WholeGpus("a", 1)));
  EXPECT_EQ(analyzer_.PendingReasonOf("team/train"), PendingReason::kWaitingForPod);
  EXPECT_EQ(recorder_.Step(), 1);
  ASSERT_EQ(sink_.created.size(), 2u);
  EXPECT_EQ(sink_.created[1].reason, "WaitingForPod");
  EXPECT_EQ(sink_.created[1].type, "Normal");
}

TEST_F(ClaimEventsTest, ANewFunnelAfterTenMinutesIsANewEvent) {
  HandlersFor(k8s::kResourceSlices, analyzer_)
      .on_add(testing::Slice("a", testing::WholeGpus("a", 1)));
  nlohmann::json holder = testing::Holding("holder", {"gpu-0"}, "a");
  HandlersFor(k8s::kResourceClaims, analyzer_).on_add(holder);
  AddClaim("train");
  EXPECT_EQ(recorder_.Step(), 1);
  EXPECT_EQ(sink_.created[0].reason, "NoCapacity");
  // Still no capacity, but the fleet grew: the note changes, so a new Event says so.
  HandlersFor(k8s::kResourceSlices, analyzer_)
      .on_add(testing::Slice("b", testing::WholeGpus("b", 1)));
  nlohmann::json holder2 = testing::Holding("holder2", {"gpu-0"}, "b");
  HandlersFor(k8s::kResourceClaims, analyzer_).on_add(holder2);
  EXPECT_EQ(recorder_.Step(), 0);  // same reason, within 10 minutes
  clock_.Advance(absl::Minutes(10));
  EXPECT_EQ(recorder_.Step(), 1);
  ASSERT_EQ(sink_.created.size(), 2u);
  EXPECT_NE(sink_.created[1].note.find("2 devices"), std::string::npos) << sink_.created[1].note;
  EXPECT_EQ(sink_.series_updates, 0);
}

TEST_F(ClaimEventsTest, RateLimitedFleetWideOldestFirst) {
  for (int i = 0; i < 5; ++i) {
    AddClaim("c" + std::to_string(i));
  }
  EXPECT_EQ(recorder_.Step(), 3);  // the burst
  EXPECT_EQ(recorder_.Step(), 0);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(recorder_.Step(), 1);  // one per second
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(recorder_.Step(), 1);  // the rest
  EXPECT_EQ(sink_.created.size(), 5u);
}

// A pass keeps only as many due claims as the bucket can write: from many more, the longest
// pending, in that order (ties by name), whatever order the analyzer walks them in.
TEST_F(ClaimEventsTest, APassWritesTheLongestPendingOfManyMoreThanItCan) {
  const absl::Time now = clock_.Now();
  std::map<int, std::string> by_age;
  for (int i = 0; i < 40; ++i) {
    const int age = (i * 17) % 40;  // every age from 0 to 39 once, scrambled
    clock_.SetTime(now - absl::Seconds(age));
    AddClaim(absl::StrCat("c", i));
    by_age[age] = absl::StrCat("c", i);
  }
  // Two more of the greatest age: they tie with the oldest above, and go by name.
  clock_.SetTime(now - absl::Seconds(39));
  AddClaim("b-tie");
  AddClaim("z-tie");
  clock_.SetTime(now);
  EXPECT_EQ(recorder_.Step(), 3);  // the burst
  std::vector<std::string> written;
  for (const ClaimEvent& e : sink_.created) {
    written.push_back(e.claim);
  }
  EXPECT_EQ(written, (std::vector<std::string>{"b-tie", by_age[39], "z-tie"}));
  clock_.Advance(absl::Seconds(2));  // two more tokens
  EXPECT_EQ(recorder_.Step(), 2);
  ASSERT_EQ(sink_.created.size(), 5u);
  EXPECT_EQ(sink_.created[3].claim, by_age[38]);
  EXPECT_EQ(sink_.created[4].claim, by_age[37]);
}

TEST_F(ClaimEventsTest, ClaimsTooYoungWaitAndTheLongestPendingGoFirst) {
  ClaimEventOptions options = Options();
  options.min_pending = absl::Seconds(30);
  options.burst = 2;
  ClaimEventRecorder recorder(analyzer_, sink_, registry_, options);
  AddClaim("zeta");  // oldest, last in name order
  clock_.Advance(absl::Seconds(10));
  AddClaim("alpha");
  clock_.Advance(absl::Seconds(10));
  AddClaim("mid");
  clock_.Advance(absl::Seconds(15));  // zeta 35 s, alpha 25 s, mid 15 s
  EXPECT_EQ(recorder.Step(), 1);
  ASSERT_EQ(sink_.created.size(), 1u);
  EXPECT_EQ(sink_.created[0].claim, "zeta");
  clock_.Advance(absl::Seconds(20));  // all old enough; one token left and one more earned
  EXPECT_EQ(recorder.Step(), 2);
  ASSERT_EQ(sink_.created.size(), 3u);
  EXPECT_EQ(sink_.created[1].claim, "alpha");
  EXPECT_EQ(sink_.created[2].claim, "mid");
}

TEST_F(ClaimEventsTest, AFlappingReasonWritesAtMostOnceAMinute) {
  ClaimEventOptions options = Options();
  options.min_interval = absl::Minutes(1);
  ClaimEventRecorder recorder(analyzer_, sink_, registry_, options);
  AddClaim("train");
  EXPECT_EQ(recorder.Step(), 1);  // Unsatisfiable: no device
  HandlersFor(k8s::kResourceSlices, analyzer_)
      .on_add(testing::Slice("a", testing::WholeGpus("a", 1)));
  clock_.Advance(absl::Seconds(20));
  EXPECT_EQ(recorder.Step(), 0);  // WaitingForPod now, but the last Event is 20 s old
  clock_.Advance(absl::Seconds(40));
  EXPECT_EQ(recorder.Step(), 1);
  ASSERT_EQ(sink_.created.size(), 2u);
  EXPECT_EQ(sink_.created[1].reason, "WaitingForPod");
}

// A large class is explained from the counts kept per request shape: the same numbers, without
// the breakdown that needs a scan of its devices.
TEST_F(ClaimEventsTest, LargeClassesAreExplainedFromTheCounts) {
  HandlersFor(k8s::kResourceSlices, analyzer_)
      .on_add(testing::Slice("a", testing::WholeGpus("a", 1)));
  nlohmann::json holder = testing::Holding("holder", {"gpu-0"}, "a");
  HandlersFor(k8s::kResourceClaims, analyzer_).on_add(holder);
  AddClaim("train");
  ClaimEventOptions options = Options();
  options.scan_limit = 0;
  ClaimEventRecorder recorder(analyzer_, sink_, registry_, options);
  EXPECT_EQ(recorder.Step(), 1);
  ASSERT_EQ(sink_.created.size(), 1u);
  EXPECT_EQ(sink_.created[0].reason, "NoCapacity");
  EXPECT_EQ(sink_.created[0].note,
            "request req: class gpu: 1 device; 1 match the request's selectors; 1 untainted; 0 "
            "free (dralens explain says who holds the rest); needs 1");
  // With the scan: the same counts, and who holds the device.
  std::optional<ClaimExplanation> full = analyzer_.Explain("team", "train");
  ASSERT_TRUE(full.has_value());
  EXPECT_NE(PendingNote(*full).find("0 free (1 allocated to 1 claim)"), std::string::npos)
      << PendingNote(*full);
}

TEST_F(ClaimEventsTest, FailedWritesAreRetriedAndExpiredEventsWrittenAnew) {
  AddClaim("train");
  sink_.create_error = absl::UnavailableError("apiserver down");
  EXPECT_EQ(recorder_.Step(), 1);
  EXPECT_EQ(Counted("Unsatisfiable", "failed"), 1);
  sink_.create_error = absl::OkStatus();
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(recorder_.Step(), 1);
  ASSERT_EQ(sink_.created.size(), 1u);
  // The Event expired on the server: the repeat creates it again.
  sink_.counts.clear();
  clock_.Advance(absl::Minutes(10));
  EXPECT_EQ(recorder_.Step(), 1);
  EXPECT_EQ(sink_.created.size(), 2u);
}

TEST_F(ClaimEventsTest, PlacedClaimsAreForgottenAndResetForgetsAll) {
  AddClaim("train");
  EXPECT_EQ(recorder_.Step(), 1);
  HandlersFor(k8s::kResourceSlices, analyzer_)
      .on_add(testing::Slice("a", testing::WholeGpus("a", 1)));
  nlohmann::json placed = testing::Holding("train", {"gpu-0"});
  HandlersFor(k8s::kResourceClaims, analyzer_).on_update(placed, placed);
  EXPECT_EQ(recorder_.Step(), 0);
  // Deallocated: pending again, a new Event even with the first reason.
  nlohmann::json again = testing::Claim("team", "train", "gpu");
  again["metadata"]["uid"] = "uid-train";
  HandlersFor(k8s::kDeviceClasses, analyzer_).on_delete(testing::Class("gpu", "true"));
  HandlersFor(k8s::kResourceClaims, analyzer_).on_update(again, again);
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(recorder_.Step(), 1);
  EXPECT_EQ(sink_.created.size(), 2u);
  // A replica that stops leading forgets: leading again, it writes anew.
  recorder_.Reset();
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(recorder_.Step(), 1);
  EXPECT_EQ(sink_.created.size(), 3u);
}

}  // namespace
}  // namespace dralens::exporter::cluster
