// Why a claim pends, or where it landed: what `dralens explain`, /debug/claims/<ns>/<name> and
// the Events on pending claims say. The analyzer fills a ClaimExplanation
// (Analyzer::Explain); the functions here only render it, so they are pure.
//
// The funnel of a request, per device class (docs/cluster.md, "Why a claim pends"):
//   devices the class matches -> of them, those the request's selectors match -> of them, those
//   without an untolerated NoSchedule/NoExecute taint -> of them, those free; the rest of the
//   untainted matches are allocated (to how many claims), share a GPU whose counters other
//   allocations use up, or sit on a node that is NotReady or gone.
// "Nearest" names the free, untainted devices of the class that one selector of the request
// keeps out (grouped by product and that selector), or, for a tainted request, the taint that
// keeps matching free devices out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "exporter/cluster/findings.h"
#include "nlohmann/json.hpp"

namespace dralens::exporter::cluster {

struct NearMiss {
  int64_t devices = 0;
  std::string product;
  std::vector<std::string> nodes;  // sorted, at most a few
  int64_t more_nodes = 0;          // nodes beyond `nodes`
  // What keeps them out: a selector expression of the request ("without `...`"), or a taint
  // ("key=value:Effect", not tolerated).
  std::string selector = {};
  std::string taint = {};
};

struct RequestFunnel {
  std::string request;  // the request's name ("gpu", or "gpu/h100" for a firstAvailable option)
  std::string device_class;
  bool class_exists = true;
  bool all = false;           // allocationMode All
  int64_t count = 1;          // devices asked for (ExactCount)
  int64_t class_devices = 0;  // published devices the class surely matches
  // Devices whose class or request verdict the CEL subset cannot decide (not in `matching`).
  int64_t unknown = 0;
  int64_t matching = 0;  // of the class's devices, those the request's selectors match
  int64_t untainted = 0;
  int64_t free = 0;
  int64_t allocated = 0;  // untainted matches held by claims
  int64_t holders = 0;    // distinct claims holding them
  int64_t blocked = 0;    // untainted matches whose GPU's shared counters others use up
  int64_t node_down = 0;  // untainted matches on a NotReady or gone node
  PendingReason reason = PendingReason::kWaitingForPod;
  // From the counts kept per request shape, without a scan of the class's devices (the Events
  // of a large fleet): no breakdown of the busy devices and no nearest miss.
  bool counts_only = false;
  std::optional<NearMiss> nearest;
  // A firstAvailable request: one funnel per option, in order (the fields above are unused).
  std::vector<RequestFunnel> options = {};
};

struct PlacedDevice {
  std::string driver, pool, device;
  std::string node;  // "" when its slice is not published
  std::string product;
  std::string device_class;  // of the request it was allocated for
  std::string pcie_root;
  std::optional<int64_t> numa_node;
  std::string nvlink_domain = {};
};

// A gang (exporter/cluster/gangs.h): one pod group of a scheduling.k8s.io Workload with a gang
// policy, or one replica of it.
struct GangView {
  std::string ns, workload, pod_group, replica;
  int64_t min_count = 0;
  int64_t pods = 0;
  int64_t scheduled = 0;
  absl::Time since = absl::InfinitePast();  // its first pod's creation
  std::vector<std::string> claims;          // of its unscheduled pods
  int64_t short_devices = 0;
  bool pending() const { return scheduled < min_count; }
};

struct ClaimExplanation {
  std::string ns, name, uid;
  ClaimState state = ClaimState::kPending;
  absl::Time created = absl::InfinitePast();
  absl::Time now = absl::InfinitePast();
  // Pending: the claim's reason (the most severe of its requests') and each request's funnel.
  std::optional<PendingReason> reason;
  std::vector<RequestFunnel> requests;
  // Allocated.
  std::optional<absl::Time> allocated_at;  // allocationTimestamp, else when first seen allocated
  std::vector<PlacedDevice> devices;
  std::optional<ClaimTopology> topology;  // two or more devices: spread and NVLink
  bool topology_sensitive = false;
  std::vector<std::string> reserved_for;  // "ns/pod"
  std::vector<std::string> running_pods;  // of them, Running
  double gpus = 0;                        // GPU-equivalents held
  double gpu_seconds = 0;                 // since allocated_at
  double cost = 0;                        // gpu_seconds at today's prices
  // The pending gang whose unscheduled pods use this claim, if any.
  std::optional<GangView> gang = {};
};

// "NoCapacity" for kNoCapacity: the Event reason of a pending claim.
std::string EventReason(PendingReason reason);
// A request's funnel as one line, e.g. "class gpu.dralens.dev: 96 devices; 12 match the
// request's selectors; 12 untainted; 0 free (12 allocated to 9 claims)". Pure.
std::string FunnelText(const RequestFunnel& funnel);
// The Event note of a pending claim: every request's funnel, at most `max_bytes` (the API
// allows 1 kB), cut on a UTF-8 boundary with a trailing "...".
std::string PendingNote(const ClaimExplanation& explanation, size_t max_bytes = 1024);
// The text `dralens explain` prints.
std::string ExplanationText(const ClaimExplanation& explanation);
// What /debug/claims/<ns>/<name> serves.
nlohmann::json ExplanationJson(const ClaimExplanation& explanation);

}  // namespace dralens::exporter::cluster
