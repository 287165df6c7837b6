// The demo's gang: a scheduling.k8s.io/v1alpha1 Workload whose pod group "workers" is a gang of
// four pods, each with a claim for three whole GPUs. Twelve GPUs at once is more than the demo's
// fleet has (ten), so the gang stays pending, as kube-scheduler would leave it: each of its claims
// could be served alone, together they are short, which only the gang series show. The demo's
// scheduler stand-in does not gang-schedule; it never touches these pods.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "src/k8s/client.h"

namespace dralens::sim {

inline constexpr char kDemoGangWorkload[] = "train-llm";
inline constexpr int kDemoGangPods = 4;
inline constexpr int kDemoGangGpusPerPod = 3;

// Creates the Workload, its claims and its pods in `ns`, for `driver`'s full-GPU class.
absl::Status CreateDemoGang(k8s::KubeClient& client, const std::string& ns,
                            const std::string& driver);

}  // namespace dralens::sim
