// ProjectionFor keeps everything the cluster role reads: for realistic objects of each watched
// kind, what the model codecs, NodeInfoOf and the gang tracker make of the projected object
// equals what they make of the full one. A field the cluster role starts to read must be added to
// ProjectionFor, or these tests fail.
#include "src/k8s/projection.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/feed.h"
#include "exporter/cluster/gangs.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/k8s/informer.h"
#include "src/model/codec.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "tests/exporter/cluster/scenario_util.h"

namespace dralens::exporter::cluster {
namespace {

using nlohmann::json;

// managedFields as a real API server writes them: often the larger half of an object.
json ManagedFields() {
  return json::parse(R"([
    {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
     "time": "2026-11-25T10:00:00Z", "fieldsType": "FieldsV1",
     "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                  "f:spec": {"f:containers": {"k:{\"name\":\"main\"}": {".": {}, "f:image": {}}}}}},
    {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "subresource": "status",
     "time": "2026-11-25T10:00:30Z", "fieldsType": "FieldsV1",
     "fieldsV1": {"f:status": {"f:conditions": {}, "f:phase": {}}}}
  ])");
}

json RealisticPod() {
  json pod = json::parse(R"({
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {
      "name": "train-0", "generateName": "train-", "namespace": "team", "uid": "pod-uid-0",
      "resourceVersion": "1234", "generation": 1, "creationTimestamp": "2026-11-25T10:00:00Z",
      "deletionTimestamp": "2026-11-25T11:00:00Z", "deletionGracePeriodSeconds": 30,
      "labels": {"app": "train", "job-name": "train"},
      "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-25T09:00:00Z"},
      "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                           "uid": "job-uid", "controller": true, "blockOwnerDeletion": true}],
      "finalizers": ["batch.kubernetes.io/job-tracking"]},
    "spec": {
      "nodeName": "node-a", "schedulerName": "default-scheduler", "restartPolicy": "Never",
      "workloadRef": {"name": "train", "podGroup": "workers", "podGroupReplicaKey": "0"},
      "containers": [
        {"name": "main", "image": "cuda:12.4", "command": ["python", "train.py"],
         "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
         "resources": {"claims": [{"name": "gpus", "request": "req"}],
                       "limits": {"cpu": "8", "memory": "64Gi"}},
         "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
        {"name": "sidecar", "image": "log:1"}],
      "volumes": [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "kube-api-access",
         "projected": {"sources": [{"serviceAccountToken": {"expirationSeconds": 3607,
                                                            "path": "token"}}]}}],
      "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "train-gpus"},
                         {"name": "nic", "resourceClaimName": "shared-nic"}],
      "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    "status": {
      "phase": "Running", "qosClass": "Burstable", "hostIP": "10.0.0.1", "podIP": "10.1.0.5",
      "startTime": "2026-11-25T10:00:05Z",
      "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-25T10:00:01Z"},
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-25T10:00:30Z"}],
      "containerStatuses": [{"name": "main", "ready": true, "restartCount": 0,
                             "image": "cuda:12.4", "imageID": "sha256:abc",
                             "state": {"running": {"startedAt": "2026-11-25T10:00:20Z"}}}],
      "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "train-0-gpus-x7k2p"}]}
  })");
  pod["metadata"]["managedFields"] = ManagedFields();
  return pod;
}

json RealisticClaim() {
  json claim = json::parse(R"({
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
    "metadata": {
      "name": "train-0-gpus-x7k2p", "generateName": "train-0-gpus-", "namespace": "team",
      "uid": "claim-uid", "resourceVersion": "1200", "creationTimestamp": "2026-11-25T10:00:00Z",
      "annotations": {"resource.kubernetes.io/pod-claim-name": "gpus"},
      "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "train-0",
                           "uid": "pod-uid-0", "controller": true, "blockOwnerDeletion": true}],
      "finalizers": ["resource.kubernetes.io/delete-protection"]},
    "spec": {"devices": {
      "requests": [{"name": "req", "exactly": {
        "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2,
        "selectors": [{"cel": {"expression": "device.attributes[\"gpu.dralens.dev\"].productName == \"H100\""}}],
        "tolerations": [{"key": "dralens.dev/xid", "operator": "Exists", "effect": "NoSchedule"}]}}],
      "constraints": [{"requests": ["req"], "matchAttribute": "gpu.dralens.dev/uuid"}],
      "config": [{"requests": ["req"], "opaque": {"driver": "gpu.dralens.dev",
                                                  "parameters": {"sharing": "TimeSlicing"}}}]}},
    "status": {
      "allocation": {
        "devices": {
          "results": [
            {"request": "req", "driver": "gpu.dralens.dev", "pool": "node-a", "device": "gpu-0"},
            {"request": "req", "driver": "gpu.dralens.dev", "pool": "node-a", "device": "gpu-1"}],
          "config": [{"source": "FromClaim", "requests": ["req"],
                      "opaque": {"driver": "gpu.dralens.dev",
                                 "parameters": {"sharing": "TimeSlicing"}}}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
          {"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]},
        "allocationTimestamp": "2026-11-25T10:00:02Z"},
      "reservedFor": [{"resource": "pods", "name": "train-0", "uid": "pod-uid-0"}],
      "devices": [{"driver": "gpu.dralens.dev", "pool": "node-a", "device": "gpu-0",
                   "data": {"uuid": "GPU-0"}}]}
  })");
  claim["metadata"]["managedFields"] = ManagedFields();
  return claim;
}

