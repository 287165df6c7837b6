#include "driver/prepare/prepare_telemetry.h"

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "driver/slices/slice_builder.h"
#include "src/telemetry/catalog.h"
#include "src/telemetry/tracing/trace_context.h"

namespace dralens::driver::prepare {
namespace {

constexpr char kReasonPayload[] = "type.dralens.dev/prepare.FailureReason";

constexpr FailureReason kAllReasons[] = {
    FailureReason::kNone,          FailureReason::kInvalidRequest, FailureReason::kClaimNotFound,
    FailureReason::kClaimReplaced, FailureReason::kNotAllocated,   FailureReason::kForeignDevice,
    FailureReason::kDeviceBusy,    FailureReason::kApiError,       FailureReason::kCheckpointError,
    FailureReason::kCdiError,      FailureReason::kMigError,       FailureReason::kInvalidConfig,
    FailureReason::kSharingError,  FailureReason::kInternal};

constexpr const char* kStates[] = {"free", "prepared", "unhealthy"};

}  // namespace

absl::string_view ToString(Operation operation) {
  return operation == Operation::kPrepare ? "prepare" : "unprepare";
}

absl::string_view ToString(FailureReason reason) {
  switch (reason) {
    case FailureReason::kNone:
      return "none";
    case FailureReason::kInvalidRequest:
      return "invalid_request";
    case FailureReason::kClaimNotFound:
      return "claim_not_found";
    case FailureReason::kClaimReplaced:
      return "claim_replaced";
    case FailureReason::kNotAllocated:
      return "not_allocated";
    case FailureReason::kForeignDevice:
      return "foreign_device";
    case FailureReason::kDeviceBusy:
      return "device_busy";
    case FailureReason::kApiError:
      return "api_error";
    case FailureReason::kCheckpointError:
      return "checkpoint_error";
    case FailureReason::kCdiError:
      return "cdi_error";
    case FailureReason::kMigError:
      return "mig_error";
    case FailureReason::kInvalidConfig:
      return "invalid_config";
    case FailureReason::kSharingError:
      return "sharing_error";
    case FailureReason::kInternal:
      return "internal";
  }
  return "internal";
}

absl::Status WithReason(absl::Status status, FailureReason reason) {
  if (!status.ok() && !status.GetPayload(kReasonPayload).has_value()) {
    status.SetPayload(kReasonPayload, absl::Cord(ToString(reason)));
  }
  return status;
}

FailureReason ReasonOf(const absl::Status& status) {
  if (status.ok()) {
    return FailureReason::kNone;
  }
  auto payload = status.GetPayload(kReasonPayload);
  if (payload.has_value()) {
    for (FailureReason r : kAllReasons) {
      if (*payload == ToString(r)) {
        return r;
      }
    }
  }
  return FailureReason::kInternal;
}

absl::string_view ToString(Phase phase) {
  switch (phase) {
    case Phase::kFetchClaim:
      return "fetch_claim";
    case Phase::kCheckpoint:
      return "checkpoint";
    case Phase::kMig:
      return "mig";
    case Phase::kSharing:
      return "sharing";
    case Phase::kCdi:
      return "cdi";
  }
  return "cdi";
}

// --- PrepareMetrics --------------------------------------------------------------------------

PrepareMetrics::PrepareMetrics(prometheus::Registry& registry, telemetry::ExemplarStore& exemplars)
    : claims_total_(telemetry::BuildCounter(registry, "dralens_node_claims_total")),
      requests_total_(telemetry::BuildCounter(registry, "dralens_node_requests_total")),
      checkpoint_writes_(telemetry::BuildCounter(registry, "dralens_node_checkpoint_writes_total")),
      phase_duration_(telemetry::BuildHistogram(registry, "dralens_node_phase_duration_seconds")),
      in_flight_(telemetry::BuildGauge(registry, "dralens_node_in_flight")),
      prepared_claims_(telemetry::BuildGauge(registry, "dralens_node_prepared_claims")),
      prepared_devices_(telemetry::BuildGauge(registry, "dralens_node_prepared_devices")),
      device_info_(telemetry::BuildGauge(registry, "dralens_device_info")),
      device_memory_(telemetry::BuildGauge(registry, "dralens_device_memory_bytes")),
      device_state_(telemetry::BuildGauge(registry, "dralens_device_state")),
      device_consumers_(telemetry::BuildGauge(registry, "dralens_device_consumers")),
      mig_devices_(telemetry::BuildGauge(registry, "dralens_mig_devices")),
      mig_placeable_(telemetry::BuildGauge(registry, "dralens_mig_placeable")),
      mig_operations_(telemetry::BuildCounter(registry, "dralens_mig_operations_total")),
      mig_operation_duration_(
          telemetry::BuildHistogram(registry, "dralens_mig_operation_duration_seconds")),
      sharing_decisions_(telemetry::BuildCounter(registry, "dralens_sharing_decisions_total")) {
  auto& duration = telemetry::BuildHistogram(registry, "dralens_node_claim_duration_seconds");
  for (Operation op : {Operation::kPrepare, Operation::kUnprepare}) {
    for (bool ok : {true, false}) {
      claim_duration_.emplace(std::make_pair(op, ok), telemetry::ExemplarHistogram::Add(
                                                          exemplars, duration,
                                                          {{"operation", std::string(ToString(op))},
                                                           {"result", ok ? "ok" : "error"}},
                                                          telemetry::DurationBuckets()));
    }
    in_flight_.Add({{"operation", std::string(ToString(op))}});
    // Every bounded (result, reason) pair at 0: an error panel shows "none" rather than nothing.
    for (FailureReason reason : kAllReasons) {
      claims_total_.Add({{"operation", std::string(ToString(op))},
                         {"result", reason == FailureReason::kNone ? "ok" : "error"},
                         {"reason", std::string(ToString(reason))}});
    }
  }
  // Series that exist from the start, so rates and alerts see zeros rather than nothing.
  for (Phase p : {Phase::kFetchClaim, Phase::kCheckpoint, Phase::kCdi}) {
    phase_duration_.Add({{"phase", std::string(ToString(p))}}, telemetry::DurationBuckets());
  }
  for (const char* result : {"ok", "error"}) {
    checkpoint_writes_.Add({{"result", result}});
  }
  prepared_claims_value_ = &prepared_claims_.Add({});
  prepared_gpu_value_ = &prepared_devices_.Add({{"type", "gpu"}});
  prepared_mig_value_ = &prepared_devices_.Add({{"type", "mig"}});
}

void PrepareMetrics::RecordClaim(Operation operation, FailureReason reason, absl::Duration duration,
                                 absl::string_view trace_id) {
  const bool ok = reason == FailureReason::kNone;
  claims_total_
      .Add({{"operation", std::string(ToString(operation))},
            {"result", ok ? "ok" : "error"},
            {"reason", std::string(ToString(reason))}})
      .Increment();
  claim_duration_.at({operation, ok}).Observe(absl::ToDoubleSeconds(duration), trace_id);
}

void PrepareMetrics::ObservePhase(Phase phase, absl::Duration duration) {
  phase_duration_.Add({{"phase", std::string(ToString(phase))}}, telemetry::DurationBuckets())
      .Observe(absl::ToDoubleSeconds(duration));
}

void PrepareMetrics::AddInFlight(Operation operation, double delta) {
  in_flight_.Add({{"operation", std::string(ToString(operation))}}).Increment(delta);
}

void PrepareMetrics::RecordMigOperation(bool create, bool ok, absl::Duration duration) {
  const std::string operation = create ? "create" : "destroy";
  mig_operations_.Add({{"operation", operation}, {"result", ok ? "ok" : "error"}}).Increment();
  mig_operation_duration_.Add({{"operation", operation}}, telemetry::DurationBuckets())
      .Observe(absl::ToDoubleSeconds(duration));
}

void PrepareMetrics::RecordSharingDecision(absl::string_view strategy, bool granted,
                                           absl::string_view refusal) {
  sharing_decisions_
      .Add({{"strategy", std::string(strategy)},
            {"result", granted ? "granted" : "refused"},
            {"reason", std::string(refusal)}})
      .Increment();
}

void PrepareMetrics::RecordCheckpointWrite(bool ok) {
  checkpoint_writes_.Add({{"result", ok ? "ok" : "error"}}).Increment();
}

void PrepareMetrics::RecordCall(Operation operation, absl::string_view api, bool all_ok) {
  requests_total_
      .Add({{"operation", std::string(ToString(operation))},
            {"api", std::string(api)},
            {"result", all_ok ? "ok" : "error"}})
      .Increment();
}

PrepareMetrics::Usage PrepareMetrics::UsageOf(const Checkpoint& checkpoint) {
  Usage usage;
  for (const auto& [uid, claim] : checkpoint.claims) {
    if (claim.state != ClaimState::kPrepareCompleted) {
      continue;
    }
    ++usage.claims;
    for (const CheckpointDevice& d : claim.devices) {
      ++usage.consumers[d.device];
      (d.type == "mig" ? usage.mig_devices : usage.gpu_devices) += 1;
    }
  }
  return usage;
}

void PrepareMetrics::SetInventory(const model::Inventory& inventory) {
  ApplyInventory(inventory);
  Usage usage;
  {
    absl::MutexLock lock(&mu_);
    usage = usage_;
  }
  SetUsage(usage);
}

void PrepareMetrics::ApplyInventory(const model::Inventory& inventory) {
  // What the inventory says each device is, in the names the slices publish.
  struct Device {
    prometheus::Labels info;
    double memory = 0;
    std::string mig_key;
    prometheus::Labels mig_labels;  // parent, profile
  };
  std::map<std::string, Device> devices;
  for (const model::GpuInfo& gpu : inventory.gpus()) {
    const std::string name = slices::GpuDeviceName(gpu);
    devices[name] = {{{"device", name},
                      {"uuid", gpu.uuid},
                      {"product", gpu.product_name},
                      {"type", "gpu"},
                      {"parent", ""},
                      {"profile", ""},
                      {"numa_node", gpu.numa_node ? absl::StrCat(*gpu.numa_node) : ""},
                      {"pci_bus_id", gpu.pci_bus_id}},
                     static_cast<double>(gpu.memory_bytes),
                     "",
                     {}};
  }
  for (const model::MigDevice& mig : inventory.mig_devices()) {
    const std::string name = slices::MigDeviceName(mig);
    const model::GpuInfo* parent = inventory.FindGpuByUuid(mig.parent_uuid);
    const std::string parent_name = parent != nullptr ? slices::GpuDeviceName(*parent) : "";
    devices[name] = {
        {{"device", name},
         {"uuid", mig.uuid},
         {"product", parent != nullptr ? parent->product_name : ""},
         {"type", "mig"},
         {"parent", parent_name},
         {"profile", mig.ProfileName()},
         {"numa_node",
          parent != nullptr && parent->numa_node ? absl::StrCat(*parent->numa_node) : ""},
         {"pci_bus_id", parent != nullptr ? parent->pci_bus_id : ""}},
        static_cast<double>(mig.profile.memory_bytes()),
        absl::StrCat(parent_name, "/", mig.ProfileName()),
        {{"parent", parent_name}, {"profile", mig.ProfileName()}}};
  }
  std::map<prometheus::Labels, uint32_t> placeable;
  for (const model::GpuInfo& gpu : inventory.gpus()) {
    if (!gpu.mig_enabled()) {
      continue;
    }
    const std::string parent = slices::GpuDeviceName(gpu);
    for (const model::MigPlaceable& p : inventory.PlaceableCountsOf(gpu.uuid)) {
      placeable[{{"parent", parent}, {"profile", p.profile}}] = p.count;
    }
  }

  absl::MutexLock lock(&mu_);
  // Devices that went away, or whose identity changed, lose their series.
  for (auto it = devices_.begin(); it != devices_.end();) {
    auto now = devices.find(it->first);
    if (now != devices.end() && now->second.info == it->second.info) {
      ++it;
      continue;
    }
    device_info_.Remove(&device_info_.Add(it->second.info));
    device_memory_.Remove(&device_memory_.Add({{"device", it->first}}));
    for (const char* state : kStates) {
      device_state_.Remove(&device_state_.Add({{"device", it->first}, {"state", state}}));
    }
    device_consumers_.Remove(&device_consumers_.Add({{"device", it->first}}));
    it = devices_.erase(it);
  }
  std::map<std::string, prometheus::Labels> groups;
  for (const auto& [name, device] : devices) {
    DeviceSeries& series = devices_[name];
    series.info = device.info;
    series.mig = !device.mig_key.empty();
    series.mig_key = device.mig_key;
    device_info_.Add(device.info).Set(1);
    device_memory_.Add({{"device", name}}).Set(device.memory);
    series.state_free = &device_state_.Add({{"device", name}, {"state", "free"}});
    series.state_prepared = &device_state_.Add({{"device", name}, {"state", "prepared"}});
    series.state_unhealthy = &device_state_.Add({{"device", name}, {"state", "unhealthy"}});
    series.consumers = &device_consumers_.Add({{"device", name}});
    if (series.mig) {
      groups[device.mig_key] = device.mig_labels;
    }
  }
  // MIG groups (parent, profile) that went away lose their series.
  for (auto it = mig_groups_.begin(); it != mig_groups_.end();) {
    if (groups.count(it->first) > 0) {
      ++it;
      continue;
    }
    mig_devices_.Remove(it->second.free);
    mig_devices_.Remove(it->second.prepared);
    it = mig_groups_.erase(it);
  }
  for (const auto& [key, labels] : groups) {
    MigGroup& group = mig_groups_[key];
    prometheus::Labels free = labels;
    free["state"] = "free";
    prometheus::Labels prepared = labels;
    prepared["state"] = "prepared";
    group.free = &mig_devices_.Add(free);
    group.prepared = &mig_devices_.Add(prepared);
  }
  for (auto it = mig_placeable_series_.begin(); it != mig_placeable_series_.end();) {
    if (placeable.count(*it) == 0) {
      mig_placeable_.Remove(&mig_placeable_.Add(*it));
      it = mig_placeable_series_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [labels, n] : placeable) {
    mig_placeable_.Add(labels).Set(n);
    mig_placeable_series_.insert(labels);
  }
}

void PrepareMetrics::SetUnhealthy(std::set<std::string> devices) {
  Usage usage;
  {
    absl::MutexLock lock(&mu_);
    unhealthy_ = std::move(devices);
    usage = usage_;
  }
  SetUsage(usage);
}

void PrepareMetrics::SetUsage(const Usage& usage) {
  absl::MutexLock lock(&mu_);
  usage_ = usage;
  std::map<std::string, std::pair<int, int>> groups;  // mig_key -> free, prepared
  for (const auto& [name, series] : devices_) {
    auto it = usage.consumers.find(name);
    const int users = it == usage.consumers.end() ? 0 : it->second;
    const bool unhealthy = unhealthy_.count(name) > 0;
    series.state_free->Set(!unhealthy && users == 0 ? 1 : 0);
    series.state_prepared->Set(!unhealthy && users > 0 ? 1 : 0);
    series.state_unhealthy->Set(unhealthy ? 1 : 0);
    series.consumers->Set(users);
    if (series.mig) {
      auto& [free, prepared] = groups[series.mig_key];
      (users > 0 ? prepared : free) += 1;
    }
  }
  for (auto& [key, group] : mig_groups_) {
    const auto& counts = groups[key];
    group.free->Set(counts.first);
    group.prepared->Set(counts.second);
  }
  prepared_claims_value_->Set(static_cast<double>(usage.claims));
  prepared_gpu_value_->Set(static_cast<double>(usage.gpu_devices));
  prepared_mig_value_->Set(static_cast<double>(usage.mig_devices));
}

// --- DecisionLog -----------------------------------------------------------------------------

void DecisionLog::Add(Decision decision) {
  absl::MutexLock lock(&mu_);
  if (ring_.size() < capacity_) {
    ring_.push_back(std::move(decision));
    return;
  }
  ring_[next_] = std::move(decision);
  next_ = (next_ + 1) % capacity_;
}

std::vector<DecisionLog::Decision> DecisionLog::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<Decision> out;
  out.reserve(ring_.size());
  for (size_t i = 0; i < ring_.size(); ++i) {
    out.push_back(ring_[(next_ + i) % ring_.size()]);
  }
  return out;
}

// --- ClaimTelemetry --------------------------------------------------------------------------

ClaimTelemetry::ClaimTelemetry(PrepareMetrics* metrics, telemetry::Tracer& tracer,
                               common::Clock& clock, Operation operation, const ClaimRef& ref,
                               absl::string_view pool, DecisionLog* log)
    : metrics_(metrics),
      log_(log),
      clock_(clock),
      ref_(ref),
      operation_(operation),
      start_(clock.Now()) {
  telemetry::StartSpanOptions options;
  options.trace_id = telemetry::TraceIdFromClaimUid(ref.uid);
  options.start_time = start_;
  span_ = tracer.StartSpan(operation == Operation::kPrepare ? "PrepareClaim" : "UnprepareClaim",
                           options);
  span_->SetAttribute("k8s.namespace.name", ref.namespace_name);
  span_->SetAttribute("k8s.resourceclaim.name", ref.name);
  span_->SetAttribute("k8s.resourceclaim.uid", ref.uid);
  span_->SetAttribute("dra.pool", std::string(pool));
  span_->SetAttribute("k8s.node.name", std::string(pool));
  if (metrics_ != nullptr) {
    metrics_->AddInFlight(operation_, 1);
  }
}

ClaimTelemetry::~ClaimTelemetry() {
  if (!finished_) {
    Finish(absl::InternalError("claim handling ended without an outcome"));
  }
}

void ClaimTelemetry::SetAttribute(absl::string_view key, telemetry::AttributeValue value) {
  span_->SetAttribute(key, std::move(value));
}

void ClaimTelemetry::AddEvent(absl::string_view name) { span_->AddEvent(name); }

void ClaimTelemetry::Finish(const absl::Status& status) {
  if (finished_) {
    return;
  }
  finished_ = true;
  const FailureReason reason = ReasonOf(status);
  if (status.ok()) {
    span_->SetStatus(telemetry::StatusCode::kOk);
  } else {
    span_->SetAttribute("error.type", std::string(ToString(reason)));
    span_->SetStatus(telemetry::StatusCode::kError, status.message());
  }
  const absl::Duration took = clock_.Now() - start_;
  const telemetry::SpanContext context = span_->context();
  const std::string trace_id = context.IsValid() ? context.trace_id.ToHex() : "";
  if (metrics_ != nullptr) {
    metrics_->AddInFlight(operation_, -1);
    metrics_->RecordClaim(operation_, reason, took, trace_id);
  }
  if (log_ != nullptr) {
    log_->Add({.time = start_,
               .operation = operation_,
               .namespace_name = ref_.namespace_name,
               .name = ref_.name,
               .uid = ref_.uid,
               .reason = reason,
               .error = std::string(status.message()),
               .duration = took,
               // The lifecycle trace id is known even when this span was not sampled.
               .trace_id =
                   trace_id.empty() ? telemetry::TraceIdFromClaimUid(ref_.uid).ToHex() : trace_id});
  }
  span_->End();
}

ClaimTelemetry::PhaseScope::PhaseScope(ClaimTelemetry& claim, Phase phase)
    : claim_(claim),
      phase_(phase),
      start_(claim.clock_.Now()),
      span_(claim.span_->StartChild(ToString(phase))) {}

ClaimTelemetry::PhaseScope::~PhaseScope() {
  if (claim_.metrics_ != nullptr) {
    claim_.metrics_->ObservePhase(phase_, claim_.clock_.Now() - start_);
  }
  span_->End();
}

void ClaimTelemetry::PhaseScope::Fail(const absl::Status& status) {
  span_->SetStatus(telemetry::StatusCode::kError, status.message());
}

}  // namespace dralens::driver::prepare
