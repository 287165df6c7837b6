// The scale benchmark's own parts: the fleet, its objects (schema and API-server validation),
// the truth, the scrape check (it must catch a wrong expectation), the events, the lean API
// server's LIST/WATCH semantics, and one small run against the real binary.
#include <httplib.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"
#include "tests/bench/scale/child.h"
#include "tests/bench/scale/events.h"
#include "tests/bench/scale/fleet.h"
#include "tests/bench/scale/lean_api_server.h"
#include "tests/bench/scale/render.h"
#include "tests/bench/scale/runner.h"
#include "tests/bench/scale/truth.h"
#include "tests/bench/scale/verify.h"

namespace dralens::bench::scale {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

Fleet SmallFleet(int claims = 1000) {
  FleetOptions options;
  options.claims = claims;
  options.seed = 7;
  return Generate(options);
}

// --- fleet and truth ------------------------------------------------------------------------

TEST(FleetTest, SameInputsGiveTheSameObjects) {
  const Fleet a = SmallFleet();
  const Fleet b = SmallFleet();
  ASSERT_EQ(a.claims.size(), b.claims.size());
  for (int i : {0, 17, 500, 999}) {
    EXPECT_EQ(RenderClaim(a, i), RenderClaim(b, i));
    EXPECT_EQ(RenderPod(a, i), RenderPod(b, i));
  }
  EXPECT_EQ(RenderSlice(a, 3), RenderSlice(b, 3));
  EXPECT_EQ(RenderNode(a, 3), RenderNode(b, 3));
  FleetOptions other;
  other.claims = 1000;
  other.seed = 8;
  EXPECT_NE(RenderClaim(a, 0), RenderClaim(Generate(other), 0));
}

TEST(FleetTest, HasTheShapeOfTheSpecFleet) {
  const Fleet fleet = SmallFleet();
  EXPECT_EQ(fleet.nodes.size(), 125u);
  EXPECT_EQ(fleet.gpus.size(), 1000u);
  std::map<ClaimState, int> states;
  for (const Claim& c : fleet.claims) {
    ++states[fleet.StateOf(c)];
  }
  EXPECT_EQ(states[ClaimState::kInUse], 700);
  EXPECT_EQ(states[ClaimState::kReserved], 50);
  EXPECT_EQ(states[ClaimState::kAllocated], 50);
  EXPECT_EQ(states[ClaimState::kPending], 200);
  int not_ready = 0, gone = 0;
  for (const Node& n : fleet.nodes) {
    not_ready += n.ready ? 0 : 1;
    gone += n.exists ? 0 : 1;
  }
  EXPECT_GE(not_ready, 1);
  EXPECT_GE(gone, 1);
  for (const Gpu& g : fleet.gpus) {
    const Node& n = fleet.nodes[g.node];
    if (n.product == ProductId::kH100 && n.exists) {
      EXPECT_GE(g.holder, 0) << "every H100 on an existing node is held";
    }
    if (n.product == ProductId::kB200) {
      EXPECT_TRUE(g.maintenance_taint);
      EXPECT_LT(g.holder, 0);
    }
    if (g.holder >= 0) {
      const std::vector<int>& held = fleet.claims[g.holder].gpus;
      EXPECT_EQ(held, std::vector<int>{static_cast<int>(&g - fleet.gpus.data())});
    }
  }
}

TEST(TruthTest, PendingReasonsAreTheIntendedOnes) {
  const Truth truth = ComputeTruth(SmallFleet());
  EXPECT_EQ(truth.pending_by_reason.at("waiting_for_pod"), 100);
  EXPECT_EQ(truth.pending_by_reason.at("no_capacity"), 60);
  EXPECT_EQ(truth.pending_by_reason.at("unsatisfiable"), 20);
  EXPECT_EQ(truth.pending_by_reason.at("tainted"), 20);
  int gpus = 0;
  for (const auto& [state, n] : truth.gpus_by_state) {
    gpus += n;
  }
  EXPECT_EQ(gpus, 1000) << "every GPU once";
  EXPECT_GT(truth.stranded_by_kind.at("advertised_unhealthy"), 16);     // B200s and more
  EXPECT_EQ(truth.stranded_by_kind.count("unplaceable_fragment"), 0u);  // no MIG in the fleet
}

TEST(TruthTest, UnavailableWinsAndNoneTaintsDoNotCount) {
  Fleet fleet = SmallFleet(200);
  Gpu* free_gpu = nullptr;
  for (Gpu& g : fleet.gpus) {
    if (g.holder < 0 && !fleet.Unavailable(g) && !g.info_taint) {
      free_gpu = &g;
      break;
    }
  }
  ASSERT_NE(free_gpu, nullptr);
  const std::string node = fleet.nodes[free_gpu->node].name;
  const std::string product = ProductOf(fleet.ProductOfGpu(*free_gpu)).product_name;
  auto gpus_of = [&](const Truth& t, const std::string& state) {
    auto& values = t.families[3].values;
    auto it = values.find({node, kDriverName, product, state});
    return it == values.end() ? 0.0 : it->second;
  };
  const Truth before = ComputeTruth(fleet);
  free_gpu->info_taint = true;
  EXPECT_EQ(gpus_of(ComputeTruth(fleet), "free"), gpus_of(before, "free"));
  free_gpu->xid_taint = true;
  const Truth after = ComputeTruth(fleet);
  EXPECT_EQ(gpus_of(after, "free"), gpus_of(before, "free") - 1);
  EXPECT_EQ(gpus_of(after, "unavailable"), gpus_of(before, "unavailable") + 1);
}

// --- objects validate --------------------------------------------------------------------------

class SchemaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    openapi_ = absl::StrCat(DRALENS_SCHEMA_DIR, "/k8s-resource.k8s.io-v1-openapi.json");
    ASSERT_EQ(::access(openapi_.c_str(), R_OK), 0) << "no OpenAPI document at " << openapi_;
    if (::access("/usr/bin/python3", X_OK) != 0) {
      GTEST_SKIP() << "no /usr/bin/python3";
    }
  }
  // Exit status and output of tests/schema/validate_openapi.py on `object`.
  std::pair<int, std::string> Validate(const std::string& schema, const json& object) {
    const std::string path =
        absl::StrCat(::testing::TempDir(), "/scale_schema_", ::getpid(), "_", counter_++, ".json");
    std::ofstream(path) << object.dump();
    const std::string command = absl::StrCat("/usr/bin/python3 '", DRALENS_SOURCE_DIR,
                                             "/tests/schema/validate_openapi.py' --openapi '",
                                             openapi_, "' ", schema, " '", path, "' 2>&1");
    std::string out;
    FILE* pipe = ::popen(command.c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) {
      out.append(buf, n);
    }
    const int status = ::pclose(pipe);
    std::remove(path.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
  }
  std::string openapi_;
  int counter_ = 0;
};

