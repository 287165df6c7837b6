// SlicePublisher: converges the API server to the SliceBuilder's output for one node and driver.
//
// Sync() is one convergence pass:
//   1. look up the Node's uid once (for the slices' owner reference);
//   2. list the existing slices with `spec.nodeName=<node>,spec.driver=<driver>` (the selector
//      the kubelet wipes with), whoever created them: the pool is ours alone;
//   3. build the desired slices at the highest generation seen and compare them, as a multiset,
//      with the existing ones (spec, labels and owner references; server-set metadata is
//      ignored). Equal and all at one generation: nothing is written;
//   4. otherwise write every slice at generation max(seen, last written) + 1: existing slices
//      (paired by name order) are updated with their stored resourceVersion, missing ones
//      created, and only then are extra ones deleted, so that consumers (who use the highest
//      generation and check resourceSliceCount) never see a mix that looks complete.
// A conflict (someone else wrote a slice) or a NotFound (someone deleted it meanwhile) restarts
// the pass from the list, up to `max_conflict_passes` times; other API errors end the pass with
// the error, annotated.
//
// Run() starts a background loop that calls Sync() whenever Publish() or Resync() asked for it
// and every `resync_interval`, and retries failures with exponential backoff (doubling from
// `initial_backoff` up to `max_backoff`, at least the server's Retry-After). Time comes from the
// injected Clock: the loop checks the clock at least every `poll_interval` of real time, so a
// test's FakeClock::Advance releases it.
//
// The first Sync after start always lists and converges, which republishes what the kubelet
// wiped while the plugin was away.
//
// Drift: Observe() is fed the watch events of this node's slices of this driver (the same
// selector). After every successful pass the publisher remembers what the pool on the server
// is (slice name → owned content). An event that departs from it — a slice of the pool
// deleted, a slice changed by someone else, a slice it did not write — marks the pool out of
// sync (Published() is false from then on) and wakes the loop, which converges at once (or
// after the current backoff). Observe() waits for a pass in progress, so the events of the
// publisher's own writes are judged against what that pass wrote and are not drift.
//
// Thread-safety: every public method is thread-safe. Sync() calls are serialized.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "driver/slices/slice_builder.h"
#include "nlohmann/json.hpp"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/k8s/client.h"
#include "src/model/inventory.h"

namespace dralens::driver::slices {

class SliceMetrics;

struct SlicePublisherOptions {
  std::string node_name;
  std::string driver_name = "gpu.dralens.dev";
  bool dynamic_mig = false;
  int api_minor = 34;                // see SliceBuilderOptions::api_minor
  bool consumable_capacity = false;  // see SliceBuilderOptions::consumable_capacity
  absl::Duration initial_backoff = absl::Milliseconds(500);
  absl::Duration max_backoff = absl::Seconds(60);
  // Periodic re-list and converge while idle; zero disables it.
  absl::Duration resync_interval = absl::Minutes(5);
  // The longest real time the loop waits before looking at the Clock again.
  absl::Duration poll_interval = absl::Seconds(1);
  // Passes of one Sync() restarted after a conflict or a concurrent deletion.
  int max_conflict_passes = 3;
  // A repair of drift that follows the previous repair within this window is held back, from
  // initial_backoff doubling to max_backoff: another writer that keeps changing the pool back
  // (a second driver instance for the node) must not turn the two into a write loop. The first
  // repair after a quiet window, e.g. of a kubelet restart's wipe, is never held.
  absl::Duration repair_window = absl::Seconds(10);
  // Not owned; may be null.
  SliceMetrics* metrics = nullptr;
};

// What one Sync() did.
struct SyncResult {
  int created = 0;
  int updated = 0;
  int deleted = 0;
  int64_t generation = 0;  // the pool generation on the server afterwards
  size_t slices = 0;       // slices in the pool afterwards
  size_t devices = 0;      // devices in the pool afterwards

  bool changed() const { return created + updated + deleted > 0; }
};

// dralens_slices_* (see the metric catalogue). Thread-safe.
class SliceMetrics {
 public:
  explicit SliceMetrics(prometheus::Registry& registry);
  void RecordSync(const absl::StatusOr<SyncResult>& result, absl::Duration duration);
  // One observed drift; `kind` is deleted, modified or added.
  void RecordDrift(absl::string_view kind);

