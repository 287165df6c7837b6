// Helpers for the prepare tests: a harness that builds a node's claim preparation over temp
// directories, an in-memory API (FakeKubeClient) and simulated GPUs, plus file and series
// helpers.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "driver/discovery/simulated/simulated_device_source.h"
#include "driver/discovery/simulated/simulated_profile.h"
#include "driver/prepare/claim_handler.h"
#include "driver/prepare/preparation.h"
#include "driver/sharing/mps.h"
#include "exporter/node/node_collectors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/common/log.h"
#include "src/k8s/client.h"
#include "src/telemetry/exemplar.h"
#include "src/telemetry/tracing/in_memory_span_exporter.h"
#include "src/telemetry/tracing/sampler.h"
#include "src/telemetry/tracing/simple_span_processor.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "tests/testing/fake_kube_client.h"
#include "tests/testing/temp_dir.h"

namespace dralens::driver::prepare::testing {

using dralens::testing::FakeKubeClient;
using dralens::testing::TempDir;

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void Spit(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

inline std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Creates ResourceClaim `ns`/`name` with one request for `device_class` and, unless `device` is
// empty, allocates `device` of `driver`/`pool` to that request, as the scheduler would.
inline ClaimRef CreateClaim(k8s::KubeClient& client, const std::string& ns, const std::string& name,
                            const std::string& request, const std::string& device_class,
                            const std::string& driver, const std::string& pool,
                            const std::string& device) {
  nlohmann::json claim = {{"apiVersion", "resource.k8s.io/v1"},
                          {"kind", "ResourceClaim"},
                          {"metadata", {{"namespace", ns}, {"name", name}}}};
  claim["spec"]["devices"]["requests"] = nlohmann::json::array(
      {{{"name", request}, {"exactly", {{"deviceClassName", device_class}}}}});
  auto created = client.Create(k8s::kResourceClaims, ns, claim);
  EXPECT_TRUE(created.ok()) << created.status();
  if (!created.ok()) {
    return {};
  }
  if (!device.empty()) {
    nlohmann::json obj = *created;
    nlohmann::json result = {
        {"request", request}, {"driver", driver}, {"pool", pool}, {"device", device}};
    obj["status"]["allocation"]["devices"]["results"] = nlohmann::json::array({result});
    auto updated = client.Update(k8s::kResourceClaims, ns, obj, "status");
    EXPECT_TRUE(updated.ok()) << updated.status();
  }
  return {ns, (*created)["metadata"]["uid"].get<std::string>(), name};
}

// The value of the first counter or gauge series of `family` whose labels include `want` (the
// sample count for a histogram), or nullopt when none exists.
inline std::optional<double> SeriesValue(prometheus::Registry& registry, const std::string& family,
                                         const std::map<std::string, std::string>& want) {
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    if (f.name != family) {
      continue;
    }
    for (const prometheus::ClientMetric& m : f.metric) {
      std::map<std::string, std::string> labels;
      for (const auto& l : m.label) {
        labels[l.name] = l.value;
      }
      bool match = true;
      for (const auto& [k, v] : want) {
        match = match && labels.count(k) > 0 && labels[k] == v;
      }
      if (!match) {
        continue;
      }
      switch (f.type) {
        case prometheus::MetricType::Counter:
          return m.counter.value;
        case prometheus::MetricType::Histogram:
          return static_cast<double>(m.histogram.sample_count);
        default:
          return m.gauge.value;
      }
    }
  }
  return std::nullopt;
}

// How many series of `family` have labels including `want`.
inline int SeriesCount(prometheus::Registry& registry, const std::string& family,
                       const std::map<std::string, std::string>& want = {}) {
  int n = 0;
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    if (f.name != family) {
      continue;
    }
    for (const prometheus::ClientMetric& m : f.metric) {
      std::map<std::string, std::string> labels;
      for (const auto& l : m.label) {
        labels[l.name] = l.value;
      }
      bool match = true;
      for (const auto& [k, v] : want) {
        match = match && labels.count(k) > 0 && labels[k] == v;
      }
      n += match ? 1 : 0;
    }
  }
  return n;
}