TEST_F(SchemaTest, SampledObjectsValidateAgainstTheV1OpenApiDocument) {
  const Fleet fleet = SmallFleet();
  // One object of each shape: a class; slices without taints, with XID and None taints, and
  // with the maintenance taint; claims in every state and with request selectors.
  std::vector<std::pair<std::string, json>> samples;
  samples.emplace_back("io.k8s.api.resource.v1.DeviceClass", RenderClass(kClassLargeMemory, fleet));
  std::set<int> slice_kinds;
  for (size_t n = 0; n < fleet.nodes.size(); ++n) {
    const Node& node = fleet.nodes[n];
    int kind = node.product == ProductId::kB200 ? 2 : 0;
    for (int m = 0; m < kGpusPerNode && kind == 0; ++m) {
      const Gpu& g = fleet.gpus[node.first_gpu + m];
      kind = g.xid_taint || g.info_taint ? 1 : 0;
    }
    if (slice_kinds.insert(kind).second) {
      samples.emplace_back("io.k8s.api.resource.v1.ResourceSlice",
                           RenderSlice(fleet, static_cast<int>(n)));
    }
  }
  std::set<std::string> claim_kinds;
  for (size_t c = 0; c < fleet.claims.size(); ++c) {
    const Claim& claim = fleet.claims[c];
    const std::string kind =
        absl::StrCat(ToString(fleet.StateOf(claim)), claim.request.selector != kNoSelector);
    if (claim_kinds.insert(kind).second) {
      samples.emplace_back("io.k8s.api.resource.v1.ResourceClaim",
                           RenderClaim(fleet, static_cast<int>(c)));
    }
  }
  ASSERT_EQ(samples.size(), 9u);
  for (const auto& [schema, object] : samples) {
    const auto [code, output] = Validate(schema, object);
    EXPECT_EQ(code, 0) << schema << " " << KeyOf(object) << "\n" << output;
  }
  // The check itself can fail: a device without a name is not a valid slice.
  json broken = RenderSlice(fleet, 0);
  broken["spec"]["devices"][0].erase("name");
  EXPECT_NE(Validate("io.k8s.api.resource.v1.ResourceSlice", broken).first, 0);
}

