// `dralens node` as a kubelet sees it, for what a claim asks of a device: a dynamic MIG instance
// created and destroyed with its claim, every sharing strategy, and a slow prepare followed from
// its histogram exemplar to its span at the collector.
#include "tests/integration/node_plugin_fixture.h"

namespace dralens::node_plugin_test {
namespace {

// Dynamic MIG through the real binary: the pool carries the GPUs' counter sets and every
// placement; a claim for one creates the instance (its capability nodes are in the CDI spec)
// and unprepare destroys it.
TEST_F(NodePluginTest, DynamicMigClaimCreatesItsInstance) {
  StartNode("", {}, {"--dynamic-mig"});
  k8s::ListOptions options;
  options.field_selector = absl::StrCat("spec.nodeName=", kNode, ",spec.driver=", kDriver);
  auto slices = client().List(k8s::kResourceSlices, "", options);
  ASSERT_TRUE(slices.ok()) << slices.status();
  bool counters = false;
  std::string placement;
  for (const json& slice : slices->items) {
    counters = counters || !slice["spec"].value("sharedCounters", json::array()).empty();
    for (const json& d : slice["spec"]["devices"]) {
      const std::string name = d["name"];
      if (placement.empty() && absl::StartsWith(name, "gpu-0-mig-1g10gb-")) {
        placement = name;
      }
    }
  }
  EXPECT_TRUE(counters);
  ASSERT_FALSE(placement.empty());

  const Claim c = AllocatedClaim("slice", placement);
  dra_v1::NodePrepareResourcesResponse prepared;
  ASSERT_TRUE(PrepareV1({c}, &prepared).ok());
  ASSERT_EQ(prepared.claims().at(c.uid).error(), "");
  std::ifstream spec(CdiSpecOf(c));
  const std::string text((std::istreambuf_iterator<char>(spec)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("/dev/nvidia-caps/nvidia-cap"));

  httplib::Client metrics("127.0.0.1", metrics_port());
  auto debug = metrics.Get("/debug/claims");
  ASSERT_TRUE(debug);
  json state = json::parse(debug->body, nullptr, false);
  ASSERT_EQ(state["claims"].size(), 1u);
  EXPECT_TRUE(absl::StartsWith(state["claims"][0]["devices"][0]["uuid"].get<std::string>(), "MIG-"))
      << debug->body;

  dra_v1::NodeUnprepareResourcesResponse un;
  ASSERT_TRUE(UnprepareV1({c}, &un).ok());
  EXPECT_EQ(un.claims().at(c.uid).error(), "");
  EXPECT_THAT(ListDir(CdiRoot()), IsEmpty());
  StopNode();
}

// Every sharing strategy through the kubelet's socket: a time-sliced claim, an MPS claim whose
// CDI edits carry the MPS environment and mounts, a claim shared by two pods, and two
// consumable-capacity shares of one GPU whose shareIDs come back in v1 Device.share_id.
TEST_F(NodePluginTest, EverySharingStrategyThroughTheKubeletSocket) {
  StartNode("", {}, {"--consumable-capacity"});
  Register();

  // Consumable capacity is published on the full GPUs.
  k8s::ListOptions options;
  options.field_selector = absl::StrCat("spec.nodeName=", kNode, ",spec.driver=", kDriver);
  auto slices = client().List(k8s::kResourceSlices, "", options);
  ASSERT_TRUE(slices.ok()) << slices.status();
  int consumable = 0;
  for (const json& slice : slices->items) {
    for (const json& d : slice["spec"]["devices"]) {
      if (d.value("allowMultipleAllocations", false)) {
        ++consumable;
        EXPECT_EQ(d["capacity"]["memory"]["requestPolicy"]["validRange"]["step"], "1Gi");
      }
    }
  }
  EXPECT_EQ(consumable, 8);

  // claim name -> (results, config, pods that reserve it)
  auto make = [&](const std::string& name, const json& results, const json& config,
                  int pods) -> Claim {
    json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"name", name}, {"namespace", kNs}}}};
    claim["spec"]["devices"]["requests"] = json::array({{{"name", "gpu"},
                                                         {"exactly",
                                                          {{"deviceClassName", kDriver},
                                                           {"allocationMode", "ExactCount"},
                                                           {"count", results.size()}}}}});
    auto created = client().Create(k8s::kResourceClaims, kNs, claim);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) {
      return {};
    }
    json obj = *created;
    obj["status"]["allocation"]["devices"]["results"] = results;
    if (!config.is_null()) {
      obj["status"]["allocation"]["devices"]["config"] =
          json::array({{{"source", "FromClaim"},
                        {"requests", json::array({"gpu"})},
                        {"opaque", {{"driver", kDriver}, {"parameters", config}}}}});
    }
    for (int i = 0; i < pods; ++i) {
      obj["status"]["reservedFor"].push_back(
          {{"resource", "pods"},
           {"name", absl::StrCat(name, "-pod-", i)},
           {"uid", absl::StrCat("00000000-0000-4000-8000-00000000000", i)}});
    }
    auto updated = client().Update(k8s::kResourceClaims, kNs, obj, "status");
    EXPECT_TRUE(updated.ok()) << updated.status();
    return {name, (*created)["metadata"]["uid"].get<std::string>()};
  };
  auto result = [](const std::string& device) {
    return json{{"request", "gpu"}, {"driver", kDriver}, {"pool", kNode}, {"device", device}};
  };
  const json time_sliced = json::parse(R"({"apiVersion": "resource.dralens.dev/v1beta1",
      "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing",
      "timeSlicingConfig": {"interval": "Long"}}})");
  const json mps = json::parse(R"({"apiVersion": "resource.dralens.dev/v1beta1",
      "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mpsConfig": {
      "defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": "8Gi"}}})");
  json share_a = result("gpu-3");
  share_a["shareID"] = "9a2f6c1e-0000-4000-8000-00000000000a";
  share_a["consumedCapacity"] = {{"memory", "20Gi"}};
  json share_b = result("gpu-3");
  share_b["shareID"] = "9a2f6c1e-0000-4000-8000-00000000000b";
  share_b["consumedCapacity"] = {{"memory", "40Gi"}};

  const Claim sliced = make("sliced", json::array({result("gpu-0")}), time_sliced, 1);
  const Claim sliced2 = make("sliced-2", json::array({result("gpu-0")}), time_sliced, 1);
  const Claim daemon = make("mps", json::array({result("gpu-1")}), mps, 1);
  const Claim shared = make("shared", json::array({result("gpu-2")}), nullptr, 2);
  const Claim first = make("share-a", json::array({share_a}), nullptr, 1);
  const Claim second = make("share-b", json::array({share_b}), nullptr, 1);

  dra_v1::NodePrepareResourcesResponse prepared;
  ASSERT_TRUE(PrepareV1({sliced, sliced2, daemon, shared, first, second}, &prepared).ok());
  for (const Claim& c : {sliced, sliced2, daemon, shared, first, second}) {
    EXPECT_EQ(prepared.claims().at(c.uid).error(), "") << c.name;
  }
  // Consumable shares: the kubelet gets each allocation's shareID back.
  EXPECT_EQ(prepared.claims().at(first.uid).devices(0).share_id(),
            "9a2f6c1e-0000-4000-8000-00000000000a");
  EXPECT_EQ(prepared.claims().at(second.uid).devices(0).share_id(),
            "9a2f6c1e-0000-4000-8000-00000000000b");

  // MPS: the client environment and the daemon's pipe directory are in the CDI device.
  std::ifstream in(CdiSpecOf(daemon));
  json spec = json::parse(in, nullptr, false);
  ASSERT_FALSE(spec.is_discarded());
  const json& edits = spec["devices"][0]["containerEdits"];
  EXPECT_THAT(edits["env"].dump(), HasSubstr("CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"));
  EXPECT_THAT(edits["env"].dump(), HasSubstr("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"));
  ASSERT_TRUE(edits.contains("mounts")) << edits.dump();
  const std::string pipe = PluginsDir() + "/gpu.dralens.dev/mps/" + daemon.uid + "/pipe";
  EXPECT_EQ(edits["mounts"][0]["hostPath"], pipe);
  EXPECT_TRUE(fs::is_directory(pipe));

  // The shared claim's second pod: prepared once, the same answer again.
  dra_v1::NodePrepareResourcesResponse again;
  ASSERT_TRUE(PrepareV1({shared}, &again).ok());
  EXPECT_EQ(Flatten(again.claims().at(shared.uid)), Flatten(prepared.claims().at(shared.uid)));

  httplib::Client metrics("127.0.0.1", metrics_port());
  auto scraped = metrics.Get("/metrics");
  ASSERT_TRUE(scraped);
  // Label names are sorted in the exposition.
  auto granted = [](const std::string& strategy, int n) {
    return absl::StrCat(
        "dralens_sharing_decisions_total{reason=\"none\",result=\"granted\",strategy=\"", strategy,
        "\"} ", n, "\n");
  };
  for (const std::string& series :
       {granted("time_slicing", 2), granted("mps", 1), granted("exclusive", 1),
        granted("shared_claim", 1), granted("consumable", 2),
        std::string("dralens_device_consumers{device=\"gpu-3\"} 2\n")}) {
    EXPECT_NE(scraped->body.find(series), std::string::npos) << series;
  }

  // After the last pod the kubelet unprepares every claim: nothing is left.
  dra_v1::NodeUnprepareResourcesResponse un;
  ASSERT_TRUE(UnprepareV1({sliced, sliced2, daemon, shared, first, second}, &un).ok());
  for (const auto& [uid, r] : un.claims()) {
    EXPECT_EQ(r.error(), "") << uid;
  }
  EXPECT_THAT(ListDir(CdiRoot()), IsEmpty());
  EXPECT_FALSE(fs::exists(PluginsDir() + "/gpu.dralens.dev/mps/" + daemon.uid));
  StopNode();
}

