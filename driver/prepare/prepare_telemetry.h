// Metrics and spans of claim preparation, per the telemetry contract:
//
//   dralens_node_claims_total{operation,result,reason}      one per claim
//   dralens_node_claim_duration_seconds{operation,result}   per claim, trace_id exemplars
//   dralens_node_phase_duration_seconds{phase}              fetch_claim, checkpoint, mig, sharing,
//   cdi dralens_node_in_flight{operation} dralens_node_prepared_claims,
//   dralens_node_prepared_devices{type} dralens_node_checkpoint_writes_total{result}
//   dralens_node_requests_total{operation,api,result}       one per kubelet call (driver/plugin)
//   dralens_device_info / _memory_bytes / _state / _consumers   per device of the inventory;
//       state is unhealthy, else prepared (some claim holds it), else free
//   dralens_mig_devices{parent,profile,state}, dralens_mig_placeable{parent,profile}
//
// Spans: one root span per claim whose trace id is TraceIdFromClaimUid(uid), so the node's
// spans join the claim's lifecycle trace that the cluster role writes; a child per phase. The
// claim span's trace id is the exemplar on the duration histogram, which is how a slow bucket
// leads to its claim.
//
// Failure reasons travel inside absl::Status as a payload (WithReason/ReasonOf), so the
// preparer's error paths stay plain `return status;` and the reason is bounded.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "driver/prepare/checkpoint.h"
#include "driver/prepare/claim_handler.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/model/inventory.h"
#include "src/telemetry/exemplar.h"
#include "src/telemetry/tracing/tracer.h"

namespace dralens::driver::prepare {

enum class Operation { kPrepare, kUnprepare };
absl::string_view ToString(Operation operation);

enum class FailureReason {
  kNone,
  kInvalidRequest,   // a malformed claim reference from the kubelet
  kClaimNotFound,    // the ResourceClaim is gone
  kClaimReplaced,    // same name, another UID
  kNotAllocated,     // no allocation in the claim's status
  kForeignDevice,    // a device this node does not have, or another node's pool
  kDeviceBusy,       // the device is prepared for another claim
  kApiError,         // the API server failed or could not be reached
  kCheckpointError,  // the checkpoint could not be written
  kCdiError,         // the CDI spec could not be written or removed
  kMigError,         // a MIG instance could not be created or destroyed
  kInvalidConfig,    // the claim's or class's opaque config is malformed or does not apply
  kSharingError,     // the sharing settings could not be applied (time slice, MPS daemon)
  kInternal,         // anything else
};
absl::string_view ToString(FailureReason reason);

// Attaches `reason` to a non-OK status (OK stays OK); ReasonOf reads it back: kNone for OK,
// kInternal for an error that carries none.
absl::Status WithReason(absl::Status status, FailureReason reason);
FailureReason ReasonOf(const absl::Status& status);

enum class Phase { kFetchClaim, kCheckpoint, kMig, kSharing, kCdi };
absl::string_view ToString(Phase phase);

// The families. Built once per process; the preparer and the plugin take a pointer.
class PrepareMetrics {
 public:
  PrepareMetrics(prometheus::Registry& registry, telemetry::ExemplarStore& exemplars);

  void RecordClaim(Operation operation, FailureReason reason, absl::Duration duration,
                   absl::string_view trace_id);
  void ObservePhase(Phase phase, absl::Duration duration);
  void AddInFlight(Operation operation, double delta);
  void RecordCheckpointWrite(bool ok);
  // One dynamic MIG instance created (`create` true) or destroyed.
  void RecordMigOperation(bool create, bool ok, absl::Duration duration);
  // One sharing decision for one device: `strategy` and `refusal` are the planner's labels
  // (sharing::ToString), `refusal` "none" when granted; "apply_error" when granted but the
  // settings could not be applied.
  void RecordSharingDecision(absl::string_view strategy, bool granted, absl::string_view refusal);
  // One kubelet call; `api` is "v1" or "v1beta1".
  void RecordCall(Operation operation, absl::string_view api, bool all_ok);

  // What the prepared claims hold: claims per device, and totals.
  struct Usage {
    std::map<std::string, int> consumers;  // device name -> prepared claims using it
    size_t claims = 0;
    size_t gpu_devices = 0;
    size_t mig_devices = 0;
  };
  // Pure: the usage recorded in `checkpoint` (PrepareCompleted claims only).
  static Usage UsageOf(const Checkpoint& checkpoint);

  // The slow path, when the inventory changes: (re)creates the identity series of every device
  // and the MIG layout series, removes those of devices that went away, then applies the last
  // usage. Thread-safe.
  void SetInventory(const model::Inventory& inventory);
  // The fast path, after every claim operation: only sets the values of cached series (device
  // state and consumers, MIG devices by state, prepared totals). Thread-safe.
  void SetUsage(const Usage& usage);
  // The devices that are unhealthy now (device health): their state series reads
  // "unhealthy", whatever their claims. Thread-safe.
  void SetUnhealthy(std::set<std::string> devices);
  // Both, for callers that have an inventory and a checkpoint at hand.
  void Refresh(const model::Inventory& inventory, const Checkpoint& checkpoint) {
    SetInventory(inventory);
    SetUsage(UsageOf(checkpoint));
  }