// Pods and Nodes are core/v1, outside the resource.k8s.io document: the embedded API server,
// which validates core objects as the real one does (label values, names, required fields),
// must accept them, with their status.
TEST(ObjectsTest, EveryKindIsAcceptedByTheEmbeddedApiServer) {
  const Fleet fleet = SmallFleet(200);
  sim::ApiServer server;
  ASSERT_TRUE(server.Start().ok());
  k8s::RestConfig config;
  config.server = server.url();
  auto client = k8s::RestClient::FromConfig(config);
  ASSERT_TRUE(client.ok());
  auto load = [&](const k8s::ResourceType& type, json object) {
    const std::string ns = object["metadata"].value("namespace", "");
    const json status = object.value("status", json());
    absl::StatusOr<json> created = (*client)->Create(type, ns, object);
    ASSERT_TRUE(created.ok()) << type.plural << ": " << created.status();
    if (!status.is_null() && type.plural != "resourceslices") {
      (*created)["status"] = status;
      absl::StatusOr<json> updated = (*client)->Update(type, ns, *created, "status");
      ASSERT_TRUE(updated.ok()) << type.plural << " status: " << updated.status();
    }
  };
  for (int i = 0; i < kClassCount; ++i) {
    load(k8s::kDeviceClasses, RenderClass(i, fleet));
  }
  for (size_t n = 0; n < fleet.nodes.size(); ++n) {
    if (fleet.nodes[n].exists) {
      load(k8s::kNodes, RenderNode(fleet, static_cast<int>(n)));
    }
    load(k8s::kResourceSlices, RenderSlice(fleet, static_cast<int>(n)));
  }
  for (size_t c = 0; c < fleet.claims.size(); c += 7) {
    load(k8s::kResourceClaims, RenderClaim(fleet, static_cast<int>(c)));
    load(k8s::kPods, RenderPod(fleet, static_cast<int>(c)));
  }
  server.Stop();
}

// --- scrape check ------------------------------------------------------------------------------

constexpr char kScrape[] =
    "# HELP dralens_cluster_claims Claims.\n"
    "# TYPE dralens_cluster_claims gauge\n"
    "dralens_cluster_claims{device_class=\"a\",namespace=\"n\",state=\"pending\"} 2\n"
    "dralens_cluster_claims{device_class=\"a\",namespace=\"m\",state=\"pending\"} 1\n"
    "dralens_cluster_claims{device_class=\"b\",namespace=\"n\",state=\"in_use\"} 0\n"
    "# TYPE dralens_cluster_pending_claim_age_seconds gauge\n"
    "dralens_cluster_pending_claim_age_seconds{claim=\"c\\\"1\",namespace=\"n\",reason=\"x\"} "
    "12.5\n";

FamilyTruth ByClassAndState() {
  FamilyTruth f;
  f.family = "dralens_cluster_claims";
  f.labels = {"device_class", "state"};
  f.values[{"a", "pending"}] = 3;  // summed over namespace
  return f;
}

TEST(VerifyTest, MatchingScrapeIsOkAndSumsOverOtherLabels) {
  absl::StatusOr<Scrape> scrape = ParseExposition(kScrape);
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  Truth truth;
  truth.families.push_back(ByClassAndState());
  FamilyTruth ages;
  ages.family = "dralens_cluster_pending_claim_age_seconds";
  ages.labels = {"namespace", "claim", "reason"};
  ages.mode = FamilyTruth::Mode::kPresence;
  ages.values[{"n", "c\"1", "x"}] = 1;
  truth.families.push_back(ages);
  const VerifyResult v = Verify(*scrape, truth);
  EXPECT_TRUE(v.ok()) << v.Diff();
  EXPECT_THAT(v.Summary(), HasSubstr("dralens_cluster_claims ok"));
}

TEST(VerifyTest, WrongExpectationIsCaughtWithADiff) {
  absl::StatusOr<Scrape> scrape = ParseExposition(kScrape);
  ASSERT_TRUE(scrape.ok());
  Truth truth;
  truth.families.push_back(ByClassAndState());
  truth.families[0].values[{"a", "pending"}] = 4;
  truth.families[0].values[{"b", "allocated"}] = 1;
  const VerifyResult v = Verify(*scrape, truth);
  EXPECT_FALSE(v.ok());
  EXPECT_THAT(v.Diff(),
              HasSubstr("dralens_cluster_claims{device_class=\"a\",state=\"pending\"}: want 4, "
                        "got 3"));
  EXPECT_THAT(v.Diff(), HasSubstr("want 1, got 0 (absent)"));
  EXPECT_THAT(v.Summary(), HasSubstr("MISMATCH (2/3)"));
}

