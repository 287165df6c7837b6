#include "src/telemetry/catalog.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dralens::telemetry {
namespace {

std::vector<MetricSpec> BuildCatalog() {
  using K = MetricKind;
  using S = Stability;
  return {
      // Self.
      {"dralens_build_info",
       K::kInfo,
       {"version", "role"},
       "all",
       "Build of the running binary; the value is always 1.",
       S::kStable},
      {"dralens_scrape_duration_seconds",
       K::kHistogram,
       {"format"},
       "all",
       "Time spent rendering and sending /metrics (written as it is rendered), by exposition "
       "format (text, openmetrics).",
       S::kBeta},
      {"dralens_kube_requests_total",
       K::kCounter,
       {"verb", "resource", "code"},
       "all",
       "Kubernetes API requests by verb, resource and HTTP status code (\"error\" for "
       "transport failures); one per attempt.",
       S::kBeta},
      {"dralens_kube_watch_restarts_total",
       K::kCounter,
       {"resource", "reason"},
       "all",
       "Watch restarts by resource and reason (gone, dropped, error).",
       S::kBeta},

      {"dralens_otlp_spans_total",
       K::kCounter,
       {"outcome"},
       "all",
       "Finished spans by what became of them: exported, rejected (by the collector's partial "
       "success), dropped_queue_full, dropped_shutdown, dropped_export_failed.",
       S::kBeta},
      {"dralens_otlp_requests_total",
       K::kCounter,
       {"outcome"},
       "all",
       "OTLP export requests by outcome: success, retryable_status (429, 502, 503, 504), "
       "failed_status, connection_error, timeout. Each retry is one more request.",
       S::kBeta},

      // Devices of this node.
      {"dralens_device_info",
       K::kInfo,
       {"device", "uuid", "product", "type", "parent", "profile", "numa_node", "pci_bus_id"},
       "node",
       "One series per device this node has (type gpu or mig); parent and profile are set for "
       "MIG devices. The value is always 1.",
       S::kStable},
      {"dralens_device_memory_bytes",
       K::kGauge,
       {"device"},
       "node",
       "Memory of the device.",
       S::kBeta},
      {"dralens_device_utilization_ratio",
       K::kGauge,
       {"device"},
       "node",
       "How busy the device was in the last sampling round (--utilization-interval), 0 to 1: "
       "nvmlDeviceGetUtilizationRates for a GPU not in MIG mode, GPM graphics-engine activity "
       "since the previous round for a MIG device (Hopper and later). Absent for a device NVML "
       "has no figure for.",
       S::kAlpha},
      {"dralens_device_memory_used_bytes",
       K::kGauge,
       {"device"},
       "node",
       "Device memory in use, from the last sampling round.",
       S::kAlpha},
      {"dralens_device_state",
       K::kGauge,
       {"device", "state"},
       "node",
       "1 for the device's current state (free, prepared, unhealthy), 0 for the others.",
       S::kStable},
      {"dralens_device_consumers",
       K::kGauge,
       {"device"},
       "node",
       "How many prepared claims hold the device (each claim once, however many shares it has).",
       S::kBeta},

      // MIG layout of this node.
      {"dralens_mig_devices",
       K::kGauge,
       {"parent", "profile", "state"},
       "node",
       "MIG devices per parent GPU and profile, by state (free, prepared).",
       S::kBeta},
      {"dralens_mig_placeable",
       K::kGauge,
       {"parent", "profile"},
       "node",
       "How many more instances of each MIG profile still fit on the GPU, given the instances "
       "it has and the profile's placement rules. Only GPUs in MIG mode have series.",
       S::kBeta},

      // What NVML would not let the node see or watch.
      {"dralens_discovery_denied",
       K::kGauge,
       {"what"},
       "node",
       "GPUs, MIG profiles and MIG devices the latest discovery left out because NVML answered "
       "NVML_ERROR_NO_PERMISSION (what gpu: GPUs; mig_profiles: GPUs whose MIG profiles were not "
       "readable; mig_device: MIG devices).",
       S::kBeta},
      {"dralens_health_unmonitored_gpus",
       K::kGauge,
       {},
       "node",
       "GPUs whose health events could not be registered; with --device-taints they carry the "
       "unmonitored taint.",
       S::kBeta},

      {"dralens_mig_operations_total",
       K::kCounter,
       {"operation", "result"},
       "node",
       "Dynamic MIG instances created and destroyed, and MIG mode switched on and off (operation "
       "create, destroy, enable, disable; result ok, error).",
       S::kBeta},
      {"dralens_mig_operation_duration_seconds",
       K::kHistogram,
       {"operation"},
       "node",
       "Time to create or destroy one dynamic MIG instance (GPU and compute instance), or to "
       "switch MIG mode.",
       S::kBeta},

      // GPU sharing.
      {"dralens_sharing_restores_total",
       K::kCounter,
       {"strategy", "result"},
       "node",
       "Sharing settings (time slice, MPS control daemon) of claims restored from the checkpoint "
       "applied again at start, one per device, by strategy and result (ok, error).",
       S::kAlpha},
      {"dralens_sharing_decisions_total",
       K::kCounter,
       {"strategy", "result", "reason"},
       "node",
       "Sharing decisions taken while preparing a device, by strategy (exclusive, "
       "time_slicing, mps, shared_claim, consumable), result (granted, refused) and reason "
       "(none when granted; otherwise device_busy, over_capacity, mixed_strategy, or "
       "apply_error when the settings could not be applied).",
       S::kBeta},

      // NodePrepareResources / NodeUnprepareResources.
      {"dralens_node_requests_total",
       K::kCounter,
       {"operation", "api", "result"},
       "node",
       "Kubelet DRA calls by operation (prepare, unprepare), API version (v1, v1beta1) and "
       "result (ok when every claim succeeded, error otherwise).",
       S::kStable},
      {"dralens_node_kubelet_calls",
       K::kGauge,
       {"state"},
       "node",
       "Kubelet DRA calls in the node right now: queued (waiting for one of the fixed prepare "
       "workers) and running. A queue that stays long means calls arrive faster than claims can "
       "be prepared.",
       S::kBeta},
      {"dralens_node_claims_total",
       K::kCounter,
       {"operation", "result", "reason"},
       "node",
       "Claims prepared or unprepared, by result and reason (none on success; otherwise "
       "invalid_request, claim_not_found, claim_replaced, not_allocated, foreign_device, "
       "device_busy, api_error, checkpoint_error, cdi_error, mig_error, invalid_config, "
       "sharing_error, internal).",
       S::kStable},
      {"dralens_node_claim_duration_seconds",
       K::kHistogram,
       {"operation", "result"},
       "node",
       "Time to prepare or unprepare one claim. Buckets carry the claim's trace id as an "
       "exemplar.",
       S::kStable},
      {"dralens_node_phase_duration_seconds",
       K::kHistogram,
       {"phase"},
       "node",
       "Time spent in one phase of preparing a claim: fetch_claim, checkpoint, mig, sharing, "
       "cdi.",
       S::kBeta},
      {"dralens_node_in_flight",
       K::kGauge,
       {"operation"},
       "node",
       "Claims being prepared or unprepared right now.",
       S::kBeta},
      {"dralens_node_prepared_claims",
       K::kGauge,
       {},
       "node",
       "Claims this node has prepared (PrepareCompleted in the checkpoint).",
       S::kBeta},
      {"dralens_node_prepared_devices",
       K::kGauge,
       {"type"},
       "node",
       "Distinct devices held by prepared claims, by type (gpu, mig): a device shared by several "
       "claims counts once.",
       S::kBeta},
      {"dralens_node_claims",
       K::kGauge,
       {"state"},
       "node",
       "Claims on this node by preparation state (prepare_started, prepare_completed, "
       "unpreparing), as the claim ledger holds them; claims restored from the checkpoint at "
       "start count too.",
       S::kAlpha},
      {"dralens_node_claim_transitions_total",
       K::kCounter,
       {"from", "to"},
       "node",
       "Claim state transitions (unprepared, prepare_started, prepare_completed, unpreparing); "
       "every one is also a \"claim state\" event on the claim's span.",
       S::kAlpha},
      {"dralens_usage_rounds_total",
       K::kCounter,
       {"result"},
       "node",
       "Utilisation sampling rounds by result (ok, error). After an error the device series keep "
       "the last successful round's figures.",
       S::kAlpha},
      {"dralens_node_claim_idle_seconds",
       K::kGauge,
       {"namespace", "claim", "uid"},
       "node",
       "How long every device of the prepared claim has stayed below the idle threshold "
       "(--idle-threshold); 0 while any is busy. Absent until the claim's utilisation is known: "
       "never for a MIG device without GPM.",
       S::kAlpha},
      {"dralens_node_claim_gpus",
       K::kGauge,
       {"namespace", "claim", "uid", "device_class", "product"},
       "node",
       "GPU-equivalents each prepared claim holds on this node, by the DeviceClass of its "
       "requests and the GPU's product: 1 per GPU, a MIG instance's memory slices over its GPU's, "
       "a consumable share's memory over the GPU's. Deleted when the claim is unprepared.",
       S::kAlpha},
      {"dralens_node_idle_gpu_seconds_total",
       K::kCounter,
       {"namespace", "device_class", "product"},
       "node",
       "GPU-seconds the prepared claims of each namespace spent idle: a claim's "
       "dralens_node_claim_gpus times the time dralens_node_claim_idle_seconds counts. Rules price "
       "it with dralens_cluster_price_per_gpu_hour.",
       S::kAlpha},
      {"dralens_node_claim_info",
       K::kInfo,
       {"namespace", "claim", "uid", "device", "pool", "driver", "dra_claim_name",
        "dra_claim_namespace", "dra_driver_name", "dra_pool_name", "dra_device_name", "UUID",
        "GPU_I_ID"},
       "node",
       "One series per device of each prepared claim, deleted when the claim is unprepared. The "
       "dra_* labels repeat the claim's identity under dcgm-exporter's DRA label names; UUID (the "
       "GPU's, the parent's for a MIG device) and GPU_I_ID (the MIG GPU instance id) are "
       "dcgm-exporter's device labels, to join its series on. The value is always 1.",
       S::kAlpha},
      {"dralens_node_claim_status_writes_total",
       K::kCounter,
       {"operation", "result"},
       "node",
       "ResourceClaim status.devices writes by operation (publish on prepare, clear on "
       "unprepare) and result (ok; dropped: the API server stored nothing, e.g. with "
       "DRAResourceClaimDeviceStatus off; gone: the claim was deleted; error: given up after "
       "retries).",
       S::kAlpha},
      {"dralens_node_orphaned_claims",
       K::kGauge,
       {"reason"},
       "node",
       "Prepared claims (in this node's checkpoint) that nobody will unprepare, by reason: gone "
       "(the ResourceClaim was deleted), replaced (its name now has another UID), not_allocated "
       "(its allocation no longer holds the devices prepared here). Set by the periodic check.",
       S::kAlpha},
      {"dralens_node_orphaned_claim_age_seconds",
       K::kGauge,
       {"namespace", "claim", "uid"},
       "node",
       "One series per orphaned prepared claim: how long the checks of this process have found "
       "it orphaned. The series goes when the claim is unprepared or no longer orphaned.",
       S::kAlpha},
      {"dralens_node_orphan_checks_total",
       K::kCounter,
       {"result"},
       "node",
       "Checks of the prepared claims against the API server, by result (ok; error: at least "
       "one claim could not be fetched and was not judged).",
       S::kAlpha},
      {"dralens_node_orphans_unprepared_total",
       K::kCounter,
       {"result"},
       "node",
       "Orphaned claims unprepared by the node itself (--unprepare-orphans-after), through the "
       "kubelet's unprepare path, by result (ok, error).",
       S::kAlpha},
      {"dralens_node_checkpoint_writes_total",
       K::kCounter,
       {"result"},
       "node",
       "Durable checkpoint writes by result (ok, error).",
       S::kBeta},
      {"dralens_node_temp_files_removed_total",
       K::kCounter,
       {"location"},
       "node",
       "Temp files of interrupted atomic writes removed at start, by location (plugin_dir: the "
       "driver's own directory with the checkpoint; cdi_root: only the temp files of this "
       "driver's CDI specs).",
       S::kAlpha},

      // ResourceSlice publishing.
      {"dralens_slices_syncs_total",
       K::kCounter,
       {"result"},
       "node",
       "ResourceSlice convergence passes by result (unchanged, changed, error).",
       S::kBeta},
      {"dralens_slices_drift_total",
       K::kCounter,
       {"kind"},
       "node",
       "Changes to this node's published slices that the driver did not make, seen on its "
       "watch, by kind (deleted: e.g. the kubelet's wipe at its start; modified: edited by "
       "someone else; added: a slice of this node and driver the driver did not write). Each one "
       "starts a convergence pass.",
       S::kBeta},
      {"dralens_slices_sync_duration_seconds",
       K::kHistogram,
       {},
       "node",
       "Time of one ResourceSlice convergence pass.",
       S::kBeta},
      {"dralens_slices_pool_generation",
       K::kGauge,
       {},
       "node",
       "The pool generation on the API server after the last successful pass.",
       S::kBeta},
      {"dralens_slices_published_devices",
       K::kGauge,
       {},
       "node",
       "Devices in this node's published pool.",
       S::kBeta},
      {"dralens_slices_published",
       K::kGauge,
       {},
       "node",
       "ResourceSlices in this node's published pool.",
       S::kBeta},

      // Cluster role: claims.
      {"dralens_cluster_claims",
       K::kGauge,
       {"state", "device_class", "namespace"},
       "cluster",
       "ResourceClaims by state (pending, allocated, reserved, in_use), DeviceClass of their "
       "first request and namespace. in_use: a pod that reserved the claim is running."},
      {"dralens_cluster_pending_claims",
       K::kGauge,
       {"device_class", "reason"},
       "cluster",
       "Pending claims by DeviceClass and reason (waiting_for_pod, no_capacity, "
       "unsatisfiable, tainted, unknown)."},
      {"dralens_cluster_pending_claim_age_seconds",
       K::kGauge,
       {"namespace", "claim", "device_class", "reason"},
       "cluster",
       "Age of each pending claim, with the reason it pends. The series is deleted when the "
       "claim is allocated or deleted."},
      {"dralens_cluster_allocation_latency_seconds",
       K::kHistogram,
       {"device_class"},
       "cluster",
       "Time from a claim's creation to its allocation, observed once per claim."},
      {"dralens_cluster_claim_transitions_total",
       K::kCounter,
       {"to"},
       "cluster",
       "Claim lifecycle transitions observed (created, allocated, reserved, in_use, "
       "released, deleted); each is an event on the claim's lifecycle trace."},
      {"dralens_cluster_pending_gangs",
       K::kGauge,
       {"namespace"},
       "cluster",
       "Pending gangs (a gang pod group of a scheduling.k8s.io Workload, or one replica of it, "
       "with fewer than minCount pods scheduled), by namespace. No series where the API server "
       "serves no Workloads.",
       S::kAlpha},
      {"dralens_cluster_pending_gang_age_seconds",
       K::kGauge,
       {"namespace", "workload", "pod_group", "replica"},
       "cluster",
       "How long each pending gang has been pending, since its first pod was created; one series "
       "per pending gang.",
       S::kAlpha},
      {"dralens_cluster_pending_gang_short_devices",
       K::kGauge,
       {"namespace", "workload", "pod_group", "replica"},
       "cluster",
       "The devices a pending gang's claims lack when evaluated together: each request takes "
       "free matching devices no other request of the gang took (for whole-GPU classes, GPUs). "
       "0 while they would all fit.",
       S::kAlpha},
      {"dralens_cluster_claim_events_total",
       K::kCounter,
       {"reason", "result"},
       "cluster",
       "Kubernetes Events the leader wrote on pending claims, by reason (the pending reason in "
       "CamelCase: Unsatisfiable, Unknown, Tainted, NoCapacity, WaitingForPod) and result: "
       "created (a new Event), series_updated (the same Event seen again after 10 minutes), "
       "failed (the write failed; retried at the next pass).",
       S::kAlpha},

      // Cluster role: capacity.
      {"dralens_cluster_gpus",
       K::kGauge,
       {"node", "driver", "product", "state"},
       "cluster",
       "Physical GPUs by node, driver, product and state (free, allocated, unavailable), in "
       "GPU-equivalents: every GPU counts once whatever it is published as (a full device, "
       "static MIG devices, a partitionable counter set with its placements, consumable "
       "shares); a MIG instance or share counts as the fraction of its GPU it holds. "
       "unavailable: tainted NoSchedule/NoExecute, or the Node is NotReady or gone. Summed "
       "over state it is the node's number of GPUs; no DeviceClass takes part."},
      {"dralens_cluster_stranded_gpus",
       K::kGauge,
       {"kind", "node", "product", "device_class"},
       "cluster",
       "GPU-equivalents stranded right now, each under one kind (advertised_unhealthy, then "
       "allocated_not_running, then free_while_pending or unplaceable_fragment) and one "
       "DeviceClass (the holding request's; for free_while_pending the longest-pending claim's "
       "it could serve; else empty). Part of dralens_cluster_gpus, never more. A label set "
       "at 0 for --stranded-series-retention (15m) is dropped, with its two counters; it "
       "starts again from 0 when the node strands it again."},
      {"dralens_cluster_stranded_gpu_seconds_total",
       K::kCounter,
       {"kind", "node", "product", "device_class"},
       "cluster",
       "GPU-seconds spent stranded, with the labels of dralens_cluster_stranded_gpus."},
      {"dralens_cluster_stranded_cost_total",
       K::kCounter,
       {"kind", "node", "product", "device_class"},
       "cluster",
       "Cost of the stranded GPU-seconds at the price per GPU-hour of the class, else the "
       "product, else the default (a fraction of a GPU costs its fraction), in the price's "
       "currency."},
      {"dralens_cluster_pool_devices",
       K::kGauge,
       {"driver", "device_class", "product", "state"},
       "cluster",
       "Published devices (not GPUs) that match each DeviceClass across the fleet, by driver, "
       "product and state (free, allocated, tainted): how many devices a request of the class "
       "could still get. A device counts once per class it matches and every MIG placement "
       "counts as a device, so sums over classes are not capacity: use dralens_cluster_gpus."},
      {"dralens_cluster_price_per_gpu_hour",
       K::kGauge,
       {"device_class", "product"},
       "cluster",
       "The price of one GPU-hour (--price-file, else --price-per-device-hour) for each class and "
       "product the fleet publishes devices of; a MIG instance or share costs its fraction. Rules "
       "join it to the node's idle claims to price idle time.",
       S::kAlpha},
      {"dralens_cluster_gpu_seconds_total",
       K::kCounter,
       {"namespace", "device_class", "state"},
       "cluster",
       "GPU-seconds held by the claims of each namespace and DeviceClass (of the request each "
       "device was allocated for), in GPU-equivalents of dralens_cluster_gpus: in_use while a "
       "reserving pod runs, else allocated_not_running. Whether the GPU computes is measured "
       "on the nodes (dralens_node_claim_idle_seconds), not here.",
       S::kAlpha},
      {"dralens_cluster_cost_total",
       K::kCounter,
       {"namespace", "device_class", "state"},
       "cluster",
       "Cost of dralens_cluster_gpu_seconds_total at the price per GPU-hour of the class, else "
       "the product, else the default, in the price's currency.",
       S::kAlpha},
      {"dralens_cluster_claim_topology",
       K::kGauge,
       {"device_class", "namespace", "spread", "nvlink"},
       "cluster",
       "Allocated claims with two or more devices, by where the devices landed: spread is "
       "same_pcie_root, same_numa, cross_numa (one node, several NUMA nodes), cross_node, or "
       "unknown (a device not published, or no NUMA node to compare), from the devices' "
       "resource.kubernetes.io/pcieRoot and numaNode attributes; nvlink is connected (every "
       "device publishes the same nvlinkDomain attribute, a fabric's across nodes), "
       "not_connected (two devices differ, or none has NVLink) or unknown (a device not "
       "published).",
       S::kAlpha},
      {"dralens_cluster_claim_spread",
       K::kGauge,
       {"namespace", "claim", "device_class", "spread", "nvlink", "topology_sensitive"},
       "cluster",
       "One series per allocated claim with two or more devices, while it is allocated: its "
       "spread and nvlink (as dralens_cluster_claim_topology); topology_sensitive is true when "
       "its class is one of --topology-sensitive-classes, else false. The value is its number of "
       "devices.",
       S::kAlpha},
      {"dralens_cluster_mig_placeable",
       K::kGauge,
       {"node", "gpu", "profile"},
       "cluster",
       "How many more instances of each MIG profile fit on each GPU, from the published shared "
       "counters and the current allocations (any driver that publishes counters)."},
      {"dralens_cluster_leader",
       K::kGauge,
       {},
       "cluster",
       "1 while this replica holds the leader lease and exports cluster series, else 0."},
      {"dralens_cluster_stale_seconds",
       K::kGauge,
       {"resource"},
       "cluster",
       "How long this replica's view of a resource may have lagged the API server: seconds since "
       "its first failed list or watch, 0 once a list succeeds or a watch is accepted again. The "
       "cluster series keep their last values meanwhile."},
  };
}

}  // namespace

