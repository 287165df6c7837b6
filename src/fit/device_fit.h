// device_fit: whether a published device can serve one device request, by the rules the
// Kubernetes scheduler's structured allocator applies. The cluster analyzer
// (exporter/cluster/analyzer*.cc) explains pending claims with it, and the demo's scheduler
// stand-in (src/sim/scheduler.h) allocates with it, so the two never disagree on what fits.
//
// The rules, each a function below, that a caller combines for the request it judges:
//  - selectors: every CEL selector of the DeviceClass and of the request is true (src/cel). A
//    selector outside the CEL subset is unknown, never a wrong answer; the request's selectors
//    are consulted only once the class's are all true (MatchDevice);
//  - taints: a NoSchedule or NoExecute taint blocks the device unless one of the request's
//    tolerations tolerates it; effect None (or any other effect) never blocks;
//  - shared counters: a device that consumes counters fits only while, for every counter of
//    each counter set it draws on, used + consumption <= capacity (FitCounters);
//  - consumable capacity: a request for a share of a device's capacity goes only to devices
//    published with allowMultipleAllocations, and a request for a whole device never goes there
//    (SharingFits); a share fits while used + requested <= the device's capacity (CapacityFits).
// Whether the device is already held by a claim is the caller's state, not a rule here.
//
// Selectors are evaluated through callbacks, so that each caller keeps its own cache: the
// analyzer one verdict per (selector, device), the demo one compiled program per expression.
//
// Pure functions; thread-safe as long as the callbacks are.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "src/cel/cel.h"
#include "src/common/quantity.h"
#include "src/model/resource.h"

namespace dralens::fit {

// How a device stands to a request's selectors and tolerations, in increasing order of fit.
enum class Match {
  kNoMatch = 0,  // a class or request selector is false (or the class does not exist)
  kUnknown = 1,  // no selector is false, but one is outside the CEL subset
  kTainted = 2,  // every selector is true, but an untolerated NoSchedule/NoExecute taint blocks
  kMatch = 3,    // every selector is true and every blocking taint is tolerated
};
absl::string_view ToString(Match match);

// --- selectors ---------------------------------------------------------------------------------

// The verdict of a list of `count` selectors together, `evaluate(i)` judging the i-th: false as
// soon as one is false (later ones are not evaluated), else unknown when one is unknown, else
// true (also for an empty list).
cel::Verdict AllOf(size_t count, absl::FunctionRef<cel::Verdict(size_t)> evaluate);

// The verdict of all of a DeviceClass's, or of a request's, selectors against the device being
// judged; the caller evaluates them (see AllOf) through whatever cache it keeps.
using SelectorsVerdict = absl::FunctionRef<cel::Verdict()>;

// --- taints ------------------------------------------------------------------------------------

// A taint that keeps new allocations off the device: effect NoSchedule or NoExecute.
bool Blocking(const model::DeviceTaint& taint);
// Whether `toleration` tolerates `taint`: an empty effect matches every effect; operator Exists
// matches the key (an empty key matches every taint), Equal (the default) the key and the value.
bool Tolerates(const model::DeviceToleration& toleration, const model::DeviceTaint& taint);
// The first blocking taint of `taints` that none of `tolerations` tolerates; null if none.
const model::DeviceTaint* UntoleratedTaint(const std::vector<model::DeviceTaint>& taints,
                                           const std::vector<model::DeviceToleration>& tolerations);

// Selectors, then taints: kNoMatch when the class's selectors are false, kUnknown when they are
// unknown (the request's are then not evaluated), the same with the request's selectors, then
// kTainted when an untolerated blocking taint is on the device, else kMatch.
Match MatchDevice(SelectorsVerdict class_selectors, SelectorsVerdict request_selectors,
                  const std::vector<model::DeviceTaint>& taints,
                  const std::vector<model::DeviceToleration>& tolerations);

// --- shared counters ---------------------------------------------------------------------------

// Slack for counters kept as doubles (the analyzer's): sums of integral quantities are exact, and
// a fraction a hair over capacity after rounding still fits.
inline constexpr double kCounterSlack = 1e-9;

// Whether `need` fits in what a counter has `left`: need <= left (within kCounterSlack).
bool WithinCounter(double left, double need);

// What a device consumes of one counter set: the set (named as the caller keys it) and, per
// counter, the amount.
using CounterConsumption = std::pair<std::string, std::map<std::string, double>>;

// A device's consumesCounters as CounterConsumption, each set named as published.
std::vector<CounterConsumption> ConsumptionOf(const model::SliceDevice& device);

enum class CounterFit {
  kFits,        // every counter of every set has room
  kExceeds,     // some counter of a known set lacks room
  kMissingSet,  // nothing exceeds, but a set is unknown to the caller (not published, or not
                // yet seen): the scheduler refuses such a device; the analyzer does not judge it
};

// What is left of counter `counter` of counter set `set` (capacity minus what allocations use; 0
// for a counter the set does not have), or nullopt when the set is unknown.
using CounterLeft =
    absl::FunctionRef<std::optional<double>(const std::string& set, const std::string& counter)>;

// Whether a device consuming `consumes` fits what its counter sets have left. A device that
// consumes no counters fits.
CounterFit FitCounters(const std::vector<CounterConsumption>& consumes, CounterLeft left);

// --- consumable capacity -----------------------------------------------------------------------

// Whether a request may go to `device` by allocation kind: a request for a share of capacity
// (`share`) only to a device published with allowMultipleAllocations, a request for the whole
// device only to one without.
bool SharingFits(bool share, const model::SliceDevice& device);

// Whether a share fits a device with allowMultipleAllocations: for every requested capacity,
// what the device's other shares `used` + `requested` <= the device's capacity. A capacity the
// device does not publish does not fit; an empty request fits.
bool CapacityFits(const model::SliceDevice& device,
                  const std::map<std::string, common::Quantity>& requested,
                  const std::map<std::string, common::Quantity>& used);

}  // namespace dralens::fit
