#include "src/app/cluster_role.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "exporter/cluster/feed.h"
#include "exporter/cluster/pricing.h"
#include "src/app/claim_event_writer.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/common/thread_name.h"
#include "src/telemetry/catalog.h"

namespace dralens::app {

std::set<std::string> ClassList(absl::string_view value) {
  std::set<std::string> out;
  for (absl::string_view c : absl::StrSplit(value, ',')) {
    c = absl::StripAsciiWhitespace(c);
    if (!c.empty()) {
      out.insert(std::string(c));
    }
  }
  return out;
}

void AddClaimDebugEndpoint(exporter::MetricsServer& server, ClusterRole& role) {
  server.AddJsonPrefixEndpoint("/debug/claims/",
                               [&role](const std::string& rest) -> std::optional<nlohmann::json> {
                                 std::vector<std::string> parts = absl::StrSplit(rest, '/');
                                 if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
                                   return std::nullopt;
                                 }
                                 return role.ExplainJson(parts[0], parts[1]);
                               });
}

bool ServesWorkloads(k8s::KubeClient& client, int attempts, absl::Duration backoff) {
  k8s::ListOptions options;
  options.limit = 1;
  absl::Status last;
  for (int i = 0; i < attempts; ++i) {
    if (i > 0) {
      absl::SleepFor(backoff * (1 << (i - 1)));
    }
    absl::StatusOr<k8s::ListResult> probe = client.List(k8s::kWorkloads, "", options);
    if (probe.ok()) {
      return true;
    }
    if (absl::IsNotFound(probe.status())) {
      return false;  // the API is absent: no gangs, and nothing to say
    }
    last = probe.status();
  }
  DLOG(kWarn, "cluster", "cannot tell whether the API server serves Workloads; gangs are off",
       {{"error", last.message()}});
  return false;
}

k8s::InformerHandlers ChainHandlers(k8s::InformerHandlers first, k8s::InformerHandlers second) {
  k8s::InformerHandlers h;
  h.on_add = [first, second](const nlohmann::json& o) {
    first.on_add(o);
    second.on_add(o);
  };
  h.on_update = [first, second](const nlohmann::json& old, const nlohmann::json& o) {
    first.on_update(old, o);
    second.on_update(old, o);
  };
  h.on_delete = [first, second](const nlohmann::json& o) {
    first.on_delete(o);
    second.on_delete(o);
  };
  return h;
}