 private:
  // The series part of SetInventory.
  void ApplyInventory(const model::Inventory& inventory) ABSL_LOCKS_EXCLUDED(mu_);

  prometheus::Family<prometheus::Counter>& claims_total_;
  prometheus::Family<prometheus::Counter>& requests_total_;
  prometheus::Family<prometheus::Counter>& checkpoint_writes_;
  prometheus::Family<prometheus::Histogram>& phase_duration_;
  prometheus::Family<prometheus::Gauge>& in_flight_;
  prometheus::Family<prometheus::Gauge>& prepared_claims_;
  prometheus::Family<prometheus::Gauge>& prepared_devices_;
  prometheus::Family<prometheus::Gauge>& device_info_;
  prometheus::Family<prometheus::Gauge>& device_memory_;
  prometheus::Family<prometheus::Gauge>& device_state_;
  prometheus::Family<prometheus::Gauge>& device_consumers_;
  prometheus::Family<prometheus::Gauge>& mig_devices_;
  prometheus::Family<prometheus::Gauge>& mig_placeable_;
  prometheus::Family<prometheus::Counter>& mig_operations_;
  prometheus::Family<prometheus::Histogram>& mig_operation_duration_;
  prometheus::Family<prometheus::Counter>& sharing_decisions_;
  // operation × result
  std::map<std::pair<Operation, bool>, telemetry::ExemplarHistogram> claim_duration_;

  // The series of each device, cached so that usage updates touch no family maps.
  struct DeviceSeries {
    prometheus::Labels info;
    bool mig = false;
    std::string mig_key;  // "<parent>/<profile>" for MIG devices
    prometheus::Gauge* state_free = nullptr;
    prometheus::Gauge* state_prepared = nullptr;
    prometheus::Gauge* state_unhealthy = nullptr;
    prometheus::Gauge* consumers = nullptr;
  };
  struct MigGroup {
    prometheus::Gauge* free = nullptr;
    prometheus::Gauge* prepared = nullptr;
  };
  absl::Mutex mu_;
  std::map<std::string, DeviceSeries> devices_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, MigGroup> mig_groups_ ABSL_GUARDED_BY(mu_);  // by mig_key
  std::map<prometheus::Labels, prometheus::Labels> mig_group_labels_ ABSL_GUARDED_BY(mu_);
  std::set<prometheus::Labels> mig_placeable_series_ ABSL_GUARDED_BY(mu_);
  Usage usage_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> unhealthy_ ABSL_GUARDED_BY(mu_);
  prometheus::Gauge* prepared_claims_value_;
  prometheus::Gauge* prepared_gpu_value_;
  prometheus::Gauge* prepared_mig_value_;
};

// The last outcomes of claim operations, newest last, for /debug/claims: what this node did
// with each claim and why. Bounded; thread-safe.
class DecisionLog {
 public:
  struct Decision {
    absl::Time time;
    Operation operation = Operation::kPrepare;
    std::string namespace_name;
    std::string name;
    std::string uid;
    FailureReason reason = FailureReason::kNone;
    std::string error;  // the message the kubelet got; "" on success
    absl::Duration duration;
    std::string trace_id;  // the claim's lifecycle trace
  };

  explicit DecisionLog(size_t capacity = 256) : capacity_(capacity) {}
  void Add(Decision decision) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<Decision> Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::vector<Decision> ring_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;  // where the next one goes once the ring is full
};

// One claim's telemetry: a root span in the claim's lifecycle trace, phase children, and the
// per-claim metrics at Finish. `metrics` may be null (no metrics), the tracer may be a no-op.
class ClaimTelemetry {
 public:
  ClaimTelemetry(PrepareMetrics* metrics, telemetry::Tracer& tracer, common::Clock& clock,
                 Operation operation, const ClaimRef& ref, absl::string_view pool,
                 DecisionLog* log = nullptr);
  ~ClaimTelemetry();  // Finish(Internal) if Finish was not called
  ClaimTelemetry(const ClaimTelemetry&) = delete;
  ClaimTelemetry& operator=(const ClaimTelemetry&) = delete;

  // Times one phase as a child span and a histogram observation, until the returned object
  // goes out of scope.
  class PhaseScope {
   public:
    PhaseScope(ClaimTelemetry& claim, Phase phase);
    ~PhaseScope();
    PhaseScope(const PhaseScope&) = delete;
    PhaseScope& operator=(const PhaseScope&) = delete;
    void Fail(const absl::Status& status);

   private:
    ClaimTelemetry& claim_;
    Phase phase_;
    absl::Time start_;
    telemetry::SpanPtr span_;
  };
  PhaseScope Time(Phase phase) { return PhaseScope(*this, phase); }

  void SetAttribute(absl::string_view key, telemetry::AttributeValue value);
  void AddEvent(absl::string_view name);
  // Records the outcome once; later calls do nothing.
  void Finish(const absl::Status& status);
  telemetry::SpanContext context() const { return span_->context(); }

 private:
  PrepareMetrics* metrics_;
  DecisionLog* log_;
  common::Clock& clock_;
  ClaimRef ref_;
  Operation operation_;
  absl::Time start_;
  telemetry::SpanPtr span_;
  bool finished_ = false;
};

}  // namespace dralens::driver::prepare