// Two placements of one GPU sharing its counters, one of them tainted.
json RealisticSlice() {
  std::vector<testing::DeviceSpec> placements;
  for (const char* name : {"gpu-0-7g", "gpu-0-3g"}) {
    placements.push_back({.name = name,
                          .type = "mig",
                          .product = "H100",
                          .uuid = std::string("MIG-") + name,
                          .profile = name == std::string("gpu-0-7g") ? "7g.80gb" : "3g.40gb",
                          .counter_set = "gpu-0",
                          .counters = name == std::string("gpu-0-7g") ? 8 : 4,
                          .tainted = name == std::string("gpu-0-3g")});
  }
  json slice = testing::Slice("node-a", placements, {{"gpu-0", 8}});
  slice["metadata"]["uid"] = "slice-uid";
  slice["metadata"]["resourceVersion"] = "77";
  slice["metadata"]["generation"] = 3;
  slice["metadata"]["ownerReferences"] = json::parse(
      R"([{"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "node-uid",
           "controller": true}])");
  slice["metadata"]["managedFields"] = ManagedFields();
  json& taint = slice["spec"]["devices"][1]["taints"][0];
  taint["value"] = "79";
  taint["timeAdded"] = "2026-11-25T10:05:00Z";
  return slice;
}

json RealisticClass() {
  json device_class = testing::Class("gpu", "device.driver == \"gpu.dralens.dev\"");
  device_class["metadata"]["uid"] = "class-uid";
  device_class["metadata"]["resourceVersion"] = "5";
  device_class["metadata"]["labels"] = {{"dralens.dev/class", "gpu"}};
  device_class["metadata"]["managedFields"] = ManagedFields();
  device_class["spec"]["config"] = json::parse(
      R"([{"opaque": {"driver": "gpu.dralens.dev", "parameters": {"sharing": "Exclusive"}}}])");
  return device_class;
}

json RealisticNode() {
  json node = json::parse(R"({
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "node-a", "uid": "node-uid", "resourceVersion": "99",
                 "creationTimestamp": "2026-11-01T00:00:00Z",
                 "labels": {"kubernetes.io/hostname": "node-a"},
                 "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
    "spec": {"podCIDR": "10.1.0.0/24",
             "taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]},
    "status": {
      "capacity": {"cpu": "64", "memory": "512Gi"}, "allocatable": {"cpu": "63"},
      "conditions": [
        {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
        {"type": "Ready", "status": "False", "reason": "KubeletNotReady",
         "lastTransitionTime": "2026-11-25T10:00:00Z"}],
      "nodeInfo": {"machineID": "m-1", "bootID": "b-1", "kubeletVersion": "v1.35.0"},
      "images": [{"names": ["cuda:12.4"], "sizeBytes": 123456789}]}
  })");
  node["metadata"]["managedFields"] = ManagedFields();
  return node;
}

// What the cluster role's informer hands over for `full`: its text parsed through the
// projection, as RestClient::List and Watch do. Also checks that parse against Project.
json Projected(const k8s::ResourceType& type, const json& full) {
  std::shared_ptr<const k8s::Projection> projection = ProjectionFor(type);
  EXPECT_NE(projection, nullptr) << type.plural;
  if (projection == nullptr) {
    return full;
  }
  absl::StatusOr<json> parsed = k8s::ParseProjected(full.dump(), *projection);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) {
    return json();
  }
  EXPECT_EQ(*parsed, k8s::Project(full, *projection));
  EXPECT_FALSE((*parsed)["metadata"].contains("managedFields")) << type.plural;
  return *parsed;
}