absl::StatusOr<std::unique_ptr<ClusterRole>> ClusterRole::Start(
    ClusterRoleOptions options, k8s::KubeClient& client,
    const k8s::KubeRequestMetrics* kube_metrics, prometheus::Registry& registry,
    telemetry::Tracer& tracer) {
  if (options.price_per_device_hour < 0) {
    return absl::InvalidArgumentError("--price-per-device-hour: must be a number >= 0");
  }
  ASSIGN_OR_RETURN(
      exporter::cluster::PriceTable prices,
      exporter::cluster::PriceTable::Load(options.price_file, options.price_per_device_hour));
  std::unique_ptr<ClusterRole> role(new ClusterRole());
  // Order matters: the analyzer exists before the informers feed it, and the gate before the
  // elector flips it.
  role->cluster_registry_ = std::make_shared<prometheus::Registry>();
  exporter::cluster::AnalyzerOptions analyzer_options;
  analyzer_options.prices = std::move(prices);
  analyzer_options.topology_sensitive_classes = options.topology_sensitive_classes;
  analyzer_options.derive_after_sync = true;
  analyzer_options.stranded_retention = options.stranded_retention;
  role->analyzer_ = std::make_unique<exporter::cluster::Analyzer>(*role->cluster_registry_, tracer,
                                                                  std::move(analyzer_options));
  role->gate_ = std::make_unique<exporter::cluster::LeaderGate>(role->cluster_registry_, registry);
  role->gate_->AddTextSource(role->analyzer_->ObjectSeriesCollectable());
  role->gate_->AddTextSource(role->analyzer_->TextSeries());

  const bool gangs = ServesWorkloads(client);
  if (gangs) {
    role->gangs_ = std::make_unique<exporter::cluster::GangTracker>(*role->analyzer_,
                                                                    *role->cluster_registry_);
    role->gate_->AddTextSource(role->gangs_->TextSeries());
  }
  DLOG(kInfo, "cluster", "gangs", {{"workloads_served", gangs ? "true" : "false"}});

  ClusterRole* self = role.get();
  role->watch_ = std::make_unique<ClusterWatch>(
      client, kube_metrics,
      [self](const k8s::ResourceType& type) {
        if (type.plural == k8s::kWorkloads.plural && type.group == k8s::kWorkloads.group) {
          return self->gangs_->WorkloadHandlers();
        }
        k8s::InformerHandlers h = exporter::cluster::HandlersFor(type, *self->analyzer_);
        if (self->gangs_ != nullptr && type.plural == k8s::kPods.plural) {
          h = ChainHandlers(std::move(h), self->gangs_->PodHandlers());
        }
        return h;
      },
      gangs);
  // Outside the leader gate: how current this replica's view is matters on a standby too.
  prometheus::Family<prometheus::Gauge>& stale =
      telemetry::BuildGauge(registry, "dralens_cluster_stale_seconds");
  for (const auto& [resource, since] : role->watch_->StaleSince()) {
    role->stale_.emplace_back(resource, &stale.Add({{"resource", resource}}));
  }
  role->watch_->Start();
  const absl::Duration tick = options.tick;
  role->ticker_ = std::make_unique<std::thread>([self, tick] {
    common::NameThisThread("cluster-tick");
    // Until every informer has synced, look often: the analyzer derives its findings once, as
    // soon as the LISTs are in.
    bool nodes_synced = false;
    bool synced = false;
    do {
      if (!nodes_synced && self->watch_->Synced(k8s::kNodes.plural)) {
        self->analyzer_->SetNodesSynced();
        nodes_synced = true;
      }
      if (!synced && self->watch_->Ready().ok()) {
        self->analyzer_->SetSynced();
        synced = true;
        self->synced_ = true;
      }
      if (synced) {
        self->analyzer_->Tick();
        if (self->gangs_ != nullptr) {
          self->gangs_->Refresh();
        }
      }
      self->UpdateStaleness();
    } while (!self->stop_ticker_.WaitForNotificationWithTimeout(
        synced ? tick : std::min(tick, absl::Milliseconds(20))));
  });

  if (options.claim_events) {
    role->event_sink_ = std::make_unique<ClaimEventWriter>(client, options.instance);
    role->event_recorder_ = std::make_unique<exporter::cluster::ClaimEventRecorder>(
        *role->analyzer_, *role->event_sink_, registry, options.claim_event_options,
        role->gangs_.get());
    const absl::Duration period = options.claim_event_period;
    role->event_thread_ = std::make_unique<std::thread>([self, period] {
      common::NameThisThread("claim-events");
      // Only the leader writes; a replica that stops leading forgets what it wrote, since the
      // next leader may write after it.
      do {
        if (!self->gate_->leader()) {
          self->event_recorder_->Reset();
        } else if (self->synced_) {
          self->event_recorder_->Step();
        }
      } while (!self->stop_ticker_.WaitForNotificationWithTimeout(period));
    });
  }

  if (!options.leader_elect) {
    role->gate_->SetLeader(true);
    return role;
  }
  k8s::LeaderElectionOptions election = std::move(options.election);
  election.on_started_leading = [self] { self->gate_->SetLeader(true); };
  election.on_stopped_leading = [self] { self->gate_->SetLeader(false); };
  ASSIGN_OR_RETURN(role->elector_, k8s::LeaderElector::Create(client, std::move(election)));
  role->elector_->Start();
  return role;
}

ClusterRole::~ClusterRole() { Stop(); }

absl::Status ClusterRole::Ready() const {
  absl::Status watch = watch_->Ready();
  if (!watch.ok()) {
    return watch;
  }
  if (!synced_) {
    return absl::UnavailableError("synced; deriving the findings from the LISTs");
  }
  return absl::OkStatus();
}

std::optional<nlohmann::json> ClusterRole::ExplainJson(const std::string& ns,
                                                       const std::string& name) {
  std::optional<exporter::cluster::ClaimExplanation> e = analyzer_->Explain(ns, name);
  if (!e.has_value()) {
    return std::nullopt;
  }
  if (gangs_ != nullptr && e->state == exporter::cluster::ClaimState::kPending) {
    e->gang = gangs_->GangOfClaim(ns, name);
  }
  return exporter::cluster::ExplanationJson(*e);
}

void ClusterRole::UpdateStaleness() {
  const absl::Time now = absl::Now();
  size_t i = 0;
  for (const auto& [resource, since] : watch_->StaleSince()) {
    // Same order as at Start(): one gauge per informer.
    stale_[i++].second->Set(since.has_value() ? absl::ToDoubleSeconds(now - *since) : 0);
  }
}

void ClusterRole::Stop() {
  if (stopped_) {
    return;
  }
  stopped_ = true;
  if (elector_) {
    elector_->Stop();  // releases the lease for the standby
  }
  if (ticker_ || event_thread_) {
    stop_ticker_.Notify();
  }
  if (ticker_) {
    ticker_->join();
  }
  if (event_thread_) {
    event_thread_->join();
  }
  if (watch_) {
    watch_->Stop();
  }
  gangs_.reset();
  analyzer_.reset();  // ends the claims' lifecycle spans
}

}  // namespace dralens::app