 private:
  prometheus::Family<prometheus::Counter>& syncs_;
  prometheus::Family<prometheus::Counter>& drifts_;
  prometheus::Histogram& duration_;
  prometheus::Gauge& generation_;
  prometheus::Gauge& devices_;
  prometheus::Gauge& slices_;
};

class SlicePublisher {
 public:
  // `client` and `clock` are not owned and must outlive the publisher.
  SlicePublisher(k8s::KubeClient& client, common::Clock& clock, SlicePublisherOptions options);
  ~SlicePublisher();  // Stop()s the loop.
  SlicePublisher(const SlicePublisher&) = delete;
  SlicePublisher& operator=(const SlicePublisher&) = delete;

  // Sets the inventory to publish and wakes the loop. Does not contact the server.
  void Publish(model::Inventory inventory);
  // Sets the device taints to publish (by device name; device health) and wakes the loop.
  // Unchanged taints give identical slices, so nothing is written.
  void SetTaints(std::map<std::string, std::vector<model::DeviceTaint>> taints);
  // Asks the loop for a pass even if the inventory did not change (e.g. after the kubelet
  // re-registered the plugin and may have wiped the slices).
  void Resync();

  // A watch event about one slice of this node and driver (see "Drift" above). `type` is
  // ADDED, MODIFIED or DELETED; `object` the slice as the event carries it. Returns whether
  // the event was drift.
  bool Observe(absl::string_view type, const nlohmann::json& object);

  // One convergence pass for the latest inventory. FailedPrecondition before the first
  // Publish(). Used by the loop; tests and the node role's startup may call it directly.
  absl::StatusOr<SyncResult> Sync();

  // Starts the background loop (idempotent).
  void Run();
  // Stops the loop and waits for it; an in-flight API call finishes first. Idempotent.
  void Stop();

  // Readiness: when the last Sync() succeeded (Clock time), and whether the latest inventory
  // is on the server as of that pass and no drift was observed since.
  std::optional<absl::Time> LastSuccess() const;
  bool Published() const;
  // The error of the last failed pass; OK after a success.
  absl::Status LastError() const;
  // Passes run so far (successful or not).
  int64_t SyncCountForTest() const;

 private:
  absl::StatusOr<SyncResult> SyncPass(
      const model::Inventory& inventory,
      const std::map<std::string, std::vector<model::DeviceTaint>>& taints,
      std::map<std::string, std::string>* on_server) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  absl::Status EnsureNodeUid();
  void Loop();

  k8s::KubeClient& client_;
  common::Clock& clock_;
  const SlicePublisherOptions options_;

  // Serializes Sync() passes and guards what only they touch.
  absl::Mutex sync_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::string node_uid_ ABSL_GUARDED_BY(sync_mu_);
  int64_t last_generation_ ABSL_GUARDED_BY(sync_mu_) = 0;
  // The pool on the server after the last successful pass: slice name → ContentKey. Unknown
  // before the first and after a failed pass (whose retry converges anyway).
  std::optional<std::map<std::string, std::string>> on_server_ ABSL_GUARDED_BY(sync_mu_);

  mutable absl::Mutex mu_;
  std::optional<model::Inventory> inventory_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<model::DeviceTaint>> taints_ ABSL_GUARDED_BY(mu_);
  uint64_t inventory_seq_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by Publish() and SetTaints()
  uint64_t published_seq_ ABSL_GUARDED_BY(mu_) = 0;  // seq of the last successful pass
  bool want_sync_ ABSL_GUARDED_BY(mu_) = false;
  // False from an observed drift until the next successful pass.
  bool in_sync_ ABSL_GUARDED_BY(mu_) = true;
  // An observed drift the loop has not yet started a pass for.
  bool drift_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Time> last_success_ ABSL_GUARDED_BY(mu_);
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  int64_t sync_count_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex run_mu_;  // serializes Run()/Stop()
  std::unique_ptr<std::thread> thread_ ABSL_GUARDED_BY(run_mu_);
};

}  // namespace dralens::driver::slices
