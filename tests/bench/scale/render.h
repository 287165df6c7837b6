// Render: the API objects of a Fleet as the API server would return them.
//
// ResourceSlices come from the node role's own SliceBuilder (driver/slices), so they have the
// exact shape `dralens node` publishes; claims and classes go through the resource.k8s.io/v1
// codec; Pods and Nodes are written out in full (containers, env, volumes, probes, conditions,
// container statuses, images) so that their size is that of a real cluster's objects.
// metadata.resourceVersion is left out: the server assigns it.
#pragma once

#include <string>

#include "nlohmann/json.hpp"
#include "tests/bench/scale/fleet.h"

namespace dralens::bench::scale {

// The five resource types `dralens cluster` lists and watches.
enum class Resource { kDeviceClasses, kNodes, kResourceSlices, kResourceClaims, kPods };
inline constexpr Resource kResources[] = {Resource::kDeviceClasses, Resource::kNodes,
                                          Resource::kResourceSlices, Resource::kResourceClaims,
                                          Resource::kPods};
inline constexpr int kResourceCount = 5;

struct ResourceInfo {
  const char* plural;
  const char* kind;
  const char* api_version;
  const char* path;  // the cluster-wide collection, e.g. "/api/v1/pods"
};
const ResourceInfo& InfoOf(Resource resource);

nlohmann::json RenderClass(int index, const Fleet& fleet);
nlohmann::json RenderNode(const Fleet& fleet, int node);
nlohmann::json RenderSlice(const Fleet& fleet, int node);
nlohmann::json RenderClaim(const Fleet& fleet, int claim);
nlohmann::json RenderPod(const Fleet& fleet, int pod);

// "namespace/name" or "name": the key an object is stored under.
std::string KeyOf(const nlohmann::json& object);

}  // namespace dralens::bench::scale
