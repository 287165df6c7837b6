#include "exporter/cluster/explain.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace dralens::exporter::cluster {
namespace {

std::string Plural(int64_t n, absl::string_view one, absl::string_view many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

std::string NearText(const NearMiss& near) {
  std::string where =
      absl::StrCat(near.nodes.size() == 1 ? "node " : "nodes ", absl::StrJoin(near.nodes, ","));
  if (near.more_nodes > 0) {
    absl::StrAppend(&where, " and ", near.more_nodes, " more");
  }
  std::string what =
      absl::StrCat(near.devices, " free ", near.product.empty() ? "device" : near.product,
                   near.product.empty() && near.devices != 1 ? "s" : "");
  if (!near.taint.empty()) {
    return absl::StrCat(what, " on ", where, " would match with a toleration for ", near.taint);
  }
  return absl::StrCat(what, " on ", where, " would match without `", near.selector, "`");
}

std::string LeafText(const RequestFunnel& f) {
  if (!f.class_exists) {
    return absl::StrCat("class ", f.device_class, " does not exist");
  }
  std::vector<std::string> parts;
  parts.push_back(
      absl::StrCat("class ", f.device_class, ": ", Plural(f.class_devices, "device", "devices")));
  std::string matching = absl::StrCat(f.matching, " match the request's selectors");
  if (f.unknown > 0) {
    // Devices whose class or request selectors use CEL outside the subset.
    absl::StrAppend(&matching, " (", f.unknown, " more cannot be judged)");
  }
  parts.push_back(std::move(matching));
  parts.push_back(absl::StrCat(f.untainted, " untainted"));
  std::vector<std::string> busy;
  if (f.allocated > 0) {
    busy.push_back(
        absl::StrCat(f.allocated, " allocated to ", Plural(f.holders, "claim", "claims")));
  }
  if (f.blocked > 0) {
    busy.push_back(absl::StrCat(f.blocked, " on GPUs whose counters are used up"));
  }
  if (f.node_down > 0) {
    busy.push_back(absl::StrCat(f.node_down, " on NotReady or gone nodes"));
  }
  std::string free = absl::StrCat(f.free, " free");
  if (!busy.empty()) {
    absl::StrAppend(&free, " (", absl::StrJoin(busy, ", "), ")");
  } else if (f.counts_only && f.free < f.untainted) {
    absl::StrAppend(&free, " (dralens explain says who holds the rest)");
  }
  parts.push_back(std::move(free));
  parts.push_back(f.all ? std::string("needs all that match") : absl::StrCat("needs ", f.count));
  if (f.nearest.has_value()) {
    parts.push_back(absl::StrCat("nearest: ", NearText(*f.nearest)));
  }
  return absl::StrJoin(parts, "; ");
}

// Cuts `s` to at most `max` bytes without splitting a UTF-8 sequence, marking the cut.
std::string Cut(std::string s, size_t max) {
  if (s.size() <= max) {
    return s;
  }
  constexpr absl::string_view kMark = "...";
  size_t end = max > kMark.size() ? max - kMark.size() : 0;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) {
    --end;
  }
  s.resize(end);
  if (max >= kMark.size()) {
    s.append(kMark.data(), kMark.size());
  }
  return s;
}

std::string Duration(absl::Duration d) {
  if (d < absl::ZeroDuration()) {
    d = absl::ZeroDuration();
  }
  const int64_t s = absl::ToInt64Seconds(d);
  if (s < 60) {
    return absl::StrCat(s, "s");
  }
  if (s < 3600) {
    return absl::StrCat(s / 60, "m", s % 60 == 0 ? "" : absl::StrCat(s % 60, "s"));
  }
  return absl::StrCat(s / 3600, "h",
                      (s % 3600) / 60 == 0 ? "" : absl::StrCat((s % 3600) / 60, "m"));
}

nlohmann::json FunnelJson(const RequestFunnel& f) {
  nlohmann::json j = {{"request", f.request}};
  if (!f.options.empty()) {
    j["firstAvailable"] = nlohmann::json::array();
    for (const RequestFunnel& o : f.options) {
      j["firstAvailable"].push_back(FunnelJson(o));
    }
    j["reason"] = ToString(f.reason);
    return j;
  }
  j["deviceClass"] = f.device_class;
  j["classExists"] = f.class_exists;
  j["allocationMode"] = f.all ? "All" : "ExactCount";
  if (!f.all) {
    j["count"] = f.count;
  }
  j["reason"] = ToString(f.reason);
  j["funnel"] = {{"classDevices", f.class_devices},
                 {"undecidable", f.unknown},
                 {"matching", f.matching},
                 {"untainted", f.untainted},
                 {"free", f.free},
                 {"allocated", f.allocated},
                 {"allocatedToClaims", f.holders},
                 {"countersUsedUp", f.blocked},
                 {"onNodesDown", f.node_down},
                 {"countsOnly", f.counts_only}};
  if (f.nearest.has_value()) {
    const NearMiss& n = *f.nearest;
    j["nearest"] = {{"devices", n.devices},
                    {"product", n.product},
                    {"nodes", n.nodes},
                    {"moreNodes", n.more_nodes}};
    if (!n.selector.empty()) {
      j["nearest"]["withoutSelector"] = n.selector;
    }
    if (!n.taint.empty()) {
      j["nearest"]["untoleratedTaint"] = n.taint;
    }
  }
  j["text"] = FunnelText(f);
  return j;
}

std::string Money(double v) { return absl::StrFormat("%.2f", v); }

std::string GangText(const GangView& g) {
  return absl::StrCat(g.ns, "/", g.workload, " pod group ", g.pod_group,
                      g.replica.empty() ? "" : absl::StrCat(" replica ", g.replica), ": ",
                      g.scheduled, " of ", g.pods, " pods scheduled, needs ", g.min_count,
                      "; its pending claims, evaluated together, lack ", g.short_devices,
                      g.short_devices == 1 ? " device" : " devices");
}

}  // namespace

