// Truth: what `dralens cluster` must export for a Fleet, derived independently of the analyzer
// from the rules of CLUSTER-SPEC.md (the fleet has full GPUs only, so every GPU is one
// GPU-equivalent and the fraction rules do not arise):
//   - a GPU is unavailable when it carries a NoSchedule/NoExecute taint or its Node is NotReady
//     or gone (effect None does not count), allocated when a claim's allocation names it, else
//     free; unavailable wins over allocated;
//   - claim states are exclusive: pending (no allocation), allocated (no reservedFor),
//     reserved (no reserving pod Running), in_use; device_class is the first request's class;
//   - a pending claim's reason: unsatisfiable (no published device matches class + selectors),
//     tainted (every match unavailable), no_capacity (fewer free matches than the count), else
//     waiting_for_pod (the CEL of the fleet is all in the subset, so never unknown);
//   - stranded GPUs, each under one kind: advertised_unhealthy (unavailable), then
//     allocated_not_running (held by a claim that is not in use), then free_while_pending
//     (free and matching some pending claim's request); class: the holding claim's class, for
//     free_while_pending the class of the longest-pending claim it could serve (earliest
//     creationTimestamp, ties by "namespace/name"), else "".
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tests/bench/scale/fleet.h"

namespace dralens::bench::scale {

// The expected content of one metric family, keyed by some of its labels.
struct FamilyTruth {
  enum class Mode {
    kSum,       // the family summed over its other labels must equal `values` (0 may be absent)
    kPresence,  // exactly the keys in `values` must have a series (values are ignored)
  };
  std::string family;
  std::vector<std::string> labels;  // key label names
  Mode mode = Mode::kSum;
  std::map<std::vector<std::string>, double> values;
  // Whether this family exists on today's analyzer (a missing one is reported, not failed,
  // when the caller allows missing families).
  std::string what;  // one line for reports, e.g. "claims by state, class and namespace"
};

struct Truth {
  std::vector<FamilyTruth> families;
  // Totals for the summary line.
  std::map<std::string, int> claims_by_state;
  std::map<std::string, int> pending_by_reason;
  std::map<std::string, int> gpus_by_state;
  std::map<std::string, int> stranded_by_kind;
};

// GPUs per product: published, available (not unavailable) and free (available, not held).
// Every GPU of a product matches the same classes and selectors, so a request's reason needs
// only these counts.
class CapacityView {
 public:
  explicit CapacityView(const Fleet& fleet);
  // The pending reason of a request, by the rules above.
  const char* ReasonOf(const Request& request) const;

 private:
  struct Counts {
    int total = 0;
    int available = 0;
    int free = 0;
  };
  Counts counts_[kProductCount];
};

Truth ComputeTruth(const Fleet& fleet);

}  // namespace dralens::bench::scale