absl::string_view ToString(Stability stability) {
  switch (stability) {
    case Stability::kAlpha:
      return "alpha";
    case Stability::kBeta:
      return "beta";
    case Stability::kStable:
      return "stable";
  }
  return "alpha";
}

absl::string_view ToString(MetricKind kind) {
  switch (kind) {
    case MetricKind::kCounter:
      return "counter";
    case MetricKind::kGauge:
      return "gauge";
    case MetricKind::kHistogram:
      return "histogram";
    case MetricKind::kInfo:
      return "info";
  }
  return "gauge";
}

const std::vector<MetricSpec>& Catalog() {
  static const std::vector<MetricSpec>* catalog = new std::vector<MetricSpec>(BuildCatalog());
  return *catalog;
}

const MetricSpec& Spec(absl::string_view name) {
  for (const MetricSpec& spec : Catalog()) {
    if (spec.name == name) {
      return spec;
    }
  }
  throw std::logic_error(absl::StrCat("metric ", name, " is not in the catalogue"));
}

namespace {

const MetricSpec& SpecOfKind(absl::string_view name, std::initializer_list<MetricKind> kinds) {
  const MetricSpec& spec = Spec(name);
  for (MetricKind k : kinds) {
    if (spec.kind == k) {
      return spec;
    }
  }
  throw std::logic_error(
      absl::StrCat("metric ", name, " is a ", ToString(spec.kind), " in the catalogue"));
}

}  // namespace