// The telemetry contract end to end: a prepare through the real socket shows up as an
// OpenMetrics exemplar whose trace id is a PrepareClaim span the OTLP receiver got, and the
// classic exposition passes promtool.
TEST_F(NodePluginTest, ASlowBucketsExemplarLeadsToTheClaimsSpanAtTheCollector) {
  std::mutex mu;
  std::vector<json> exports;
  httplib::Server receiver;
  receiver.Post("/v1/traces", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> l(mu);
    exports.push_back(json::parse(req.body, nullptr, false));
    res.set_content("{}", "application/json");
  });
  const int port = receiver.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serve([&] { receiver.listen_after_bind(); });

  StartNode("", {{"OTEL_EXPORTER_OTLP_ENDPOINT", absl::StrCat("http://127.0.0.1:", port)},
                 {"OTEL_BSP_SCHEDULE_DELAY", "50"},
                 {"OTEL_SERVICE_NAME", "dralens-node-it"}});
  Register();
  const Claim c = AllocatedClaim("traced", "gpu-6");
  dra_v1::NodePrepareResourcesResponse prepared;
  ASSERT_TRUE(PrepareV1({c}, &prepared).ok());
  ASSERT_EQ(prepared.claims().at(c.uid).error(), "");

  httplib::Client metrics("127.0.0.1", metrics_port());
  auto om = metrics.Get("/metrics", {{"Accept", "application/openmetrics-text;version=1.0.0"}});
  ASSERT_TRUE(om);
  EXPECT_THAT(om->get_header_value("Content-Type"), HasSubstr("application/openmetrics-text"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      om->body, m,
      std::regex(
          R"re(dralens_node_claim_duration_seconds_bucket\{operation="prepare",result="ok",le="[^"]+"\} \d+ # \{trace_id="([0-9a-f]{32})"\})re")))
      << om->body;
  const std::string trace_id = m[1];

  // The receiver gets the claim's span with that trace id, from the node's service.
  bool found = false;
  for (int i = 0; i < 500 && !found; ++i) {
    {
      std::lock_guard<std::mutex> l(mu);
      for (const json& body : exports) {
        for (const json& rs : body.value("resourceSpans", json::array())) {
          for (const json& ss : rs.value("scopeSpans", json::array())) {
            for (const json& span : ss.value("spans", json::array())) {
              if (span.value("traceId", "") == trace_id &&
                  span.value("name", "") == "PrepareClaim") {
                found = true;
                EXPECT_EQ(rs["resource"]["attributes"][0]["value"]["stringValue"],
                          "dralens-node-it");
              }
            }
          }
        }
      }
    }
    if (!found) {
      usleep(20000);
    }
  }
  EXPECT_TRUE(found) << "no PrepareClaim span with trace id " << trace_id;

  // /debug/claims says what the node prepared, and the outcome with its trace id.
  auto debug = metrics.Get("/debug/claims");
  ASSERT_TRUE(debug);
  json claims = json::parse(debug->body, nullptr, false);
  ASSERT_FALSE(claims.is_discarded()) << debug->body;
  ASSERT_EQ(claims["claims"].size(), 1u) << debug->body;
  EXPECT_EQ(claims["claims"][0]["uid"], c.uid);
  EXPECT_EQ(claims["claims"][0]["state"], "PrepareCompleted");
  EXPECT_EQ(claims["claims"][0]["devices"][0]["device"], "gpu-6");
  ASSERT_FALSE(claims["recent"].empty());
  EXPECT_EQ(claims["recent"].back()["result"], "ok");
  EXPECT_EQ(claims["recent"].back()["traceID"], trace_id);

  auto text = metrics.Get("/metrics");
  ASSERT_TRUE(text);
  const std::string path = harness_.Root() + "/metrics.txt";
  std::ofstream(path) << text->body;
  EXPECT_EQ(std::system(("/usr/bin/promtool check metrics < " + path).c_str()), 0) << text->body;
  EXPECT_THAT(text->body, HasSubstr("dralens_otlp_spans_total{outcome=\"exported\"}"));

  StopNode();
  receiver.stop();
  serve.join();
}

}  // namespace
}  // namespace dralens::node_plugin_test
