// Every flag of every role: its name, default, environment variable, the roles that take it,
// and how its value is checked. This is the CLI contract; flags.cc parses against it.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "src/app/flags.h"

namespace dralens::app {
namespace {

constexpr Role kAll[] = {Role::kNode, Role::kCluster, Role::kDemo};

std::function<std::string(absl::string_view)> OneOf(std::vector<std::string> allowed) {
  return [allowed](absl::string_view v) -> std::string {
    if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) {
      return "";
    }
    return absl::StrCat("must be one of ", absl::StrJoin(allowed, ", "));
  };
}

std::string CheckNonEmpty(absl::string_view v) { return v.empty() ? "must not be empty" : ""; }

std::string CheckAbsolutePath(absl::string_view v) {
  return absl::StartsWith(v, "/") ? "" : "must be an absolute path";
}

std::string CheckPositiveInt(absl::string_view v) {
  int n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < 1) {
    return "must be a positive integer";
  }
  return "";
}

std::string CheckNonNegativeNumber(absl::string_view v) {
  double d = 0;
  if (!absl::SimpleAtod(v, &d) || !(d >= 0)) {
    return "must be a number >= 0";
  }
  return "";
}

std::string CheckPositiveDuration(absl::string_view v) {
  absl::Duration d;
  if (!absl::ParseDuration(v, &d) || d <= absl::ZeroDuration()) {
    return "must be a positive duration such as 500ms, 2s or 1m";
  }
  return "";
}

std::string CheckNonNegativeDuration(absl::string_view v) {
  absl::Duration d;
  if (!absl::ParseDuration(v, &d) || d < absl::ZeroDuration()) {
    return "must be a duration >= 0 such as 0s, 30s or 2m";
  }
  return "";
}

std::string CheckHttpUrl(absl::string_view v) {
  if (!absl::StartsWith(v, "http://") && !absl::StartsWith(v, "https://")) {
    return "must be an http:// or https:// URL, e.g. http://127.0.0.1:4318";
  }
  return "";
}

std::string CheckUnsigned(absl::string_view v) {
  uint64_t n = 0;
  return absl::SimpleAtoi(v, &n) ? "" : "must be a non-negative integer";
}