std::string EventReason(PendingReason reason) {
  switch (reason) {
    case PendingReason::kUnsatisfiable:
      return "Unsatisfiable";
    case PendingReason::kUnknown:
      return "Unknown";
    case PendingReason::kTainted:
      return "Tainted";
    case PendingReason::kNoCapacity:
      return "NoCapacity";
    case PendingReason::kWaitingForPod:
      return "WaitingForPod";
  }
  return "Unknown";
}

std::string FunnelText(const RequestFunnel& funnel) {
  if (funnel.options.empty()) {
    return LeafText(funnel);
  }
  std::vector<std::string> options;
  for (const RequestFunnel& o : funnel.options) {
    options.push_back(absl::StrCat("[", o.request, ": ", LeafText(o), "]"));
  }
  return absl::StrCat("first available of ", absl::StrJoin(options, " or "));
}

std::string PendingNote(const ClaimExplanation& e, size_t max_bytes) {
  std::vector<std::string> parts;
  if (e.gang.has_value()) {
    parts.push_back(absl::StrCat("gang ", GangText(*e.gang)));
  }
  for (const RequestFunnel& f : e.requests) {
    parts.push_back(absl::StrCat("request ", f.request, ": ", FunnelText(f)));
  }
  return Cut(absl::StrJoin(parts, " | "), max_bytes);
}