template <typename T>
T DecodeOrDie(const json& object) {
  absl::StatusOr<T> decoded = model::Decode<T>(object);
  EXPECT_TRUE(decoded.ok()) << decoded.status() << "\n" << object.dump();
  return decoded.ok() ? *decoded : T{};
}

// The metadata the cluster role reads (ProjectionFor's list): the rest is dropped.
model::ObjectMeta ReadMetadata(const model::ObjectMeta& full) {
  model::ObjectMeta read;
  read.name = full.name;
  read.namespace_name = full.namespace_name;
  read.uid = full.uid;
  read.resource_version = full.resource_version;
  read.creation_timestamp = full.creation_timestamp;
  read.deletion_timestamp = full.deletion_timestamp;
  return read;
}

TEST(ProjectionForTest, PodKeepsWhatTheAnalyzerReads) {
  const json full = RealisticPod();
  const json projected = Projected(k8s::kPods, full);
  EXPECT_FALSE(projected["spec"].contains("containers"));
  EXPECT_FALSE(projected["spec"].contains("volumes"));
  EXPECT_FALSE(projected["status"].contains("conditions"));
  EXPECT_FALSE(projected["status"].contains("containerStatuses"));

  const model::Pod want = DecodeOrDie<model::Pod>(full);
  const model::Pod got = DecodeOrDie<model::Pod>(projected);
  // The full object is what it claims to be: every field below has a value to lose.
  ASSERT_FALSE(want.spec.containers.empty());
  // Every metadata field kept has a value to lose, and so has every one dropped.
  ASSERT_FALSE(want.metadata.name.empty());
  ASSERT_FALSE(want.metadata.namespace_name.empty());
  ASSERT_FALSE(want.metadata.uid.empty());
  ASSERT_FALSE(want.metadata.resource_version.empty());
  ASSERT_TRUE(want.metadata.creation_timestamp.has_value());
  ASSERT_FALSE(want.metadata.labels.empty());
  ASSERT_FALSE(want.metadata.owner_references.empty());
  ASSERT_EQ(want.spec.resource_claims.size(), 2u);
  ASSERT_EQ(want.status.resource_claim_statuses.size(), 1u);
  EXPECT_EQ(got.metadata, ReadMetadata(want.metadata));
  EXPECT_TRUE(got.metadata.labels.empty());
  EXPECT_TRUE(got.metadata.owner_references.empty());
  EXPECT_EQ(got.spec.node_name, want.spec.node_name);
  EXPECT_EQ(got.spec.resource_claims, want.spec.resource_claims);
  EXPECT_EQ(got.status.phase, want.status.phase);
  EXPECT_EQ(got.status.resource_claim_statuses, want.status.resource_claim_statuses);
  EXPECT_TRUE(got.spec.containers.empty());
}

TEST(ProjectionForTest, ClaimSliceAndClassDecodeEqual) {
  const json claim = RealisticClaim();
  const model::ResourceClaim want_claim = DecodeOrDie<model::ResourceClaim>(claim);
  ASSERT_TRUE(want_claim.status.allocation.has_value());
  ASSERT_FALSE(want_claim.status.reserved_for.empty());
  model::ResourceClaim got_claim =
      DecodeOrDie<model::ResourceClaim>(Projected(k8s::kResourceClaims, claim));
  EXPECT_EQ(got_claim.metadata, ReadMetadata(want_claim.metadata));
  EXPECT_EQ(got_claim.spec, want_claim.spec);
  EXPECT_EQ(got_claim.status, want_claim.status);

  const json slice = RealisticSlice();
  const model::ResourceSlice want_slice = DecodeOrDie<model::ResourceSlice>(slice);
  ASSERT_FALSE(want_slice.spec.shared_counters.empty());
  ASSERT_FALSE(want_slice.spec.devices.at(1).taints.empty());
  // Its devices are kept as text, decoded one by one (DecodeSlice, as the feed does).
  const json projected_slice = Projected(k8s::kResourceSlices, slice);
  ASSERT_TRUE(projected_slice["spec"]["devices"].at(0).is_string());
  absl::StatusOr<model::ResourceSlice> decoded_slice = DecodeSlice(projected_slice);
  ASSERT_TRUE(decoded_slice.ok()) << decoded_slice.status();
  const model::ResourceSlice& got_slice = *decoded_slice;
  EXPECT_EQ(got_slice.metadata, ReadMetadata(want_slice.metadata));
  EXPECT_EQ(got_slice.spec, want_slice.spec);

  const json device_class = RealisticClass();
  const model::DeviceClass want_class = DecodeOrDie<model::DeviceClass>(device_class);
  model::DeviceClass got_class =
      DecodeOrDie<model::DeviceClass>(Projected(k8s::kDeviceClasses, device_class));
  EXPECT_EQ(got_class.metadata, ReadMetadata(want_class.metadata));
  EXPECT_EQ(got_class.spec, want_class.spec);
}

