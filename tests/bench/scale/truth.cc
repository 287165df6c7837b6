#include "tests/bench/scale/truth.h"

#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace dralens::bench::scale {
namespace {

bool RequestMatches(const Request& request, ProductId product) {
  return ClassAt(request.device_class).matches(product) &&
         (request.selector == kNoSelector || SelectorAt(request.selector).matches(product));
}

FamilyTruth Family(std::string name, std::vector<std::string> labels, std::string what) {
  FamilyTruth f;
  f.family = std::move(name);
  f.labels = std::move(labels);
  f.what = std::move(what);
  return f;
}

}  // namespace

CapacityView::CapacityView(const Fleet& fleet) {
  for (const Gpu& gpu : fleet.gpus) {
    Counts& c = counts_[static_cast<int>(fleet.ProductOfGpu(gpu))];
    ++c.total;
    if (!fleet.Unavailable(gpu)) {
      ++c.available;
      if (gpu.holder < 0) {
        ++c.free;
      }
    }
  }
}

const char* CapacityView::ReasonOf(const Request& request) const {
  Counts sum;
  for (int p = 0; p < kProductCount; ++p) {
    if (RequestMatches(request, static_cast<ProductId>(p))) {
      sum.total += counts_[p].total;
      sum.available += counts_[p].available;
      sum.free += counts_[p].free;
    }
  }
  if (sum.total == 0) {
    return "unsatisfiable";
  }
  if (sum.available == 0) {
    return "tainted";
  }
  if (sum.free < request.count) {
    return "no_capacity";
  }
  return "waiting_for_pod";
}

Truth ComputeTruth(const Fleet& fleet) {
  Truth truth;
  FamilyTruth claims = Family("dralens_cluster_claims", {"state", "device_class", "namespace"},
                              "claims by state, class and namespace");
  FamilyTruth pending = Family("dralens_cluster_pending_claims", {"device_class", "reason"},
                               "pending claims by class and reason");
  FamilyTruth ages =
      Family("dralens_cluster_pending_claim_age_seconds", {"namespace", "claim", "reason"},
             "one age series per pending claim, with its reason");
  ages.mode = FamilyTruth::Mode::kPresence;
  FamilyTruth gpus = Family("dralens_cluster_gpus", {"node", "driver", "product", "state"},
                            "GPUs by node, product and state");
  FamilyTruth stranded =
      Family("dralens_cluster_stranded_gpus", {"kind", "node", "product", "device_class"},
             "stranded GPUs by kind, node, product and class");

  const CapacityView capacity(fleet);
  // The longest-pending claim per product that could serve it: (created, key, class).
  using Oldest = std::tuple<absl::Time, std::string, int>;
  std::optional<Oldest> oldest[kProductCount];
  for (size_t i = 0; i < fleet.claims.size(); ++i) {
    const Claim& claim = fleet.claims[i];
    const ClaimState state = fleet.StateOf(claim);
    const std::string class_name = ClassAt(claim.request.device_class).name;
    claims.values[{ToString(state), class_name, claim.ns}] += 1;
    ++truth.claims_by_state[ToString(state)];
    if (state != ClaimState::kPending) {
      continue;
    }
    const std::string reason = capacity.ReasonOf(claim.request);
    pending.values[{class_name, reason}] += 1;
    ages.values[{claim.ns, claim.name, reason}] = 1;
    ++truth.pending_by_reason[reason];
    Oldest candidate{claim.created, absl::StrCat(claim.ns, "/", claim.name),
                     claim.request.device_class};
    for (int p = 0; p < kProductCount; ++p) {
      if (RequestMatches(claim.request, static_cast<ProductId>(p)) &&
          (!oldest[p].has_value() || candidate < *oldest[p])) {
        oldest[p] = candidate;
      }
    }
  }

  for (const Gpu& gpu : fleet.gpus) {
    const Node& node = fleet.nodes[gpu.node];
    const ProductId product = fleet.ProductOfGpu(gpu);
    const std::string product_name = ProductOf(product).product_name;
    const bool unavailable = fleet.Unavailable(gpu);
    const char* state = unavailable ? "unavailable" : (gpu.holder >= 0 ? "allocated" : "free");
    gpus.values[{node.name, kDriverName, product_name, state}] += 1;
    ++truth.gpus_by_state[state];

    const char* kind = nullptr;
    std::string device_class;
    if (gpu.holder >= 0) {
      device_class = ClassAt(fleet.claims[gpu.holder].request.device_class).name;
    }
    if (unavailable) {
      kind = "advertised_unhealthy";
    } else if (gpu.holder >= 0) {
      if (fleet.StateOf(gpu.holder) != ClaimState::kInUse) {
        kind = "allocated_not_running";
      }
    } else if (oldest[static_cast<int>(product)].has_value()) {
      kind = "free_while_pending";
      device_class = ClassAt(std::get<2>(*oldest[static_cast<int>(product)])).name;
    }
    if (kind != nullptr) {
      stranded.values[{kind, node.name, product_name, device_class}] += 1;
      ++truth.stranded_by_kind[kind];
    }
  }
  truth.families = {std::move(claims), std::move(pending), std::move(ages), std::move(gpus),
                    std::move(stranded)};
  return truth;
}

}  // namespace dralens::bench::scale