std::vector<FlagSpec> BuildFlags() {
  const std::vector<Role> node = {Role::kNode, Role::kDemo};
  const std::vector<Role> all_and_explain = {Role::kNode, Role::kCluster, Role::kDemo,
                                             Role::kExplain};
  const std::vector<Role> all(std::begin(kAll), std::end(kAll));
  std::vector<FlagSpec> f;
  f.push_back({"node-name",
               "NODE_NAME",
               "",
               "Name of the Kubernetes Node this driver serves; also the ResourceSlice pool name. "
               "Required for `node`. The DaemonSet sets it from the downward API.",
               {Role::kNode},
               CheckDnsSubdomain});
  f.push_back({"driver-name", "DRALENS_DRIVER_NAME", "gpu.dralens.dev",
               "DRA driver name published in ResourceSlices and registered with the kubelet.", node,
               CheckDnsSubdomain});
  f.push_back({"kubeconfig",
               "KUBECONFIG",
               "",
               "Path to a kubeconfig file. Unset means the in-cluster service account "
               "(`explain`: ~/.kube/config when it exists; `demo` ignores it and uses its "
               "embedded API server).",
               {Role::kNode, Role::kCluster, Role::kExplain},
               nullptr});
  f.push_back({"server",
               "DRALENS_SERVER",
               "",
               "API server URL, e.g. the demo's `http://127.0.0.1:8080`; overrides the "
               "kubeconfig's.",
               {Role::kExplain},
               nullptr});
  f.push_back({"namespace",
               "DRALENS_NAMESPACE",
               "",
               "Namespace of the claim to explain; unset means the kubeconfig context's, else "
               "`default`.",
               {Role::kExplain},
               nullptr,
               /*is_bool=*/false,
               /*short_name=*/'n'});
  f.push_back({"output",
               "DRALENS_OUTPUT",
               "text",
               "`text`, or `json` (what the cluster role serves on "
               "`/debug/claims/<namespace>/<name>`).",
               {Role::kExplain},
               OneOf({"text", "json"}),
               /*is_bool=*/false,
               /*short_name=*/'o'});
  f.push_back({"kubelet-registry-dir", "DRALENS_KUBELET_REGISTRY_DIR",
               "/var/lib/kubelet/plugins_registry",
               "Kubelet plugin registration directory; the registration socket is "
               "`<dir>/<driver-name>-reg.sock`.",
               node, CheckAbsolutePath});
  f.push_back({"kubelet-plugins-dir", "DRALENS_KUBELET_PLUGINS_DIR", "/var/lib/kubelet/plugins",
               "Kubelet plugins directory; the driver uses `<dir>/<driver-name>/` for `dra.sock` "
               "and its checkpoint.",
               node, CheckAbsolutePath});
  f.push_back({"cdi-root", "DRALENS_CDI_ROOT", "/var/run/cdi",
               "Directory for the per-claim CDI spec files the container runtime reads.", node,
               CheckAbsolutePath});
  f.push_back({"device-source",
               "DRALENS_DEVICE_SOURCE",
               "nvml",
               "Where GPUs come from: `nvml` (libnvidia-ml.so.1, loaded at run time) or "
               "`simulated`.",
               {Role::kNode},
               OneOf({"nvml", "simulated"})});
  f.push_back(
      {"simulated-profile",
       "DRALENS_SIMULATED_PROFILE",
       "dgx-h100",
       "Built-in simulated node profile (`dgx-h100`, `h100x2`, `a100-40gb`, `mixed`) or the path "
       "of a JSON profile. Used with `--device-source=simulated`.",
       {Role::kNode},
       CheckNonEmpty});
  f.push_back({"device-taints",
               "DRALENS_DEVICE_TAINTS",
               "false",
               "Publish unhealthy devices (critical Xid, GPU lost) as ResourceSlice taints. Needs "
               "the DRADeviceTaints feature gate on the API server (beta and on from 1.36); the "
               "DRAResourceHealth stream is served either way.",
               {Role::kNode},
               OneOf({"true", "false"}),
               /*is_bool=*/true});
  f.push_back({"dynamic-mig",
               "DRALENS_DYNAMIC_MIG",
               "false",
               "Publish every MIG profile and placement of MIG-capable GPUs as partitionable "
               "devices and create the MIG instance when a claim is prepared (needs the "
               "DRAPartitionableDevices feature gate, beta and on from 1.36).",
               {Role::kNode},
               OneOf({"true", "false"}),
               /*is_bool=*/true});
  f.push_back({"consumable-capacity",
               "DRALENS_CONSUMABLE_CAPACITY",
               "false",
               "Publish full GPUs with `allowMultipleAllocations` and a memory request policy so "
               "that several claims share one GPU, each within its consumed memory (needs the "
               "DRAConsumableCapacity feature gate, alpha from 1.34).",
               {Role::kNode},
               OneOf({"true", "false"}),
               /*is_bool=*/true});
  f.push_back({"orphan-check-interval",
               "DRALENS_ORPHAN_CHECK_INTERVAL",
               "1m",
               "How often every prepared claim is checked against the API server for orphans "
               "(the ResourceClaim is gone, has another UID or is no longer allocated here); "
               "also checked at start.",
               {Role::kNode},
               CheckPositiveDuration});
  f.push_back({"unprepare-orphans-after",
               "DRALENS_UNPREPARE_ORPHANS_AFTER",
               "",
               "Unprepare a prepared claim once it has been orphaned for this long, as the "
               "kubelet would (CDI spec, checkpoint entry, MIG instances and sharing released). "
               "Unset: orphans are only reported.",
               {Role::kNode},
               [](absl::string_view v) { return v.empty() ? "" : CheckPositiveDuration(v); }});
  f.push_back({"utilization-interval", "DRALENS_UTILIZATION_INTERVAL", "10s",
               "How often the utilisation and memory used of every GPU and MIG device are "
               "sampled (`dralens_device_utilization_ratio`, `dralens_node_claim_idle_seconds`). "
               "0s: never.",
               node, CheckNonNegativeDuration});
  f.push_back({"idle-threshold", "DRALENS_IDLE_THRESHOLD", "0.05",
               "A prepared claim is idle while every one of its devices is below this "
               "utilisation (0 to 1).",
               node, [](absl::string_view v) {
                 double x = 0;
                 if (!absl::SimpleAtod(v, &x) || !(x > 0 && x <= 1)) {
                   return std::string("must be a number > 0 and <= 1 such as 0.05");
                 }
                 return std::string();
               }});
  f.push_back({"metrics-address", "DRALENS_METRICS_ADDRESS", "0.0.0.0:9477",
               "host:port serving /metrics, /healthz, /readyz and /debug. Port 0 picks a free "
               "port.",
               all, CheckHostPort});
  f.push_back({"metrics-tls-cert-file", "DRALENS_METRICS_TLS_CERT_FILE", "",
               "PEM certificate (chain) to serve the metrics endpoint over HTTPS; needs "
               "`--metrics-tls-key-file`.",
               all, nullptr});
  f.push_back({"metrics-tls-key-file", "DRALENS_METRICS_TLS_KEY_FILE", "",
               "PEM private key of `--metrics-tls-cert-file`.", all, nullptr});
  f.push_back({"metrics-bearer-token-file", "DRALENS_METRICS_BEARER_TOKEN_FILE", "",
               "File with a token that /metrics and /debug require as `Authorization: Bearer` "
               "(re-read when it changes); /healthz and /readyz stay open for probes.",
               all, nullptr});
  f.push_back({"api-server-address",
               "DRALENS_API_SERVER_ADDRESS",
               "127.0.0.1:8080",
               "host:port of the embedded API server the demo starts. Port 0 picks a free port.",
               {Role::kDemo},
               CheckHostPort});
  f.push_back({"demo-nodes",
               "DRALENS_DEMO_NODES",
               "2",
               "How many simulated nodes the demo starts, alternating an H100 node (two H100 "
               "80GB in dynamic-MIG mode) and an A100 node (eight A100 40GB).",
               {Role::kDemo},
               CheckPositiveInt});
  f.push_back({"demo-seed",
               "DRALENS_DEMO_SEED",
               "1",
               "Seed of the demo's workload generator: the same seed makes the same claims.",
               {Role::kDemo},
               CheckUnsigned});
  f.push_back({"demo-claim-interval",
               "DRALENS_DEMO_CLAIM_INTERVAL",
               "2s",
               "How often the demo's workload generator creates a claim and schedules, starts "
               "and finishes pods.",
               {Role::kDemo},
               CheckPositiveDuration});
  f.push_back({"demo-pod-duration",
               "DRALENS_DEMO_POD_DURATION",
               "60s",
               "Mean run time of the demo's pods (exponentially distributed).",
               {Role::kDemo},
               CheckPositiveDuration});
  f.push_back({"demo-fault-after",
               "DRALENS_DEMO_FAULT_AFTER",
               "60s",
               "When the demo's simulated GPU source reports a critical Xid (48, double-bit ECC "
               "error) on the last GPU of the first A100 node, so the device turns unhealthy and "
               "tainted as on real hardware; 0s never.",
               {Role::kDemo},
               CheckNonNegativeDuration});
  f.push_back({"otlp-endpoint",
               "OTEL_EXPORTER_OTLP_ENDPOINT",
               "",
               "OTLP/HTTP base URL every role of the demo sends its spans to (`/v1/traces` is "
               "appended); the flag wins over OTEL_EXPORTER_OTLP_TRACES_ENDPOINT too. Unset: "
               "tracing is off unless OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set.",
               {Role::kDemo},
               CheckHttpUrl});
  f.push_back({"with-prometheus",
               "DRALENS_WITH_PROMETHEUS",
               "false",
               "Also start Prometheus (`--prometheus-binary`) as a child process that scrapes "
               "the cluster role (job `dralens-cluster`) and every node (job `dralens-node`) in "
               "OpenMetrics with exemplar storage, and evaluates the alert rules; it keeps its "
               "data in the demo's temporary directory and stops with the demo.",
               {Role::kDemo},
               OneOf({"true", "false"}),
               /*is_bool=*/true});
  f.push_back({"prometheus-address",
               "DRALENS_PROMETHEUS_ADDRESS",
               "127.0.0.1:9090",
               "host:port of the web UI and API of `--with-prometheus`. Port 0 picks a free "
               "port.",
               {Role::kDemo},
               CheckHostPort});
  f.push_back({"prometheus-rules",
               "DRALENS_PROMETHEUS_RULES",
               "",
               "Rule file `--with-prometheus` loads. Unset: `alerts/dralens.rules.yaml`, found "
               "under `<binary>/../share/dralens/` or the source tree the binary was built from.",
               {Role::kDemo},
               nullptr});
  f.push_back({"prometheus-binary",
               "DRALENS_PROMETHEUS_BINARY",
               "/usr/bin/prometheus",
               "The Prometheus server `--with-prometheus` runs (2.x; Debian's `prometheus` "
               "package).",
               {Role::kDemo},
               CheckAbsolutePath});
  f.push_back({"prometheus-dcgm-targets",
               "DRALENS_PROMETHEUS_DCGM_TARGETS",
               "",
               "Comma-separated host:port list of dcgm-exporter endpoints `--with-prometheus` "
               "also scrapes (job `dcgm-exporter`), so that GPU utilisation joins with "
               "`dralens_node_claim_info` as on a real cluster.",
               {Role::kDemo},
               CheckHostPortList});
  f.push_back({"leader-elect",
               "DRALENS_LEADER_ELECT",
               "false",
               "Run for leadership through a coordination.k8s.io/v1 Lease; only the leader "
               "exports the `dralens_cluster_*` series (run two replicas).",
               {Role::kCluster},
               OneOf({"true", "false"}),
               /*is_bool=*/true});
  f.push_back({"leader-elect-lease-name",
               "DRALENS_LEADER_ELECT_LEASE_NAME",
               "dralens-cluster",
               "Name of the leader-election Lease.",
               {Role::kCluster},
               CheckDnsSubdomain});
  f.push_back({"leader-elect-lease-namespace",
               "POD_NAMESPACE",
               "default",
               "Namespace of the leader-election Lease; the Deployment sets it from the downward "
               "API.",
               {Role::kCluster},
               CheckDnsSubdomain});
  f.push_back({"leader-elect-identity",
               "POD_NAME",
               "",
               "This replica's identity in the Lease; unset means the host name. The Deployment "
               "sets it from the downward API.",
               {Role::kCluster},
               nullptr});
  f.push_back({"price-file",
               "DRALENS_PRICE_FILE",
               "",
               "JSON prices per GPU-hour by DeviceClass and product "
               "(`{\"default\": 2, \"deviceClasses\": {...}, \"products\": {...}}`); they turn "
               "stranded GPU-seconds into `dralens_cluster_stranded_cost_total` (a MIG instance or "
               "share costs its fraction of a GPU).",
               {Role::kCluster, Role::kExplain},
               nullptr});
  f.push_back({"price-per-device-hour",
               "DRALENS_PRICE_PER_DEVICE_HOUR",
               "0",
               "Price of one GPU-hour for GPUs the price file does not name.",
               {Role::kCluster, Role::kExplain},
               CheckNonNegativeNumber});
  f.push_back({"claim-events",
               "DRALENS_CLAIM_EVENTS",
               "true",
               "Write Kubernetes Events (events.k8s.io/v1) on pending claims, from the leader: the "
               "pending reason and each request's funnel, at most one per claim per reason "
               "change or per 10 minutes, 5 per second fleet-wide (`kubectl get events`).",
               {Role::kCluster, Role::kDemo},
               OneOf({"true", "false"})});
  f.push_back({"topology-sensitive-classes",
               "DRALENS_TOPOLOGY_SENSITIVE_CLASSES",
               "",
               "Comma-separated DeviceClass names whose multi-device claims need their devices "
               "close together: their `dralens_cluster_claim_spread` series carry "
               "`topology_sensitive=\"true\"`, which the alert DralensClaimTopologyPoor watches. "
               "Unset, the demo marks its full-GPU class.",
               {Role::kCluster, Role::kDemo, Role::kExplain},
               nullptr});
  f.push_back({"stranded-series-retention",
               "DRALENS_STRANDED_SERIES_RETENTION",
               "15m",
               "How long a node's `dralens_cluster_stranded_*` series stay at 0 once it stops "
               "stranding that kind for that class, before they are dropped: long enough for "
               "every scrape to read the counters' last values, so that a node keeps series for "
               "what it strands now or stranded lately, not for everything it ever stranded.",
               {Role::kCluster},
               CheckPositiveDuration});
  f.push_back({"log-level", "DRALENS_LOG_LEVEL", "info",
               "Lowest level logged: debug, info, warn or error. Lines go to stderr; the "
               "demo's go to its log file (see `--verbose`). `explain` logs warnings and errors "
               "unless set.",
               all_and_explain, OneOf({"debug", "info", "warn", "error"})});
  f.push_back({"verbose",
               "DRALENS_VERBOSE",
               "false",
               "The demo writes its log to `demo.log` in its temporary directory (the banner "
               "names it) and only warnings and errors to the terminal; `--verbose` (`-v`) "
               "writes every line to the terminal as well.",
               {Role::kDemo},
               OneOf({"true", "false"}),
               /*is_bool=*/true,
               /*short_name=*/'v'});
  return f;
}

}  // namespace