TEST(ProjectionForTest, NodeKeepsItsReadiness) {
  const json full = RealisticNode();
  const json projected = Projected(k8s::kNodes, full);
  const NodeInfo want = NodeInfoOf(full);
  const NodeInfo got = NodeInfoOf(projected);
  EXPECT_EQ(got.name, want.name);
  EXPECT_EQ(got.ready, want.ready);
  EXPECT_FALSE(want.ready);  // so that losing the conditions would show
  EXPECT_EQ(DecodeOrDie<model::Node>(projected).metadata,
            ReadMetadata(DecodeOrDie<model::Node>(full).metadata));
}

// A gang tracker with its own analyzer, fed pods of one gang of minCount 3.
class Tracker {
 public:
  Tracker()
      : analyzer_(registry_, tracer_, AnalyzerOptions{{}, &clock_}),
        gangs_(analyzer_, registry_, &clock_) {
    gangs_.UpsertWorkload(
        {{"apiVersion", "scheduling.k8s.io/v1alpha1"},
         {"kind", "Workload"},
         {"metadata", {{"namespace", "team"}, {"name", "train"}}},
         {"spec",
          {{"podGroups",
            json::array({{{"name", "workers"}, {"policy", {{"gang", {{"minCount", 3}}}}}}})}}}});
  }
  GangTracker& gangs() { return gangs_; }

 private:
  prometheus::Registry registry_;
  telemetry::NoopTracer tracer_;
  common::FakeClock clock_{absl::FromUnixSeconds(1795600800)};  // 2026-11-25T10:00:00Z
  Analyzer analyzer_;
  GangTracker gangs_;
};

void ExpectSameGangs(const std::vector<GangView>& got, const std::vector<GangView>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].ns, want[i].ns);
    EXPECT_EQ(got[i].workload, want[i].workload);
    EXPECT_EQ(got[i].pod_group, want[i].pod_group);
    EXPECT_EQ(got[i].replica, want[i].replica);
    EXPECT_EQ(got[i].min_count, want[i].min_count);
    EXPECT_EQ(got[i].pods, want[i].pods);
    EXPECT_EQ(got[i].scheduled, want[i].scheduled);
    EXPECT_EQ(got[i].since, want[i].since);
    EXPECT_EQ(got[i].claims, want[i].claims);
    EXPECT_EQ(got[i].short_devices, want[i].short_devices);
  }
}

TEST(ProjectionForTest, TheGangTrackerSeesTheSameGang) {
  // One scheduled pod and one waiting, with claims by name and from a template (in its status).
  const json scheduled = RealisticPod();
  json waiting = RealisticPod();
  waiting["metadata"]["name"] = "train-1";
  waiting["metadata"]["creationTimestamp"] = "2026-11-25T09:59:00Z";
  waiting["spec"].erase("nodeName");
  waiting["status"]["phase"] = "Pending";
  waiting["status"]["resourceClaimStatuses"][0]["resourceClaimName"] = "train-1-gpus-abcde";

  Tracker full, projected;
  for (const json& pod : {scheduled, waiting}) {
    full.gangs().UpsertPod(pod);
    projected.gangs().UpsertPod(Projected(k8s::kPods, pod));
  }
  full.gangs().Refresh();
  projected.gangs().Refresh();
  const std::vector<GangView> want = full.gangs().Gangs();
  ASSERT_EQ(want.size(), 1u);
  EXPECT_EQ(want[0].pods, 2);
  EXPECT_EQ(want[0].scheduled, 1);
  EXPECT_EQ(want[0].replica, "0");
  EXPECT_EQ(want[0].since, absl::FromUnixSeconds(1795600740));
  EXPECT_EQ(want[0].claims, (std::vector<std::string>{"shared-nic", "train-1-gpus-abcde"}));
  ExpectSameGangs(projected.gangs().Gangs(), want);
  for (const char* claim : {"shared-nic", "train-1-gpus-abcde", "train-0-gpus-x7k2p"}) {
    EXPECT_EQ(projected.gangs().GangOfClaim("team", claim).has_value(),
              full.gangs().GangOfClaim("team", claim).has_value())
        << claim;
  }
}

}  // namespace
}  // namespace dralens::exporter::cluster
