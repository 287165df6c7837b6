// Feeds watch events (raw JSON from the informers) into an Analyzer, decoding each object with
// the model codecs. An object that does not decode is logged and skipped (the informer keeps
// it; the analyzer keeps what it had).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "exporter/cluster/analyzer.h"
#include "nlohmann/json.hpp"
#include "src/k8s/client.h"
#include "src/k8s/informer.h"
#include "src/model/resource.h"

namespace dralens::exporter::cluster {

// Handlers for an informer of `type` (claims, slices, classes, pods or nodes) that forward to
// `analyzer`, which must outlive the informer.
k8s::InformerHandlers HandlersFor(const k8s::ResourceType& type, Analyzer& analyzer);

// What the cluster role reads of each object of `type` (the analyzer through the model codecs,
// the gang tracker, the informer itself): its informers parse only that (src/k8s/projection.h).
// Pods keep their identity, node, claims, workload and phase, not their containers, volumes or
// conditions; Nodes their Ready condition; every object its metadata without managedFields.
// A ResourceSlice keeps each device as its JSON text, so that a republished slice decodes only
// the devices whose text changed. Null for a type read whole.
std::shared_ptr<const k8s::Projection> ProjectionFor(const k8s::ResourceType& type);

// A ResourceSlice as ProjectionFor leaves it (each device as its JSON text) or whole, decoded
// with every device: what Decode<ResourceSlice> makes of the whole object.
absl::StatusOr<model::ResourceSlice> DecodeSlice(const nlohmann::json& slice);

// A Node's readiness: false when its Ready condition is False or Unknown; true when Ready is
// True or when the Node reports no Ready condition at all.
NodeInfo NodeInfoOf(const nlohmann::json& node);

}  // namespace dralens::exporter::cluster
