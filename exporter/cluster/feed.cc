#include "exporter/cluster/feed.h"

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/k8s/projection.h"
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

// A ResourceSlice taken apart for decoding its devices lazily: the slice without its devices,
// and its devices. Each device is its JSON text where the slice came through ProjectionFor (a
// text path), else an object. A devices value that is no array stays in the head, for the codec
// to report as it would for the whole object.
struct SplitSlice {
  nlohmann::json head;
  const nlohmann::json* devices = nullptr;
};

SplitSlice Split(const nlohmann::json& object) {
  SplitSlice out;
  if (!object.is_object()) {
    out.head = object;
    return out;
  }
  out.head = nlohmann::json::object();
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (it.key() != "spec" || !it->is_object()) {
      out.head[it.key()] = *it;
      continue;
    }
    nlohmann::json& spec = out.head["spec"] = nlohmann::json::object();
    for (auto field = it->begin(); field != it->end(); ++field) {
      if (field.key() == "devices" && field->is_array()) {
        out.devices = &*field;
      } else if (field.key() == "devices" && field->is_string()) {
        // The text of a value that is no array: parsed back, for the codec's type error.
        absl::StatusOr<nlohmann::json> value =
            k8s::ParseProjected(field->get_ref<const std::string&>(), k8s::Projection());
        spec["devices"] = value.ok() ? *std::move(value) : *field;
      } else {
        spec[field.key()] = *field;
      }
    }
  }
  return out;
}

// What of a published device the analyzer's record depends on: its text and its slice's
// driver, pool name and node name. Never 0, which stands for "unknown".
uint64_t Digest(const model::ResourceSlice& head, absl::string_view text) {
  const uint64_t digest =
      absl::HashOf(head.spec.driver, head.spec.pool.name, head.spec.node_name.value_or(""), text);
  return digest == 0 ? 1 : digest;
}

absl::StatusOr<model::SliceDevice> DecodeDevice(const nlohmann::json& device, size_t index) {
  if (!device.is_string()) {
    return model::DecodeSliceDevice(device, index);
  }
  absl::StatusOr<nlohmann::json> parsed =
      k8s::ParseProjected(device.get_ref<const std::string&>(), k8s::Projection());
  if (!parsed.ok()) {
    return common::Annotate(parsed.status(),
                            absl::StrCat("decode ResourceSlice: spec.devices[", index, "]"));
  }
  return model::DecodeSliceDevice(*parsed, index);
}

void FeedSlice(const nlohmann::json& object, Analyzer& analyzer) {
  const SplitSlice split = Split(object);
  absl::StatusOr<model::ResourceSlice> head = model::Decode<model::ResourceSlice>(split.head);
  absl::Status status = head.status();
  if (head.ok()) {
    std::vector<uint64_t> digests;
    if (split.devices != nullptr) {
      digests.reserve(split.devices->size());
      for (const nlohmann::json& device : *split.devices) {
        digests.push_back(device.is_string() ? Digest(*head, device.get_ref<const std::string&>())
                                             : 0);
      }
    }
    status = analyzer.UpsertSlice(
        *head, digests, [&split](size_t i) { return DecodeDevice((*split.devices)[i], i); });
  }
  if (!status.ok()) {
    DLOG(kWarn, "cluster", "skipping an object that does not decode",
         {{"kind", "ResourceSlice"},
          {"object", k8s::ObjectKey(object)},
          {"error", status.message()}});
  }
}

std::string Name(const nlohmann::json& object) {
  return object.value("metadata", nlohmann::json::object()).value("name", std::string());
}

std::string Namespace(const nlohmann::json& object) {
  return object.value("metadata", nlohmann::json::object()).value("namespace", std::string());
}

}  // namespace

absl::StatusOr<model::ResourceSlice> DecodeSlice(const nlohmann::json& slice) {
  const SplitSlice split = Split(slice);
  absl::StatusOr<model::ResourceSlice> out = model::Decode<model::ResourceSlice>(split.head);
  if (!out.ok() || split.devices == nullptr) {
    return out;
  }
  for (size_t i = 0; i < split.devices->size(); ++i) {
    absl::StatusOr<model::SliceDevice> device = DecodeDevice((*split.devices)[i], i);
    if (!device.ok()) {
      return device.status();
    }
    out->spec.devices.push_back(*std::move(device));
  }
  return out;
}

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
  auto with_meta = [](std::initializer_list<absl::string_view> more,
                      std::initializer_list<absl::string_view> text = {}) {
    std::vector<absl::string_view> paths = {"apiVersion",
                                            "kind",
                                            "metadata.name",
                                            "metadata.namespace",
                                            "metadata.uid",
                                            "metadata.resourceVersion",
                                            "metadata.creationTimestamp",
                                            "metadata.deletionTimestamp"};
    paths.insert(paths.end(), more.begin(), more.end());
    return std::make_shared<const k8s::Projection>(
        k8s::Projection::Paths(paths, std::vector<absl::string_view>(text)));
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
  if (type.plural == k8s::kResourceSlices.plural) {
    // The spec's fields one by one (a ResourceSlice has no status), its devices as text: the
    // analyzer decodes a device only when its text changed (FeedSlice).
    static const auto slices =
        with_meta({"spec.driver", "spec.pool", "spec.nodeName", "spec.nodeSelector",
                   "spec.allNodes", "spec.perDeviceNodeSelection", "spec.sharedCounters"},
                  {"spec.devices"});
    return slices;
  }
  if (type.plural == k8s::kResourceClaims.plural || type.plural == k8s::kDeviceClasses.plural) {
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
    upsert = [&analyzer](const nlohmann::json& o) { FeedSlice(o, analyzer); };
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