TEST(VerifyTest, UnexpectedSeriesAndMissingLabelsAreMismatches) {
  absl::StatusOr<Scrape> scrape = ParseExposition(kScrape);
  ASSERT_TRUE(scrape.ok());
  Truth truth;
  FamilyTruth empty;
  empty.family = "dralens_cluster_claims";
  empty.labels = {"device_class", "phase"};  // no series carries "phase"
  truth.families.push_back(empty);
  FamilyTruth ages;
  ages.family = "dralens_cluster_pending_claim_age_seconds";
  ages.labels = {"namespace", "claim", "reason"};
  ages.mode = FamilyTruth::Mode::kPresence;
  ages.values[{"n", "other", "x"}] = 1;
  truth.families.push_back(ages);
  const VerifyResult v = Verify(*scrape, truth);
  EXPECT_FALSE(v.ok());
  EXPECT_THAT(v.Diff(), HasSubstr("no series carries the label 'phase'"));
  EXPECT_THAT(v.Diff(), HasSubstr("unexpected dralens_cluster_pending_claim_age_seconds"));
  EXPECT_THAT(v.Diff(), HasSubstr("missing    dralens_cluster_pending_claim_age_seconds"));
}

TEST(VerifyTest, FamilyNotExportedIsReportedNotFailed) {
  absl::StatusOr<Scrape> scrape = ParseExposition(kScrape);
  ASSERT_TRUE(scrape.ok());
  Truth truth;
  FamilyTruth gpus;
  gpus.family = "dralens_cluster_gpus";
  gpus.labels = {"node", "state"};
  gpus.values[{"n1", "free"}] = 8;
  truth.families.push_back(gpus);
  const VerifyResult v = Verify(*scrape, truth);
  EXPECT_TRUE(v.ok());
  EXPECT_THAT(v.Summary(), HasSubstr("dralens_cluster_gpus not exported"));
}

TEST(VerifyTest, MalformedExpositionIsAnError) {
  EXPECT_THAT(std::string(ParseExposition("x{a=\"1} 2\n").status().message()), HasSubstr("line 1"));
  EXPECT_FALSE(ParseExposition("x{a=1} 2\n").ok());
  EXPECT_FALSE(ParseExposition("x two\n").ok());
}

// --- events --------------------------------------------------------------------------------

TEST(EventsTest, MixedEventsKeepTheFleetConsistentAndAvoidThresholds) {
  Fleet fleet = SmallFleet();
  const Fleet start = fleet;
  EventGenerator gen(fleet, 3);
  std::map<std::string, int> kinds;
  for (int i = 0; i < 3000; ++i) {
    std::optional<WatchEvent> e = gen.NextMixed();
    ASSERT_TRUE(e.has_value());
    ++kinds[ToString(e->kind)];
    EXPECT_FALSE(KeyOf(e->object).empty());
  }
  EXPECT_EQ(kinds.size(), 7u);
  for (size_t g = 0; g < fleet.gpus.size(); ++g) {
    const Gpu& gpu = fleet.gpus[g];
    const ProductId p = fleet.ProductOfGpu(gpu);
    if (p == ProductId::kH100 || p == ProductId::kB200) {
      EXPECT_EQ(gpu.holder, start.gpus[g].holder);
      EXPECT_EQ(gpu.xid_taint, start.gpus[g].xid_taint);
    }
    if (gpu.holder >= 0) {
      EXPECT_EQ(fleet.claims[gpu.holder].gpus, std::vector<int>{static_cast<int>(g)});
    }
  }
  // No threshold moved: the reasons of pending claims that were pending before are unchanged.
  const CapacityView before(start);
  const CapacityView after(fleet);
  for (size_t c = 0; c < fleet.claims.size(); ++c) {
    if (start.StateOf(static_cast<int>(c)) == ClaimState::kPending &&
        fleet.StateOf(static_cast<int>(c)) == ClaimState::kPending) {
      EXPECT_STREQ(before.ReasonOf(start.claims[c].request),
                   after.ReasonOf(fleet.claims[c].request));
    }
  }
}

