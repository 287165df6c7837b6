#include "exporter/cluster/feed.h"

#include <initializer_list>
#include <string>
#include <vector>

#include "src/common/log.h"
#include "src/model/codec.h"

namespace dralens::exporter::cluster {
namespace {

template <typename T>
void Apply(const nlohmann::json& object, const char* kind, const std::function<void(const T&)>& f) {
  absl::StatusOr<T> decoded = model::Decode<T>(object);
  if (!decoded.ok()) {
    DLOG(kWarn, "cluster", "skipping an object that does not decode",
         {{"kind", kind},
          {"object", k8s::ObjectKey(object)},
          {"error", decoded.status().message()}});
    return;
  }
  f(*decoded);
}

std::string Name(const nlohmann::json& object) {
  return object.value("metadata", nlohmann::json::object()).value("name", std::string());
}

std::string Namespace(const nlohmann::json& object) {
  return object.value("metadata", nlohmann::json::object()).value("namespace", std::string());
}

}  // namespace

NodeInfo NodeInfoOf(const nlohmann::json& node) {
  NodeInfo info;
  info.name = Name(node);
  const nlohmann::json status = node.value("status", nlohmann::json::object());
  const nlohmann::json conditions = status.value("conditions", nlohmann::json::array());
  if (conditions.is_array()) {
    for (const nlohmann::json& c : conditions) {
      if (c.is_object() && c.value("type", std::string()) == "Ready") {
        info.ready = c.value("status", std::string()) == "True";
      }
    }
  }
  return info;
}

std::shared_ptr<const k8s::Projection> ProjectionFor(const k8s::ResourceType& type) {
  // Of ObjectMeta, what the cluster role reads: the key and uid (analyzer, gang tracker),
  // resourceVersion (the informer), creationTimestamp (claim ages, gang waits) and
  // deletionTimestamp. Labels, annotations, owner references, finalizers and managedFields are
  // often most of a pod's metadata and nothing here reads them.
  auto with_meta = [](std::initializer_list<absl::string_view> more) {
    std::vector<absl::string_view> paths = {"apiVersion",
                                            "kind",
                                            "metadata.name",
                                            "metadata.namespace",
                                            "metadata.uid",
                                            "metadata.resourceVersion",
                                            "metadata.creationTimestamp",
                                            "metadata.deletionTimestamp"};
    paths.insert(paths.end(), more.begin(), more.end());
    return std::make_shared<const k8s::Projection>(k8s::Projection::Paths(paths));
  };
  if (type.plural == k8s::kPods.plural) {
    // The analyzer reads the phase; the gang tracker the node, claims and workloadRef. The
    // codec's Pod has containers, which the cluster role never reads.
    static const auto pods = with_meta({"spec.nodeName", "spec.resourceClaims", "spec.workloadRef",
                                        "status.phase", "status.resourceClaimStatuses"});
    return pods;
  }
  if (type.plural == k8s::kNodes.plural) {
    static const auto nodes = with_meta({"status.conditions"});
    return nodes;
  }
  if (type.plural == k8s::kResourceClaims.plural || type.plural == k8s::kResourceSlices.plural ||
      type.plural == k8s::kDeviceClasses.plural) {
    static const auto resources = with_meta({"spec", "status"});
    return resources;
  }
  return nullptr;
}

k8s::InformerHandlers HandlersFor(const k8s::ResourceType& type, Analyzer& analyzer) {
  k8s::InformerHandlers h;
  std::function<void(const nlohmann::json&)> upsert;
  std::function<void(const nlohmann::json&)> remove;
  if (type.plural == k8s::kResourceClaims.plural) {
    upsert = [&analyzer](const nlohmann::json& o) {
      Apply<model::ResourceClaim>(o, "ResourceClaim",
                                  [&](const model::ResourceClaim& c) { analyzer.UpsertClaim(c); });
    };
    remove = [&analyzer](const nlohmann::json& o) {
      model::ResourceClaim c;
      c.metadata.namespace_name = Namespace(o);
      c.metadata.name = Name(o);
      analyzer.DeleteClaim(c);
    };
  } else if (type.plural == k8s::kResourceSlices.plural) {
    upsert = [&analyzer](const nlohmann::json& o) {
      Apply<model::ResourceSlice>(o, "ResourceSlice",
                                  [&](const model::ResourceSlice& s) { analyzer.UpsertSlice(s); });
    };
    remove = [&analyzer](const nlohmann::json& o) { analyzer.DeleteSlice(Name(o)); };
  } else if (type.plural == k8s::kDeviceClasses.plural) {
    upsert = [&analyzer](const nlohmann::json& o) {
      Apply<model::DeviceClass>(o, "DeviceClass",
                                [&](const model::DeviceClass& c) { analyzer.UpsertClass(c); });
    };
    remove = [&analyzer](const nlohmann::json& o) { analyzer.DeleteClass(Name(o)); };
  } else if (type.plural == k8s::kPods.plural) {
    upsert = [&analyzer](const nlohmann::json& o) {
      Apply<model::Pod>(o, "Pod", [&](const model::Pod& p) { analyzer.UpsertPod(p); });
    };
    remove = [&analyzer](const nlohmann::json& o) { analyzer.DeletePod(Namespace(o), Name(o)); };
  } else if (type.plural == k8s::kNodes.plural) {
    upsert = [&analyzer](const nlohmann::json& o) { analyzer.UpsertNode(NodeInfoOf(o)); };
    remove = [&analyzer](const nlohmann::json& o) { analyzer.DeleteNode(Name(o)); };
  } else {
    return h;
  }
  h.on_add = upsert;
  h.on_update = [upsert](const nlohmann::json&, const nlohmann::json& o) { upsert(o); };
  h.on_delete = remove;
  return h;
}

}  // namespace dralens::exporter::cluster
