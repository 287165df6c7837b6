#include "src/sim/demo_gang.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "src/common/status.h"

namespace dralens::sim {

absl::Status CreateDemoGang(k8s::KubeClient& client, const std::string& ns,
                            const std::string& driver) {
  using nlohmann::json;
  json workload = {
      {"apiVersion", "scheduling.k8s.io/v1alpha1"},
      {"kind", "Workload"},
      {"metadata", {{"name", kDemoGangWorkload}, {"namespace", ns}}},
      {"spec",
       {{"podGroups", json::array({{{"name", "workers"},
                                    {"policy", {{"gang", {{"minCount", kDemoGangPods}}}}}}})}}}};
  RETURN_IF_ERROR_CTX(client.Create(k8s::kWorkloads, ns, workload).status(), "create the Workload");
  for (int i = 0; i < kDemoGangPods; ++i) {
    const std::string name = absl::StrCat(kDemoGangWorkload, "-worker-", i);
    json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"name", name}, {"namespace", ns}}},
                  {"spec",
                   {{"devices",
                     {{"requests", json::array({{{"name", "gpus"},
                                                 {"exactly",
                                                  {{"deviceClassName", driver},
                                                   {"allocationMode", "ExactCount"},
                                                   {"count", kDemoGangGpusPerPod}}}}})}}}}}};
    RETURN_IF_ERROR_CTX(client.Create(k8s::kResourceClaims, ns, claim).status(),
                        "create a gang claim");
    json pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", name}, {"namespace", ns}}},
        {"spec",
         {{"workloadRef", {{"name", kDemoGangWorkload}, {"podGroup", "workers"}}},
          {"containers", json::array({{{"name", "trainer"}, {"image", "trainer"}}})},
          {"resourceClaims", json::array({{{"name", "gpus"}, {"resourceClaimName", name}}})}}}};
    RETURN_IF_ERROR_CTX(client.Create(k8s::kPods, ns, pod).status(), "create a gang pod");
  }
  return absl::OkStatus();
}

}  // namespace dralens::sim