const std::vector<FlagSpec>& AllFlags() {
  static const std::vector<FlagSpec>* flags = new std::vector<FlagSpec>(BuildFlags());
  return *flags;
}

std::string CheckHostPort(absl::string_view value) {
  const size_t colon = value.rfind(':');
  if (colon == absl::string_view::npos) {
    return "must be host:port";
  }
  absl::string_view host = value.substr(0, colon);
  absl::string_view port = value.substr(colon + 1);
  int p = 0;
  if (!absl::SimpleAtoi(port, &p) || p < 0 || p > 65535 || port.empty()) {
    return "port must be a number from 0 to 65535";
  }
  if (absl::StartsWith(host, "[") != absl::EndsWith(host, "]")) {
    return "IPv6 hosts must be written in brackets, e.g. [::1]:9477";
  }
  return "";
}

std::string CheckHostPortList(absl::string_view value) {
  for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    if (std::string why = CheckHostPort(part); !why.empty()) {
      return absl::StrCat("\"", part, "\": ", why);
    }
  }
  return "";
}

std::string CheckDnsSubdomain(absl::string_view value) {
  if (value.empty() || value.size() > 253) {
    return "must be a DNS subdomain (1 to 253 characters)";
  }
  for (absl::string_view label : absl::StrSplit(value, '.')) {
    if (label.empty() || label.size() > 63 || !absl::ascii_isalnum(label.front()) ||
        !absl::ascii_isalnum(label.back())) {
      return "must be a DNS subdomain: lower-case labels of letters, digits and '-', separated "
             "by '.'";
    }
    for (char c : label) {
      if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-')) {
        return "must be a DNS subdomain: lower-case labels of letters, digits and '-', "
               "separated by '.'";
      }
    }
  }
  return "";
}

}  // namespace dralens::app