// --- lean API server -----------------------------------------------------------------------

class LeanServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fleet_ = SmallFleet(200);
    for (size_t c = 0; c < fleet_.claims.size(); ++c) {
      server_.Preload(Resource::kResourceClaims, RenderClaim(fleet_, static_cast<int>(c)));
    }
    ASSERT_TRUE(server_.Start().ok());
    http_ = std::make_unique<httplib::Client>("127.0.0.1", server_.port());
  }
  json Get(const std::string& path, int* status = nullptr) {
    httplib::Result res = http_->Get(path);
    EXPECT_TRUE(res);
    if (status != nullptr) {
      *status = res ? res->status : 0;
    }
    return res ? json::parse(res->body, nullptr, false) : json();
  }
  // Reads a watch until `lines` lines arrived (or the stream ended).
  std::vector<json> Watch(const std::string& query, size_t lines) {
    std::vector<json> out;
    std::string buffer;
    httplib::Client c("127.0.0.1", server_.port());
    c.set_read_timeout(std::chrono::seconds(10));
    c.Get(absl::StrCat(kClaims, "?watch=true&", query), [&](const char* data, size_t n) {
      buffer.append(data, n);
      size_t nl;
      while ((nl = buffer.find('\n')) != std::string::npos) {
        out.push_back(json::parse(buffer.substr(0, nl)));
        buffer.erase(0, nl + 1);
      }
      return out.size() < lines;
    });
    return out;
  }
  static constexpr char kClaims[] = "/apis/resource.k8s.io/v1/resourceclaims";
  Fleet fleet_;
  LeanApiServer server_{LeanServerOptions{}};
  std::unique_ptr<httplib::Client> http_;
};

TEST_F(LeanServerTest, PagesThroughEveryObjectOnce) {
  std::set<std::string> seen;
  std::string cont;
  int pages = 0;
  std::string rv;
  do {
    json page = Get(absl::StrCat(kClaims, "?limit=64", cont.empty() ? "" : "&continue=" + cont));
    EXPECT_EQ(page["kind"], "ResourceClaimList");
    rv = page["metadata"]["resourceVersion"];
    for (const json& item : page["items"]) {
      EXPECT_FALSE(item.contains("kind")) << "list items carry no kind, as on the real server";
      EXPECT_TRUE(seen.insert(KeyOf(item)).second);
    }
    cont = page["metadata"].value("continue", "");
    ++pages;
  } while (!cont.empty());
  EXPECT_EQ(seen.size(), 200u);
  EXPECT_EQ(pages, 4);
  EXPECT_EQ(rv, "201");
}

TEST_F(LeanServerTest, WatchDeliversReleasedChangesAndBookmarksNothingElse) {
  json claim = RenderClaim(fleet_, 5);
  claim["metadata"]["labels"]["touched"] = "yes";
  ASSERT_TRUE(server_.Stage(Resource::kResourceClaims, "MODIFIED", claim).ok());
  EXPECT_EQ(Get(std::string(kClaims) + "?limit=1")["metadata"]["resourceVersion"], "201")
      << "a staged change is invisible until released";
  EXPECT_EQ(server_.Release(), 202u);
  std::vector<json> events = Watch("resourceVersion=201", 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["type"], "MODIFIED");
  EXPECT_EQ(events[0]["object"]["kind"], "ResourceClaim");
  EXPECT_EQ(events[0]["object"]["metadata"]["resourceVersion"], "202");
  EXPECT_EQ(events[0]["object"]["metadata"]["labels"]["touched"], "yes");
}

TEST_F(LeanServerTest, TooOldResourceVersionAndStaleContinueGet410) {
  json first = Get(std::string(kClaims) + "?limit=50");
  const std::string cont = first["metadata"]["continue"];
  ASSERT_TRUE(server_.Stage(Resource::kResourceClaims, "DELETED", RenderClaim(fleet_, 1)).ok());
  server_.Release();
  int status = 0;
  json expired = Get(absl::StrCat(kClaims, "?limit=50&continue=", cont), &status);
  EXPECT_EQ(status, 410);
  EXPECT_EQ(expired["reason"], "Expired");
  server_.Compact();
  std::vector<json> events = Watch("resourceVersion=202", 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["type"], "ERROR");
  EXPECT_EQ(events[0]["object"]["code"], 410);
  // A fresh list after compaction is watchable.
  const std::string rv = Get(std::string(kClaims) + "?limit=1")["metadata"]["resourceVersion"];
  EXPECT_EQ(Get(std::string(kClaims))["items"].size(), 199u);
  json stats = server_.Stats();
  EXPECT_EQ(stats["resources"]["resourceclaims"]["objects"], 199);
  EXPECT_EQ(rv, "203");
}