// Captures log lines for the lifetime of the object.
class LogCapture {
 public:
  LogCapture() {
    common::SetLogSinkForTest([this](const std::string& line) {
      std::lock_guard<std::mutex> l(mu_);
      lines_.push_back(line);
    });
  }
  ~LogCapture() { common::SetLogSinkForTest(nullptr); }

  bool Contains(const std::string& needle) {
    std::lock_guard<std::mutex> l(mu_);
    for (const std::string& line : lines_) {
      if (line.find(needle) != std::string::npos) {
        return true;
      }
    }
    return false;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

struct HarnessOptions {
  std::string node = "node-a";
  std::string driver = "gpu.dralens.dev";
  // A simulated profile as JSON; empty: the built-in "dgx-h100".
  std::string profile_json;
  bool dynamic_mig = false;
  // Write ResourceClaim status.devices (ApiClaimStatusWriter on the fake client).
  bool claim_status = false;
};

inline HarnessOptions Options(std::string node, std::string profile_json = "",
                              bool dynamic_mig = false, bool claim_status = false) {
  HarnessOptions o;
  o.node = std::move(node);
  o.profile_json = std::move(profile_json);
  o.dynamic_mig = dynamic_mig;
  o.claim_status = claim_status;
  return o;
}

// A node's claim preparation as `dralens node` builds it (Preparation, node collectors), over a
// FakeKubeClient, simulated GPUs, a simulated MPS control, temp directories, a recording tracer
// and a registry the test reads.
class PrepareHarness {
 public:
  explicit PrepareHarness(HarnessOptions options = {}) : options_(std::move(options)) {
    auto profile = options_.profile_json.empty()
                       ? discovery::BuiltinSimulatedProfile("dgx-h100")
                       : discovery::ParseSimulatedProfileJson(options_.profile_json);
    EXPECT_TRUE(profile.ok()) << profile.status();
    auto source = discovery::SimulatedDeviceSource::Create(*profile, options_.node);
    EXPECT_TRUE(source.ok()) << source.status();
    source_ = *std::move(source);
    auto inventory = source_->Discover();
    EXPECT_TRUE(inventory.ok()) << inventory.status();
    inventory_ = *inventory;
    auto exporter = std::make_unique<telemetry::InMemorySpanExporter>();
    spans_ = exporter->storage();
    processor_ = std::make_unique<telemetry::SimpleSpanProcessor>(std::move(exporter), stats_);
    tracer_ = std::make_unique<telemetry::TracerImpl>(*processor_, telemetry::MakeAlwaysOnSampler(),
                                                      common::RealClock());
    Restart();
  }
  ~PrepareHarness() {
    if (preparation_ != nullptr) {
      preparation_->Stop();
    }
  }

  // A fresh preparation (and a fresh registry, as in a new process) over the same directories,
  // API objects and GPUs: a restart. `boot_id` other than "boot-1" is a reboot.
  void Restart(const std::string& boot_id = "boot-1") {
    if (preparation_ != nullptr) {
      preparation_->Stop();
    }
    preparation_.reset();
    collectors_.reset();
    registry_ = std::make_shared<prometheus::Registry>();
    exemplars_ = std::make_unique<telemetry::ExemplarStore>();
    collectors_ = std::make_unique<exporter::NodeCollectors>(*registry_);
    store_ = std::make_unique<FileCheckpointStore>(
        CheckpointPath(dir_.Join("plugins"), options_.driver), boot_id, clock_);
    cdi_ = std::make_unique<FileCdiWriter>(dir_.Join("cdi"));
    PreparationOptions options;
    options.preparer.driver_name = options_.driver;
    options.preparer.pool_name = options_.node;
    options.preparer.dynamic_mig = options_.dynamic_mig;
    options.mps_root = dir_.Join("mps");
    options.claim_status = options_.claim_status;
    options.status.initial_backoff = absl::Milliseconds(1);
    auto preparation = Preparation::Create(options, client_, *store_, *cdi_, *source_, mps_,
                                           PreparationSinks{.registry = *registry_,
                                                            .exemplars = *exemplars_,
                                                            .tracer = *tracer_,
                                                            .clock = common::RealClock(),
                                                            .view = *collectors_},
                                           inventory_);
    ASSERT_TRUE(preparation.ok()) << preparation.status();
    preparation_ = *std::move(preparation);
  }

  std::map<std::string, PrepareResult> Prepare(const std::vector<ClaimRef>& claims,
                                               const KubeletCall& call = {}) {
    return preparation_->preparer().Prepare(claims, call);
  }
  std::map<std::string, std::string> Unprepare(const std::vector<ClaimRef>& claims,
                                               const KubeletCall& call = {}) {
    return preparation_->preparer().Unprepare(claims, call);
  }
  PrepareResult PrepareOne(const ClaimRef& ref) {
    auto out = Prepare({ref});
    EXPECT_EQ(out.size(), 1u);
    return out[ref.uid];
  }
  std::string UnprepareOne(const ClaimRef& ref) {
    auto out = Unprepare({ref});
    EXPECT_EQ(out.size(), 1u);
    return out[ref.uid];
  }

  // The committed checkpoint.
  Checkpoint checkpoint() { return *preparation_->ledger().Snapshot().checkpoint; }
  std::optional<double> Series(const std::string& family,
                               const std::map<std::string, std::string>& want) {
    return SeriesValue(*registry_, family, want);
  }
  std::string SpecPath(const std::string& uid) const {
    return dir_.Join("cdi/" + CdiSpecFileName(uid));
  }
  std::vector<telemetry::SpanData> AllSpans() const { return spans_->spans(); }
  std::vector<telemetry::SpanData> Spans(const std::string& name) const {
    std::vector<telemetry::SpanData> out;
    for (const telemetry::SpanData& s : spans_->spans()) {
      if (s.name == name) {
        out.push_back(s);
      }
    }
    return out;
  }

  const HarnessOptions& options() const { return options_; }
  FakeKubeClient& client() { return client_; }
  discovery::SimulatedDeviceSource& source() { return *source_; }
  sharing::SimulatedMpsControl& mps() { return mps_; }
  const model::Inventory& inventory() const { return inventory_; }
  const TempDir& dir() const { return dir_; }
  common::FakeClock& clock() { return clock_; }
  prometheus::Registry& registry() { return *registry_; }
  std::shared_ptr<prometheus::Registry> shared_registry() { return registry_; }
  telemetry::ExemplarStore& exemplars() { return *exemplars_; }
  FileCheckpointStore& store() { return *store_; }
  Preparation& preparation() { return *preparation_; }
  ClaimPreparer& preparer() { return preparation_->preparer(); }
  ClaimLedger& ledger() { return preparation_->ledger(); }

 private:
  const HarnessOptions options_;
  TempDir dir_;
  FakeKubeClient client_;
  common::FakeClock clock_;
  std::unique_ptr<discovery::SimulatedDeviceSource> source_;
  sharing::SimulatedMpsControl mps_;
  model::Inventory inventory_;
  telemetry::TracingStats stats_;
  std::shared_ptr<telemetry::InMemorySpanExporter::Storage> spans_;
  std::unique_ptr<telemetry::SimpleSpanProcessor> processor_;
  std::unique_ptr<telemetry::TracerImpl> tracer_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<telemetry::ExemplarStore> exemplars_;
  std::unique_ptr<exporter::NodeCollectors> collectors_;
  std::unique_ptr<FileCheckpointStore> store_;
  std::unique_ptr<FileCdiWriter> cdi_;
  std::unique_ptr<Preparation> preparation_;
};

}  // namespace dralens::driver::prepare::testing