std::string ExplanationText(const ClaimExplanation& e) {
  std::string out = absl::StrCat("ResourceClaim ", e.ns, "/", e.name, " (uid ", e.uid, ")\n");
  if (e.state == ClaimState::kPending) {
    absl::StrAppend(&out, "State:    pending for ", Duration(e.now - e.created));
    if (e.reason.has_value()) {
      absl::StrAppend(&out, ", reason ", ToString(*e.reason), " (", EventReason(*e.reason), ")");
    }
    absl::StrAppend(&out, "\n");
    if (e.gang.has_value()) {
      absl::StrAppend(&out, "Gang:     ", GangText(*e.gang), "\n");
    }
    for (const RequestFunnel& f : e.requests) {
      absl::StrAppend(&out, "\nRequest ", f.request, " (", ToString(f.reason), "):\n");
      if (f.options.empty()) {
        absl::StrAppend(&out, "  ", FunnelText(f), "\n");
        continue;
      }
      for (const RequestFunnel& o : f.options) {
        absl::StrAppend(&out, "  option ", o.request, " (", ToString(o.reason), "): ", LeafText(o),
                        "\n");
      }
    }
    return out;
  }
  absl::StrAppend(&out, "State:    ", ToString(e.state));
  if (e.allocated_at.has_value()) {
    absl::StrAppend(&out, ", allocated ", Duration(e.now - *e.allocated_at), " ago at ",
                    absl::FormatTime(absl::RFC3339_sec, *e.allocated_at, absl::UTCTimeZone()));
  }
  absl::StrAppend(&out, "\nDevices:\n");
  for (const PlacedDevice& d : e.devices) {
    absl::StrAppend(&out, "  ", d.driver, "/", d.pool, "/", d.device, " on ",
                    d.node.empty() ? "(not published)" : d.node);
    std::vector<std::string> facts;
    if (!d.product.empty()) {
      facts.push_back(d.product);
    }
    if (!d.device_class.empty()) {
      facts.push_back(absl::StrCat("class ", d.device_class));
    }
    if (d.numa_node.has_value()) {
      facts.push_back(absl::StrCat("NUMA ", *d.numa_node));
    }
    if (!d.pcie_root.empty()) {
      facts.push_back(absl::StrCat("PCIe root ", d.pcie_root));
    }
    if (!d.nvlink_domain.empty()) {
      facts.push_back(absl::StrCat("NVLink domain ", d.nvlink_domain));
    }
    if (!facts.empty()) {
      absl::StrAppend(&out, " (", absl::StrJoin(facts, ", "), ")");
    }
    absl::StrAppend(&out, "\n");
  }
  if (e.topology.has_value()) {
    absl::StrAppend(&out, "Topology: ", ToString(e.topology->spread), ", NVLink ",
                    ToString(e.topology->nvlink),
                    e.topology_sensitive ? " (its class is marked topology-sensitive)" : "", "\n");
  }
  if (e.reserved_for.empty()) {
    absl::StrAppend(&out, "Used by:  no pod has reserved it\n");
  } else {
    std::vector<std::string> pods;
    for (const std::string& p : e.reserved_for) {
      bool running = false;
      for (const std::string& r : e.running_pods) {
        running = running || r == p;
      }
      pods.push_back(absl::StrCat("pod ", p, running ? " (Running)" : " (not running)"));
    }
    absl::StrAppend(&out, "Used by:  ", absl::StrJoin(pods, ", "), "\n");
  }
  absl::StrAppend(&out, "Holds:    ", absl::StrFormat("%.3g", e.gpus), " GPU",
                  std::fabs(e.gpus - 1) < 1e-9 ? "" : "s", "\n");
  if (e.allocated_at.has_value()) {
    absl::StrAppend(&out, "Cost:     ", Money(e.cost), " so far (",
                    absl::StrFormat("%.3f", e.gpu_seconds / 3600),
                    " GPU-hours while allocated, at today's prices)\n");
  } else {
    absl::StrAppend(&out,
                    "Cost:     unknown for this allocation: the claim has no "
                    "allocationTimestamp and was allocated before this view began");
    if (e.gpu_seconds > 0) {
      absl::StrAppend(&out, "; earlier allocations ", Money(e.cost), " (",
                      absl::StrFormat("%.3f", e.gpu_seconds / 3600), " GPU-hours)");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

nlohmann::json ExplanationJson(const ClaimExplanation& e) {
  nlohmann::json j = {
      {"namespace", e.ns},
      {"name", e.name},
      {"uid", e.uid},
      {"state", ToString(e.state)},
      {"created", absl::FormatTime(absl::RFC3339_sec, e.created, absl::UTCTimeZone())}};
  if (e.state == ClaimState::kPending) {
    j["pendingSeconds"] = std::max<int64_t>(0, absl::ToInt64Seconds(e.now - e.created));
    if (e.reason.has_value()) {
      j["reason"] = ToString(*e.reason);
      j["eventReason"] = EventReason(*e.reason);
    }
    j["requests"] = nlohmann::json::array();
    for (const RequestFunnel& f : e.requests) {
      j["requests"].push_back(FunnelJson(f));
    }
    j["note"] = PendingNote(e);
    if (e.gang.has_value()) {
      const GangView& g = *e.gang;
      j["gang"] = {
          {"workload", g.workload},          {"podGroup", g.pod_group}, {"replica", g.replica},
          {"minCount", g.min_count},         {"pods", g.pods},          {"scheduled", g.scheduled},
          {"shortDevices", g.short_devices}, {"text", GangText(g)}};
    }
    return j;
  }
  if (e.allocated_at.has_value()) {
    j["allocated"] = absl::FormatTime(absl::RFC3339_sec, *e.allocated_at, absl::UTCTimeZone());
  }
  j["devices"] = nlohmann::json::array();
  for (const PlacedDevice& d : e.devices) {
    nlohmann::json dj = {{"driver", d.driver},     {"pool", d.pool},
                         {"device", d.device},     {"node", d.node},
                         {"product", d.product},   {"deviceClass", d.device_class},
                         {"pcieRoot", d.pcie_root}};
    if (d.numa_node.has_value()) {
      dj["numaNode"] = *d.numa_node;
    }
    if (!d.nvlink_domain.empty()) {
      dj["nvlinkDomain"] = d.nvlink_domain;
    }
    j["devices"].push_back(std::move(dj));
  }
  if (e.topology.has_value()) {
    j["spread"] = ToString(e.topology->spread);
    j["nvlink"] = ToString(e.topology->nvlink);
    j["topologySensitive"] = e.topology_sensitive;
  }
  j["reservedFor"] = e.reserved_for;
  j["runningPods"] = e.running_pods;
  j["gpus"] = e.gpus;
  if (e.allocated_at.has_value()) {
    j["gpuSeconds"] = e.gpu_seconds;
    j["cost"] = e.cost;
  }
  return j;
}

}  // namespace dralens::exporter::cluster