TEST_F(LeanServerTest, SelectorsAndUnknownPathsAreRefusedClearly) {
  int status = 0;
  json refused = Get(std::string(kClaims) + "?labelSelector=a%3Db", &status);
  EXPECT_EQ(status, 400);
  EXPECT_THAT(refused.value("message", ""), HasSubstr("no selectors"));
  Get("/apis/resource.k8s.io/v1/namespaces/x/resourceclaims/y", &status);
  EXPECT_EQ(status, 404);
}

// --- processes ----------------------------------------------------------------------------------

TEST(ChildTest, RunsOnlyOnTheCpusItIsGiven) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  if (CPU_COUNT(&allowed) < 2) {
    GTEST_SKIP() << "one CPU allowed: a child on it would read the same list unconfined";
  }
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &allowed)) {
    ++cpu;
  }
  ASSERT_LT(cpu, CPU_SETSIZE);
  const std::string log = absl::StrCat(::testing::TempDir(), "/child_cpus_", ::getpid(), ".log");
  Child child({"/bin/sh", "-c", "grep Cpus_allowed_list: /proc/self/status; echo done"}, log,
              {cpu});
  ASSERT_TRUE(child.WaitForOutput("done", absl::Seconds(30))) << child.Output();
  EXPECT_THAT(child.Output(), HasSubstr(absl::StrCat("Cpus_allowed_list:\t", cpu, "\n")));
  std::remove(log.c_str());
}

// --- a run against the real binary -----------------------------------------------------------

RunOptions SmokeOptions(const std::string& name) {
  RunOptions o;
  o.claims = 200;
  o.order = "pending-first";
  o.dralens_binary = DRALENS_BINARY;
  o.server_binary = SCALE_APISERVER_BINARY;
  o.work_dir = absl::StrCat(::testing::TempDir(), "/scale_smoke_", name, "_", ::getpid());
  std::string mkdir = absl::StrCat("mkdir -p '", o.work_dir, "'");
  EXPECT_EQ(std::system(mkdir.c_str()), 0);
  o.scrapes = 2;
  o.events_per_kind = 20;
  o.mixed_events = 60;
  o.measure_idle = false;
  o.ready_timeout = absl::Seconds(120);
  o.verbose = false;
  return o;
}

TEST(SmokeTest, RealBinaryIsReadyAndEveryBatchVerifies) {
  const RunResult r = RunOne(SmokeOptions("ok"));
  EXPECT_TRUE(r.ok) << r.failure;
  EXPECT_TRUE(r.ready);
  // /readyz answers 200 only once a scrape is complete and correct.
  EXPECT_EQ(r.wrong_scrapes_before_ready, 0);
  EXPECT_THAT(r.verified, HasSubstr("dralens_cluster_claims ok"));
  ASSERT_EQ(r.kinds.size(), 8u);
  for (const KindFigures& k : r.kinds) {
    EXPECT_GT(k.events, 0) << k.kind;
    EXPECT_TRUE(k.ok) << k.kind;
  }
  EXPECT_GT(r.relist_gone, 0) << "the 410 phase ran";
}

TEST(SmokeTest, BatchThatMadeDralensRelistIsNotCounted) {
  // A server that keeps fewer events than a batch holds: dralens' watch falls out of the
  // history, relists and ends up correct, but the batch's CPU includes the relist.
  RunOptions o = SmokeOptions("relist");
  o.server_history = 2;
  const RunResult r = RunOne(o);
  EXPECT_TRUE(r.ready);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.failure, HasSubstr("relisted"));
  for (const KindFigures& k : r.kinds) {
    EXPECT_EQ(k.events, 0) << k.kind << ": a batch with a relist was counted";
  }
}

TEST(SmokeTest, WrongTruthIsNeverCountedAsReady) {
  RunOptions o = SmokeOptions("wrong");
  o.corrupt_truth = true;
  o.ready_timeout = absl::Seconds(4);
  o.events = false;
  const RunResult r = RunOne(o);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.ready);
  EXPECT_THAT(r.failure, HasSubstr("differs from the truth"));
  EXPECT_THAT(r.failure, HasSubstr("want "));
}

}  // namespace
}  // namespace dralens::bench::scale