prometheus::Family<prometheus::Counter>& BuildCounter(prometheus::Registry& registry,
                                                      absl::string_view name) {
  const MetricSpec& spec = SpecOfKind(name, {MetricKind::kCounter});
  return prometheus::BuildCounter().Name(spec.name).Help(spec.help).Register(registry);
}

prometheus::Family<prometheus::Gauge>& BuildGauge(prometheus::Registry& registry,
                                                  absl::string_view name) {
  const MetricSpec& spec = SpecOfKind(name, {MetricKind::kGauge, MetricKind::kInfo});
  return prometheus::BuildGauge().Name(spec.name).Help(spec.help).Register(registry);
}

prometheus::Family<prometheus::Histogram>& BuildHistogram(prometheus::Registry& registry,
                                                          absl::string_view name) {
  const MetricSpec& spec = SpecOfKind(name, {MetricKind::kHistogram});
  return prometheus::BuildHistogram().Name(spec.name).Help(spec.help).Register(registry);
}

const prometheus::Histogram::BucketBoundaries& DurationBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 45, 60, 120};
  return *buckets;
}

std::string CatalogMarkdown() {
  std::string out =
      "| metric | type | labels | roles | stability | description |\n|---|---|---|---|---|---|\n";
  for (const MetricSpec& spec : Catalog()) {
    std::vector<std::string> labels;
    for (const std::string& l : spec.labels) {
      labels.push_back(absl::StrCat("`", l, "`"));
    }
    absl::StrAppend(&out, "| `", spec.name, "` | ", ToString(spec.kind), " | ",
                    absl::StrJoin(labels, ", "), " | ", spec.roles, " | ", ToString(spec.stability),
                    " | ", spec.help, " |\n");
  }
  return out;
}

}  // namespace dralens::telemetry
