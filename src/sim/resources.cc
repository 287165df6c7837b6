#include "src/sim/resources.h"

#include "src/sim/event_conversion.h"

namespace dralens::sim {
namespace {

std::vector<ResourceInfo> BuildResources() {
  std::vector<ResourceInfo> all;
  {
    ResourceInfo r;
    r.group = "resource.k8s.io";
    r.version = "v1";
    r.plural = "resourceslices";
    r.singular = "resourceslice";
    r.kind = "ResourceSlice";
    r.tracks_generation = true;
    r.field_labels = {"spec.nodeName", "spec.driver"};
    r.object_kind = ObjectKind::kResourceSlice;
    all.push_back(r);
  }
  {
    ResourceInfo r;
    r.group = "resource.k8s.io";
    r.version = "v1";
    r.plural = "resourceclaims";
    r.singular = "resourceclaim";
    r.kind = "ResourceClaim";
    r.namespaced = true;
    r.has_status = true;
    r.tracks_generation = true;
    r.object_kind = ObjectKind::kResourceClaim;
    all.push_back(r);
  }
  {
    ResourceInfo r;
    r.group = "resource.k8s.io";
    r.version = "v1";
    r.plural = "deviceclasses";
    r.singular = "deviceclass";
    r.kind = "DeviceClass";
    r.tracks_generation = true;
    r.object_kind = ObjectKind::kDeviceClass;
    all.push_back(r);
  }
  {
    ResourceInfo r;
    r.version = "v1";
    r.plural = "pods";
    r.singular = "pod";
    r.kind = "Pod";
    r.namespaced = true;
    r.has_status = true;
    r.tracks_generation = true;
    r.return_deleted_object = true;
    r.short_names = {"po"};
    r.categories = {"all"};
    r.field_labels = {
        "spec.nodeName",    "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase",       "status.podIP",       "status.nominatedNodeName"};
    r.object_kind = ObjectKind::kPod;
    all.push_back(r);
  }
  {
    ResourceInfo r;
    r.version = "v1";
    r.plural = "nodes";
    r.singular = "node";
    r.kind = "Node";
    r.has_status = true;
    r.short_names = {"no"};
    r.field_labels = {"spec.unschedulable"};
    r.object_kind = ObjectKind::kNode;
    all.push_back(r);
  }
  {
    ResourceInfo r;
    r.version = "v1";
    r.plural = "namespaces";
    r.singular = "namespace";
    r.kind = "Namespace";
    r.has_status = true;
    r.name_is_dns_label = true;
    r.short_names = {"ns"};
    r.field_labels = {"status.phase"};
    all.push_back(r);
  }
  {
    ResourceInfo r;
    r.group = "coordination.k8s.io";
    r.version = "v1";
    r.plural = "leases";
    r.singular = "lease";
    r.kind = "Lease";
    r.namespaced = true;
    r.allow_create_on_update = true;
    r.object_kind = ObjectKind::kLease;
    all.push_back(r);
  }
  // Events: one store (plural "events"), two faces. dralens writes events.k8s.io/v1; kubectl
  // get events and kubectl describe read core/v1.
  {
    ResourceInfo r;
    r.version = "v1";
    r.plural = "events";
    r.singular = "event";
    r.kind = "Event";
    r.namespaced = true;
    r.short_names = {"ev"};
    r.field_labels = {"involvedObject.kind",       "involvedObject.namespace",
                      "involvedObject.name",       "involvedObject.uid",
                      "involvedObject.apiVersion", "involvedObject.resourceVersion",
                      "involvedObject.fieldPath",  "reason",
                      "reportingComponent",        "type"};
    r.from_storage = CoreEventFromStorage;
    r.to_storage = CoreEventToStorage;
    r.event_table = true;
    all.push_back(r);
  }
  {
    ResourceInfo r;
    r.group = "events.k8s.io";
    r.version = "v1";
    r.plural = "events";
    r.singular = "event";
    r.kind = "Event";
    r.namespaced = true;
    r.short_names = {"ev"};
    r.object_kind = ObjectKind::kEventV1;
    all.push_back(r);
  }
  {
    ResourceInfo r;
    r.group = "scheduling.k8s.io";
    r.version = "v1alpha1";
    r.plural = "workloads";
    r.singular = "workload";
    r.kind = "Workload";
    r.namespaced = true;
    r.tracks_generation = true;
    r.feature_gate = "GenericWorkload";
    all.push_back(r);
  }
  return all;
}

}  // namespace

const std::vector<ResourceInfo>& AllResources() {
  static const std::vector<ResourceInfo>* const kAll =
      new std::vector<ResourceInfo>(BuildResources());
  return *kAll;
}

const ResourceInfo* FindResource(absl::string_view group, absl::string_view version,
                                 absl::string_view plural) {
  for (const ResourceInfo& r : AllResources()) {
    if (r.group == group && r.version == version && r.plural == plural) {
      return &r;
    }
  }
  return nullptr;
}

}  // namespace dralens::sim
