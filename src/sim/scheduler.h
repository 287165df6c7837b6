// The demo's scheduler stand-in: allocates the workload generator's pending claims
// (workload.h) to published devices, as kube-scheduler's structured allocator would, for the
// claims that generator makes (one request, exactly, of `count` devices or of a share of
// capacity). Whether a device fits is decided by src/fit/device_fit.h, the rules the cluster
// analyzer explains pending claims by: class and request CEL selectors, NoSchedule/NoExecute
// taints unless the request tolerates them, shared counters of partitionable GPUs, and
// consumable capacity (a share only on allowMultipleAllocations devices, and nothing else there).
// On top of that, a device a claim holds is not given again.
//
// It knows nothing of topology: a multi-device request goes to the first node with enough
// devices that fit, and takes that node's first one and the rest from the far end of its list,
// as an unconstrained request may get them from a real scheduler (on a two-socket node, across
// NUMA nodes).
//
// Thread-safety: none; the workload calls it from its one step thread.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "src/cel/cel.h"
#include "src/common/clock.h"
#include "src/common/quantity.h"
#include "src/k8s/client.h"
#include "src/model/resource.h"

namespace dralens::sim {

// One device given, whole or in part, to a claim.
struct Placement {
  std::string pool;
  std::string device;
  std::vector<model::DeviceCounterConsumption> counters;  // what it consumes of shared counters
  // A consumable-capacity share: what it consumes of the device's capacities. Empty: the whole
  // device.
  std::map<std::string, common::Quantity> share;
};

class Scheduler {
 public:
  // `client` and `clock` must outlive the scheduler. Only slices of `driver` are considered.
  Scheduler(std::string driver, k8s::KubeClient& client, common::Clock& clock);

  // What the stand-in knows of the cluster in one step.
  struct View {
    std::vector<model::ResourceSlice> slices;
    std::map<std::string, model::DeviceClass> classes;
    std::map<std::string, common::Quantity> counter_capacity;  // pool/set/counter
  };
  // Lists the driver's ResourceSlices and the DeviceClasses.
  absl::StatusOr<View> Observe();

  // The devices that could serve `request` now, in slice order.
  std::vector<Placement> Fit(const model::ExactDeviceRequest& request, const View& view);

  struct Allocation {
    std::string node;
    std::vector<Placement> held;
  };
  // Allocates the pending claim ns/name and reserves it for `pods`: picks its devices, writes
  // status.allocation (results, config from the class and the claim, the node selector, the
  // allocation time) and status.reservedFor, and holds the devices until Release. nullopt when
  // too few devices fit (the claim stays pending; the cluster role says why).
  absl::StatusOr<std::optional<Allocation>> Allocate(const std::string& ns, const std::string& name,
                                                     const std::vector<std::string>& pods,
                                                     const View& view);

  // Gives back what an allocation held (the claim is deleted).
  void Release(const std::vector<Placement>& held);

 private:
  // Takes (or gives back) what `held` occupies: the device, its share, its shared counters.
  void Book(const Placement& held, bool take);
  // The verdict of one selector against a device, through the per-expression program cache.
  cel::Verdict Evaluate(const std::string& expression, const model::SliceDevice& device,
                        const std::string& driver);

  const std::string driver_;
  k8s::KubeClient& client_;
  common::Clock& clock_;
  std::set<std::string> allocated_;                        // pool/device
  std::map<std::string, common::Quantity> counters_used_;  // pool/set/counter
  // pool/device -> capacity -> what its shares consume
  std::map<std::string, std::map<std::string, common::Quantity>> shares_used_;
  int shares_ = 0;  // share IDs handed out
  std::map<std::string, std::unique_ptr<cel::Program>> programs_;
};

}  // namespace dralens::sim
