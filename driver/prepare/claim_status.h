// ResourceClaim `status.devices`: what this driver reports about the devices it prepared.
//
// On prepare, one entry per prepared device of ours (driver, pool, device and, for a shared
// allocation, shareID), with a `Ready` condition (True, reason Prepared) and `data`:
//   {"uuid": "GPU-...|MIG-...", "migProfile": "1g.10gb" (MIG devices), "sharingStrategy":
//    "exclusive|time_slicing|mps|shared_claim|consumable"}
// On unprepare our entries are removed. Entries of other drivers (and of our driver in other
// pools) are never touched: the list is a map keyed by (driver, pool, device, shareID) that
// several drivers share.
//
// Writes leave the prepare path at once: ApiClaimStatusWriter queues them for one background
// thread, which PUTs /status with the resourceVersion of the claim the preparer fetched (a
// conflict re-reads the claim and tries again). The kubelet's answer never waits for the API
// server. Per claim only the latest wish is kept: a claim unprepared before its entries were
// written is simply not written.
//
// An API server that drops the field (DRAResourceClaimDeviceStatus disabled) accepts the write
// and stores nothing: that is logged once at warn, counted (result "dropped") and tolerated.
//
//   dralens_node_claim_status_writes_total{operation,result}   publish | clear; ok, dropped,
//                                                               gone (claim deleted), error
#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "driver/prepare/checkpoint.h"
#include "driver/prepare/claim_handler.h"
#include "driver/prepare/claim_plan.h"
#include "nlohmann/json.hpp"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/k8s/client.h"

namespace dralens::driver::prepare {

// Our entries for a prepared claim, as the API's AllocatedDeviceStatus objects. `generation` is
// the claim's metadata.generation (0: unknown, not written). Pure.
nlohmann::json DeviceStatusEntries(const CheckpointClaim& claim,
                                   const std::map<std::string, OwnedDevice>& owned,
                                   absl::string_view driver, absl::string_view node,
                                   int64_t generation, absl::Time now);

// `current` (status.devices, or null) with every entry of (driver, pool) replaced by `ours`
// (an empty array removes them); other entries keep their order. Pure.
nlohmann::json MergeDeviceStatus(const nlohmann::json& current, absl::string_view driver,
                                 absl::string_view pool, const nlohmann::json& ours);

enum class StatusWrite { kPublish, kClear };
enum class StatusWriteResult { kOk, kDropped, kGone, kError };
absl::string_view ToString(StatusWrite write);
absl::string_view ToString(StatusWriteResult result);

struct ClaimStatusMetrics {
  prometheus::Family<prometheus::Counter>& writes_total;
  std::array<std::array<prometheus::Counter*, 4>, 2> writes{};  // [write][result]

  static ClaimStatusMetrics Create(prometheus::Registry& registry);
  void Record(StatusWrite write, StatusWriteResult result);
};

// Where the preparer sends its wishes. Implementations never block on the API server.
class ClaimStatusWriter {
 public:
  virtual ~ClaimStatusWriter() = default;
  // Our entries for `claim` should be `entries`. `fetched` is the claim as the preparer read it
  // (its resourceVersion saves a GET when nothing changed since).
  virtual void Publish(const ClaimRef& claim, nlohmann::json fetched, nlohmann::json entries) = 0;
  // Our entries for `claim` should be gone.
  virtual void Clear(const ClaimRef& claim) = 0;
};

// For a preparer whose role reports no status.
class NoClaimStatus final : public ClaimStatusWriter {
 public:
  void Publish(const ClaimRef&, nlohmann::json, nlohmann::json) override {}
  void Clear(const ClaimRef&) override {}
};

struct ApiClaimStatusOptions {
  std::string driver_name;
  std::string pool_name;
  // Writes of one wish before it is given up (conflicts and transient errors alike).
  int max_attempts = 6;
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
};

// Thread-safe. Start() runs the writer thread; Stop() (and the destructor) ends it after the
// write in progress; wishes not written by then are dropped and logged.
class ApiClaimStatusWriter final : public ClaimStatusWriter {
 public:
  // Not owned; both must outlive the writer.
  ApiClaimStatusWriter(k8s::KubeClient& client, ClaimStatusMetrics& metrics,
                       ApiClaimStatusOptions options);
  ~ApiClaimStatusWriter() override;

  void Start();
  void Stop();

  // ClaimStatusWriter
  void Publish(const ClaimRef& claim, nlohmann::json fetched, nlohmann::json entries) override;
  void Clear(const ClaimRef& claim) override;

  // Blocks until every wish queued so far is written or given up (or `timeout` passed).
  // Returns whether the queue ran empty. For tests and shutdown.
  bool Flush(absl::Duration timeout);

 private:
  struct Wish {
    ClaimRef claim;
    StatusWrite write = StatusWrite::kPublish;
    std::optional<nlohmann::json> fetched;
    nlohmann::json entries;
    int attempts = 0;
    absl::Time not_before = absl::InfinitePast();
  };
  void Enqueue(Wish wish);
  void Run();
  // One attempt. Returns the final result, or nullopt to try again (after `retry_in`).
  std::optional<StatusWriteResult> Attempt(Wish& wish, absl::Duration& retry_in);

  k8s::KubeClient& client_;
  ClaimStatusMetrics& metrics_;
  const ApiClaimStatusOptions options_;

  absl::Mutex mu_;
  std::map<std::string, Wish> wishes_ ABSL_GUARDED_BY(mu_);  // by claim UID
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);       // UIDs with a wish, oldest first
  bool busy_ ABSL_GUARDED_BY(mu_) = false;                   // a write is in progress
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;               // wishes queued so far
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool warned_dropped_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<std::thread> thread_;
};

}  // namespace dralens::driver::prepare
