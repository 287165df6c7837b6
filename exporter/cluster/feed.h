// Feeds watch events (raw JSON from the informers) into an Analyzer, decoding each object with
// the model codecs. An object that does not decode is logged and skipped (the informer keeps
// it; the analyzer keeps what it had).
#pragma once

#include "exporter/cluster/analyzer.h"
#include "nlohmann/json.hpp"
#include "src/k8s/client.h"
#include "src/k8s/informer.h"

namespace dralens::exporter::cluster {

// Handlers for an informer of `type` (claims, slices, classes, pods or nodes) that forward to
// `analyzer`, which must outlive the informer.
k8s::InformerHandlers HandlersFor(const k8s::ResourceType& type, Analyzer& analyzer);

// A Node's readiness: false when its Ready condition is False or Unknown; true when Ready is
// True or when the Node reports no Ready condition at all.
NodeInfo NodeInfoOf(const nlohmann::json& node);

}  // namespace dralens::exporter::cluster
