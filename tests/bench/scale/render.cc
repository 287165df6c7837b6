#include "tests/bench/scale/render.h"

#include <cstdlib>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "driver/slices/slice_builder.h"
#include "src/model/codec.h"
#include "src/model/inventory.h"

namespace dralens::bench::scale {
namespace {

using nlohmann::json;

constexpr ResourceInfo kInfos[kResourceCount] = {
    {"deviceclasses", "DeviceClass", "resource.k8s.io/v1",
     "/apis/resource.k8s.io/v1/deviceclasses"},
    {"nodes", "Node", "v1", "/api/v1/nodes"},
    {"resourceslices", "ResourceSlice", "resource.k8s.io/v1",
     "/apis/resource.k8s.io/v1/resourceslices"},
    {"resourceclaims", "ResourceClaim", "resource.k8s.io/v1",
     "/apis/resource.k8s.io/v1/resourceclaims"},
    {"pods", "Pod", "v1", "/api/v1/pods"},
};

constexpr char kDriverVersion[] = "580.95.05";
constexpr char kCudaVersion[] = "13.0";
constexpr char kKubeletVersion[] = "v1.34.2";

// A stable per-object hash for values that should look random but be reproducible.
uint64_t Mix(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (char c : text) {
    h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  }
  return h;
}

std::string HexOf(const std::string& seed, int digits) {
  Rng rng(Mix(seed));
  return rng.Hex(digits);
}

json Condition(const char* type, const char* status, absl::Time at, const char* reason = nullptr,
               const char* message = nullptr) {
  json c = {{"type", type},
            {"status", status},
            {"lastProbeTime", nullptr},
            {"lastTransitionTime", Rfc3339(at)}};
  if (reason != nullptr) {
    c["reason"] = reason;
  }
  if (message != nullptr) {
    c["message"] = message;
  }
  return c;
}

json NodeCondition(const char* type, const char* status, absl::Time heartbeat, absl::Time since,
                   const char* reason, const char* message) {
  return {{"type", type},
          {"status", status},
          {"lastHeartbeatTime", Rfc3339(heartbeat)},
          {"lastTransitionTime", Rfc3339(since)},
          {"reason", reason},
          {"message", message}};
}

const char* PhaseName(PodPhase phase) {
  switch (phase) {
    case PodPhase::kPending:
      return "Pending";
    case PodPhase::kRunning:
      return "Running";
    case PodPhase::kSucceeded:
      return "Succeeded";
  }
  return "Unknown";
}

}  // namespace

const ResourceInfo& InfoOf(Resource resource) { return kInfos[static_cast<int>(resource)]; }

std::string KeyOf(const json& object) {
  const json& md = object.at("metadata");
  const std::string name = md.value("name", "");
  const std::string ns = md.value("namespace", "");
  return ns.empty() ? name : absl::StrCat(ns, "/", name);
}

json RenderClass(int index, const Fleet& fleet) {
  const ClassDef& def = ClassAt(index);
  model::DeviceClass c;
  c.metadata.name = def.name;
  c.metadata.uid = HexOf(def.name, 8) + "-0000-4000-8000-" + HexOf(def.cel, 12);
  c.metadata.creation_timestamp = fleet.options.epoch - absl::Hours(24 * 60);
  c.metadata.labels = {{"app.kubernetes.io/managed-by", "Helm"},
                       {"app.kubernetes.io/name", "dralens"},
                       {"app.kubernetes.io/part-of", "dralens"}};
  c.metadata.annotations = {{"meta.helm.sh/release-name", "dralens"},
                            {"meta.helm.sh/release-namespace", "dralens-system"}};
  model::DeviceSelector selector;
  selector.cel = model::CelDeviceSelector{def.cel};
  c.spec.selectors.push_back(selector);
  return model::Encode(c);
}

json RenderNode(const Fleet& fleet, int index) {
  const Node& node = fleet.nodes[index];
  const Product& product = ProductOf(node.product);
  const absl::Time created = fleet.options.epoch - absl::Hours(24 * 30) + absl::Seconds(index);
  const absl::Time heartbeat = fleet.options.epoch - absl::Seconds(20 + index % 30);
  const absl::Time since = created + absl::Seconds(40);
  const std::string zone = absl::StrCat("us-east-1", std::string(1, "abcd"[index % 4]));
  json labels = {
      {"beta.kubernetes.io/arch", "amd64"},
      {"beta.kubernetes.io/os", "linux"},
      {"kubernetes.io/arch", "amd64"},
      {"kubernetes.io/hostname", node.name},
      {"kubernetes.io/os", "linux"},
      {"node.kubernetes.io/instance-type", product.instance_type},
      {"topology.kubernetes.io/region", "us-east-1"},
      {"topology.kubernetes.io/zone", zone},
      {"nvidia.com/gpu.present", "true"},
      {"nvidia.com/gpu.product", absl::StrReplaceAll(product.product_name, {{" ", "-"}})},
      {"nvidia.com/gpu.count", std::to_string(kGpusPerNode)},
      {"dralens.dev/gpu-node", "true"}};
  json conditions = json::array();
  conditions.push_back(NodeCondition("MemoryPressure", "False", heartbeat, since,
                                     "KubeletHasSufficientMemory",
                                     "kubelet has sufficient memory available"));
  conditions.push_back(NodeCondition("DiskPressure", "False", heartbeat, since,
                                     "KubeletHasNoDiskPressure", "kubelet has no disk pressure"));
  conditions.push_back(NodeCondition("PIDPressure", "False", heartbeat, since,
                                     "KubeletHasSufficientPID",
                                     "kubelet has sufficient PID available"));
  json taints = json::array();
  if (node.ready) {
    conditions.push_back(NodeCondition("Ready", "True", heartbeat, since, "KubeletReady",
                                       "kubelet is posting ready status"));
  } else {
    const absl::Time lost = fleet.options.epoch - absl::Minutes(42);
    conditions.push_back(NodeCondition("Ready", "Unknown", lost, lost, "NodeStatusUnknown",
                                       "Kubelet stopped posting node status."));
    taints.push_back({{"key", "node.kubernetes.io/unreachable"},
                      {"effect", "NoSchedule"},
                      {"timeAdded", Rfc3339(lost)}});
    taints.push_back({{"key", "node.kubernetes.io/unreachable"},
                      {"effect", "NoExecute"},
                      {"timeAdded", Rfc3339(lost)}});
  }
  json images = json::array();
  const char* kImages[][2] = {
      {"nvcr.io/nvidia/pytorch", "24.10-py3"},
      {"nvcr.io/nvidia/tritonserver", "24.10-py3"},
      {"nvcr.io/nvidia/k8s/dcgm-exporter", "4.2.3-4.1.3-ubuntu22.04"},
      {"ghcr.io/dralens/dralens", "0.4.0"},
      {"registry.k8s.io/kube-proxy", kKubeletVersion},
      {"docker.io/calico/node", "v3.29.1"},
      {"registry.k8s.io/pause", "3.10"},
      {"ghcr.io/ml-platform/trainer", "2026.11.3"},
  };
  int i = 0;
  for (const auto& image : kImages) {
    const std::string digest = HexOf(absl::StrCat(image[0], image[1]), 64);
    images.push_back(
        {{"names",
          {absl::StrCat(image[0], "@sha256:", digest), absl::StrCat(image[0], ":", image[1])}},
         {"sizeBytes", 80000000 + 731000000LL * (i++ % 7)}});
  }
  const uint64_t memory_kib = 2113470000ull + static_cast<uint64_t>(index % 97) * 4096;
  json node_json = {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata",
       {{"name", node.name},
        {"uid", node.uid},
        {"creationTimestamp", Rfc3339(created)},
        {"labels", labels},
        {"annotations",
         {{"node.alpha.kubernetes.io/ttl", "0"},
          {"volumes.kubernetes.io/controller-managed-attach-detach", "true"},
          {"csi.volume.kubernetes.io/nodeid",
           absl::StrCat("{\"ebs.csi.aws.com\":\"i-0", HexOf(node.name, 16), "\"}")}}}}},
      {"spec",
       {{"podCIDR", absl::StrFormat("10.%d.%d.0/24", 128 + (index >> 8), index & 255)},
        {"podCIDRs", {absl::StrFormat("10.%d.%d.0/24", 128 + (index >> 8), index & 255)}},
        {"providerID", absl::StrCat("aws:///", zone, "/i-0", HexOf(node.name, 16))}}},
      {"status",
       {{"capacity",
         {{"cpu", "192"},
          {"ephemeral-storage", "3750000000Ki"},
          {"hugepages-1Gi", "0"},
          {"hugepages-2Mi", "0"},
          {"memory", absl::StrCat(memory_kib, "Ki")},
          {"pods", "250"}}},
        {"allocatable",
         {{"cpu", "191450m"},
          {"ephemeral-storage", "3455000000000"},
          {"hugepages-1Gi", "0"},
          {"hugepages-2Mi", "0"},
          {"memory", absl::StrCat(memory_kib - 9400000, "Ki")},
          {"pods", "250"}}},
        {"conditions", conditions},
        {"addresses",
         {{{"type", "InternalIP"}, {"address", node.internal_ip}},
          {{"type", "Hostname"}, {"address", node.name}},
          {{"type", "InternalDNS"}, {"address", absl::StrCat(node.name, ".ec2.internal")}}}},
        {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", 10250}}}}},
        {"nodeInfo",
         {{"machineID", HexOf(node.name + "m", 32)},
          {"systemUUID", absl::StrCat("ec2", HexOf(node.name + "s", 5), "-", HexOf(node.name, 4),
                                      "-", HexOf(node.uid, 4), "-", HexOf(node.uid + "x", 4), "-",
                                      HexOf(node.uid + "y", 12))},
          {"bootID", node.uid},
          {"kernelVersion", "6.1.0-27-cloud-amd64"},
          {"osImage", "Debian GNU/Linux 12 (bookworm)"},
          {"containerRuntimeVersion", "containerd://1.7.24"},
          {"kubeletVersion", kKubeletVersion},
          {"kubeProxyVersion", kKubeletVersion},
          {"operatingSystem", "linux"},
          {"architecture", "amd64"}}},
        {"images", images}}}};
  if (!taints.empty()) {
    node_json["spec"]["taints"] = taints;
  }
  return node_json;
}

json RenderSlice(const Fleet& fleet, int index) {
  const Node& node = fleet.nodes[index];
  const Product& product = ProductOf(node.product);
  std::vector<model::GpuInfo> gpus;
  std::map<std::string, std::vector<model::DeviceTaint>> taints;
  const absl::Time tainted_at = fleet.options.epoch - absl::Hours(3);
  for (int m = 0; m < kGpusPerNode; ++m) {
    const Gpu& gpu = fleet.gpus[node.first_gpu + m];
    model::GpuInfo info;
    info.minor = static_cast<uint32_t>(m);
    info.index = static_cast<uint32_t>(m);
    info.uuid = gpu.uuid;
    info.product_name = product.product_name;
    info.brand = "Nvidia";
    info.architecture = product.architecture;
    info.cuda_compute_major = product.cuda_major;
    info.cuda_compute_minor = product.cuda_minor;
    info.memory_bytes = product.memory_mib << 20;
    info.pci_bus_id = gpu.pci_bus_id;
    info.pcie_root = absl::StrFormat("pci0000:%02x", (gpu.numa_node == 0 ? 0x10 : 0x90));
    info.numa_node = gpu.numa_node;
    gpus.push_back(std::move(info));
    std::vector<model::DeviceTaint>& t = taints[fleet.DeviceName(gpu)];
    if (gpu.maintenance_taint) {
      t.push_back({"gpu.dralens.dev/maintenance", "burn-in", "NoExecute", tainted_at});
    }
    if (gpu.xid_taint) {
      t.push_back({"gpu.dralens.dev/xid", "79", "NoSchedule", tainted_at});
    }
    if (gpu.info_taint) {
      t.push_back({"gpu.dralens.dev/ecc-corrected", "high", "None", tainted_at});
    }
    if (t.empty()) {
      taints.erase(fleet.DeviceName(gpu));
    }
  }
  absl::StatusOr<model::Inventory> inventory =
      model::Inventory::Create(kDriverVersion, kCudaVersion, std::move(gpus), {});
  if (!inventory.ok()) {
    std::fprintf(stderr, "scale fleet: inventory of %s: %s\n", node.name.c_str(),
                 std::string(inventory.status().message()).c_str());
    std::abort();
  }
  driver::slices::SliceBuilderOptions options;
  options.pool_generation = node.pool_generation;
  options.taints = std::move(taints);
  driver::slices::SliceBuilder builder({node.name, node.uid, kDriverName}, options);
  absl::StatusOr<std::vector<model::ResourceSlice>> slices = builder.Build(*inventory);
  if (!slices.ok() || slices->size() != 1) {
    std::fprintf(stderr, "scale fleet: slice of %s: %s\n", node.name.c_str(),
                 slices.ok() ? "not one slice" : std::string(slices.status().message()).c_str());
    std::abort();
  }
  model::ResourceSlice& slice = slices->front();
  slice.metadata.name = node.slice_name;
  slice.metadata.uid = node.slice_uid;
  slice.metadata.generation = node.pool_generation;
  slice.metadata.creation_timestamp =
      fleet.options.epoch - absl::Hours(24 * 29) + absl::Seconds(index);
  return model::Encode(slice);
}

json RenderClaim(const Fleet& fleet, int index) {
  const Claim& claim = fleet.claims[index];
  const Pod& pod = fleet.pods[claim.pod];
  model::ResourceClaim c;
  c.metadata.name = claim.name;
  c.metadata.generate_name = absl::StrCat(pod.name, "-gpu-");
  c.metadata.namespace_name = claim.ns;
  c.metadata.uid = claim.uid;
  c.metadata.creation_timestamp = claim.created;
  c.metadata.annotations = {{"resource.kubernetes.io/pod-claim-name", "gpu"}};
  c.metadata.owner_references.push_back({"v1", "Pod", pod.name, pod.uid, true, true});
  model::ExactDeviceRequest exact;
  exact.device_class_name = ClassAt(claim.request.device_class).name;
  exact.allocation_mode = "ExactCount";
  exact.count = claim.request.count;
  if (claim.request.selector != kNoSelector) {
    model::DeviceSelector selector;
    selector.cel = model::CelDeviceSelector{SelectorAt(claim.request.selector).cel};
    exact.selectors.push_back(selector);
  }
  model::DeviceRequest request;
  request.name = "gpu";
  request.exactly = exact;
  c.spec.devices.requests.push_back(request);
  if (!claim.gpus.empty()) {
    c.metadata.finalizers = {"resource.kubernetes.io/delete-protection"};
    model::AllocationResult allocation;
    std::string node_name;
    for (int g : claim.gpus) {
      const Gpu& gpu = fleet.gpus[g];
      node_name = fleet.nodes[gpu.node].name;
      model::DeviceRequestAllocationResult result;
      result.request = "gpu";
      result.driver = kDriverName;
      result.pool = node_name;
      result.device = fleet.DeviceName(gpu);
      allocation.devices.results.push_back(result);
    }
    model::NodeSelectorTerm term;
    term.match_fields.push_back({"metadata.name", "In", {node_name}});
    allocation.node_selector = model::NodeSelector{{term}};
    allocation.allocation_timestamp = claim.allocated_at;
    c.status.allocation = allocation;
    if (claim.reserved) {
      c.status.reserved_for.push_back({"", "pods", pod.name, pod.uid});
    }
  }
  return model::Encode(c);
}

json RenderPod(const Fleet& fleet, int index) {
  const Pod& pod = fleet.pods[index];
  const Claim& claim = fleet.claims[pod.claim];
  const std::string job_uid = HexOf(pod.job, 8) + "-" + HexOf(pod.job + "a", 4) + "-4" +
                              HexOf(pod.job + "b", 3) + "-8" + HexOf(pod.job + "c", 3) + "-" +
                              HexOf(pod.job + "d", 12);
  const std::string token_volume = absl::StrCat("kube-api-access-", HexOf(pod.uid, 5));
  const std::string image = "nvcr.io/nvidia/pytorch:24.10-py3";
  const std::string world = std::to_string(claim.request.count);
  json env = json::array(
      {{{"name", "NCCL_DEBUG"}, {"value", "WARN"}},
       {{"name", "NCCL_SOCKET_IFNAME"}, {"value", "eth0"}},
       {{"name", "WORLD_SIZE"}, {"value", world}},
       {{"name", "JOB_NAME"}, {"value", pod.job}},
       {{"name", "CHECKPOINT_DIR"}, {"value", absl::StrCat("s3://ml-checkpoints/", pod.job)}},
       {{"name", "POD_NAME"},
        {"valueFrom", {{"fieldRef", {{"apiVersion", "v1"}, {"fieldPath", "metadata.name"}}}}}},
       {{"name", "POD_NAMESPACE"},
        {"valueFrom",
         {{"fieldRef", {{"apiVersion", "v1"}, {"fieldPath", "metadata.namespace"}}}}}}});
  json trainer = {
      {"name", "trainer"},
      {"image", image},
      {"command", {"torchrun"}},
      {"args",
       {absl::StrCat("--nproc-per-node=", world), "/workspace/train.py",
        "--config=/etc/trainer/config.yaml", "--resume=auto"}},
      {"env", env},
      {"ports", {{{"name", "metrics"}, {"containerPort", 9400}, {"protocol", "TCP"}}}},
      {"resources",
       {{"requests", {{"cpu", "16"}, {"memory", "128Gi"}, {"ephemeral-storage", "50Gi"}}},
        {"limits", {{"memory", "128Gi"}, {"ephemeral-storage", "100Gi"}}},
        {"claims", {{{"name", "gpu"}}}}}},
      {"volumeMounts",
       {{{"name", "config"}, {"mountPath", "/etc/trainer"}, {"readOnly", true}},
        {{"name", "dshm"}, {"mountPath", "/dev/shm"}},
        {{"name", "datasets"}, {"mountPath", "/datasets"}, {"readOnly", true}},
        {{"name", token_volume},
         {"mountPath", "/var/run/secrets/kubernetes.io/serviceaccount"},
         {"readOnly", true}}}},
      {"readinessProbe",
       {{"httpGet", {{"path", "/healthz"}, {"port", 9400}, {"scheme", "HTTP"}}},
        {"periodSeconds", 10},
        {"timeoutSeconds", 1},
        {"successThreshold", 1},
        {"failureThreshold", 3}}},
      {"terminationMessagePath", "/dev/termination-log"},
      {"terminationMessagePolicy", "FallbackToLogsOnError"},
      {"imagePullPolicy", "IfNotPresent"}};
  json volumes = json::array(
      {{{"name", "config"}, {"configMap", {{"name", pod.job + "-config"}, {"defaultMode", 420}}}},
       {{"name", "dshm"}, {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", "32Gi"}}}},
       {{"name", "datasets"},
        {"persistentVolumeClaim", {{"claimName", "datasets-ro"}, {"readOnly", true}}}},
       {{"name", token_volume},
        {"projected",
         {{"defaultMode", 420},
          {"sources",
           {{{"serviceAccountToken", {{"expirationSeconds", 3607}, {"path", "token"}}}},
            {{"configMap",
              {{"name", "kube-root-ca.crt"},
               {"items", {{{"key", "ca.crt"}, {"path", "ca.crt"}}}}}}},
            {{"downwardAPI",
              {{"items",
                {{{"path", "namespace"},
                  {"fieldRef",
                   {{"apiVersion", "v1"}, {"fieldPath", "metadata.namespace"}}}}}}}}}}}}}}});
  json spec = {
      {"containers", {trainer}},
      {"volumes", volumes},
      {"resourceClaims", {{{"name", "gpu"}, {"resourceClaimTemplateName", "single-gpu"}}}},
      {"restartPolicy", "Never"},
      {"terminationGracePeriodSeconds", 30},
      {"dnsPolicy", "ClusterFirst"},
      {"serviceAccountName", "trainer"},
      {"serviceAccount", "trainer"},
      {"securityContext", {{"fsGroup", 1000}, {"runAsNonRoot", true}, {"runAsUser", 1000}}},
      {"schedulerName", "default-scheduler"},
      {"priorityClassName", "batch-standard"},
      {"priority", 1000},
      {"enableServiceLinks", false},
      {"preemptionPolicy", "PreemptLowerPriority"},
      {"tolerations",
       {{{"key", "node.kubernetes.io/not-ready"},
         {"operator", "Exists"},
         {"effect", "NoExecute"},
         {"tolerationSeconds", 300}},
        {{"key", "node.kubernetes.io/unreachable"},
         {"operator", "Exists"},
         {"effect", "NoExecute"},
         {"tolerationSeconds", 300}}}}};
  if (pod.node >= 0) {
    spec["nodeName"] = fleet.nodes[pod.node].name;
  }

  const absl::Time created = pod.created;
  json status = {{"phase", PhaseName(pod.phase)}, {"qosClass", "Burstable"}};
  json conditions = json::array();
  if (pod.node < 0) {
    conditions.push_back(Condition(
        "PodScheduled", "False", created, "Unschedulable",
        "0/12 nodes are available: 12 cannot allocate all claims. preemption: 0/12 nodes are "
        "available: 12 Preemption is not helpful for scheduling."));
  } else {
    const absl::Time scheduled = claim.gpus.empty() ? created : claim.allocated_at;
    const bool running = pod.phase == PodPhase::kRunning;
    const bool done = pod.phase == PodPhase::kSucceeded;
    const absl::Time started = running || done ? pod.started : scheduled;
    conditions.push_back(
        Condition("PodReadyToStartContainers", running ? "True" : "False", started));
    conditions.push_back(Condition("Initialized", "True", scheduled));
    conditions.push_back(
        Condition("Ready", running ? "True" : "False", started,
                  running ? nullptr : (done ? "PodCompleted" : "ContainersNotReady"),
                  running || done ? nullptr : "containers with unready status: [trainer]"));
    conditions.push_back(
        Condition("ContainersReady", running ? "True" : "False", started,
                  running ? nullptr : (done ? "PodCompleted" : "ContainersNotReady"),
                  running || done ? nullptr : "containers with unready status: [trainer]"));
    conditions.push_back(Condition("PodScheduled", "True", scheduled));
    const Node& node = fleet.nodes[pod.node];
    status["hostIP"] = node.internal_ip;
    status["hostIPs"] = {{{"ip", node.internal_ip}}};
    status["startTime"] = Rfc3339(scheduled);
    json statuses = json::array();
    for (const char* name : {"trainer"}) {
      const std::string& image_name = image;
      json state;
      if (running) {
        state = {{"running", {{"startedAt", Rfc3339(pod.started)}}}};
      } else if (done) {
        state = {{"terminated",
                  {{"exitCode", 0},
                   {"reason", "Completed"},
                   {"startedAt", Rfc3339(pod.started)},
                   {"finishedAt", Rfc3339(pod.started + absl::Hours(2))},
                   {"containerID", absl::StrCat("containerd://", HexOf(pod.uid + name, 64))}}}};
      } else {
        state = {{"waiting", {{"reason", "ContainerCreating"}}}};
      }
      json cs = {{"name", name},
                 {"state", state},
                 {"lastState", json::object()},
                 {"ready", running},
                 {"restartCount", 0},
                 {"image", image_name},
                 {"imageID", absl::StrCat(image_name.substr(0, image_name.find(':')),
                                          "@sha256:", HexOf(image_name, 64))},
                 {"started", running}};
      if (running || done) {
        cs["containerID"] = absl::StrCat("containerd://", HexOf(pod.uid + name, 64));
        cs["volumeMounts"] = {{{"name", token_volume},
                               {"mountPath", "/var/run/secrets/kubernetes.io/serviceaccount"},
                               {"readOnly", true},
                               {"recursiveReadOnly", "Disabled"}}};
      }
      statuses.push_back(cs);
    }
    status["containerStatuses"] = statuses;
    if (!pod.pod_ip.empty() && running) {
      status["podIP"] = pod.pod_ip;
      status["podIPs"] = {{{"ip", pod.pod_ip}}};
    }
  }
  status["conditions"] = conditions;
  status["resourceClaimStatuses"] = {{{"name", "gpu"}, {"resourceClaimName", claim.name}}};

  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", pod.name},
            {"generateName", pod.job + "-"},
            {"namespace", pod.ns},
            {"uid", pod.uid},
            {"creationTimestamp", Rfc3339(created)},
            {"labels",
             {{"app.kubernetes.io/name", "trainer"},
              {"app.kubernetes.io/instance", pod.job},
              {"batch.kubernetes.io/controller-uid", job_uid},
              {"batch.kubernetes.io/job-name", pod.job},
              {"controller-uid", job_uid},
              {"job-name", pod.job},
              {"ml-platform.dev/team", pod.ns},
              {"ml-platform.dev/queue", "default"}}},
            {"annotations",
             {{"batch.kubernetes.io/job-tracking", ""},
              {"kubectl.kubernetes.io/default-container", "trainer"},
              {"prometheus.io/scrape", "true"},
              {"prometheus.io/port", "9400"}}},
            {"ownerReferences",
             {{{"apiVersion", "batch/v1"},
               {"kind", "Job"},
               {"name", pod.job},
               {"uid", job_uid},
               {"controller", true},
               {"blockOwnerDeletion", true}}}},
            {"finalizers", {"batch.kubernetes.io/job-tracking"}}}},
          {"spec", spec},
          {"status", status}};
}

}  // namespace dralens::bench::scale
